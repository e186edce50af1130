"""Text-quality dimensions of a reasoning trace (gCoT paper, SPEC section 6)."""
