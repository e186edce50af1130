"""Transfer utility (SPEC section 4): rollout depths (`depths`), what a student sees at each depth
(`rollout_plan`), the student's backend built through the registry (`students`), the FOTU/SOTU/RR
maths (`utility`, one vectorised implementation used per trace and per store), the step events between
consecutive depths (`step_events`) and the engines' cost model (`cost`).
"""
