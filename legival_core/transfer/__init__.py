"""Transfer utility (SPEC section 4): rollout depths, the rollout planner, and the FOTU/SOTU/RR maths
(`legival_core.transfer.utility`, one vectorised implementation used per trace and per store)."""
