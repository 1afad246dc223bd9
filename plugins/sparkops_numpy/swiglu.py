"""swiglu, the reference (float64)."""

import numpy as np

from ._convert import numpy_op


def silu(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.float64)
    return x * sigmoid(x)


def sigmoid(x: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-x)) without overflow for large |x|."""
    return 0.5 * (1.0 + np.tanh(0.5 * np.asarray(x, np.float64)))


@numpy_op("swiglu", like="gate")
def swiglu(gate, up):
    return silu(gate) * np.asarray(up, np.float64)  # [T, F]
