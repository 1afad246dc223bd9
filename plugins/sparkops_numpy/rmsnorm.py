"""rmsnorm, the reference (float64)."""

import numpy as np

from ._convert import numpy_op


def rms_normalize(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """weight * x / sqrt(mean(x^2, last axis) + eps) in float64; shared by the norms that compose it."""
    x = np.asarray(x, np.float64)
    return np.asarray(weight, np.float64) * x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)


@numpy_op("rmsnorm", like="x")
def rmsnorm(x, weight, eps):
    return rms_normalize(x, weight, eps)  # [T, D]
