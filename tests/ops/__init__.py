"""Per-op tests: every CPU implementation against the reference, and the reference against independent maths."""
