"""sample, the reference: greedy, or temperature -> top-k -> top-p -> Gumbel-max with the shared counter RNG.

Filtering happens in that order on z = logits / temperature: top_k keeps the k largest z (ties
ranked by the lower id); top_p then keeps the smallest prefix of the survivors, largest z first,
whose softmax mass (over the survivors) reaches top_p. The token is argmax over the survivors of
z - log(-log(u)) with u from `sparkops.sampling_rng`, which draws a sample of softmax(z) restricted
to the survivors.
"""

import numpy as np

from sparkops.errors import BadInput
from sparkops.sampling_rng import uniform

from ._checks import expect_shape
from ._convert import numpy_op


def filter_mask(z: np.ndarray, top_k: int, top_p: float) -> np.ndarray:
    """bool [B, V]: the ids that survive top-k then top-p filtering of z [B, V]."""
    rows, vocab = z.shape
    order = np.argsort(-z, axis=-1, kind="stable")  # largest first, ties to the lower id
    ranked = np.take_along_axis(z, order, axis=-1)  # [B, V] descending
    keep_ranked = np.ones((rows, vocab), bool)
    if 0 < top_k < vocab:
        keep_ranked[:, top_k:] = False
    if top_p < 1.0:
        masked = np.where(keep_ranked, ranked, -np.inf)
        p = np.exp(masked - masked[:, :1])
        p /= p.sum(axis=-1, keepdims=True)
        before = np.cumsum(p, axis=-1) - p  # mass of the strictly better-ranked survivors
        keep_ranked &= before < top_p  # keep up to and including the one that reaches top_p
    keep = np.zeros((rows, vocab), bool)
    np.put_along_axis(keep, order, keep_ranked, axis=-1)
    return keep


@numpy_op("sample", like=None)
def sample(logits, temperature, top_k, top_p, seed, step):
    expect_shape("sample", "logits", logits, (None, None), "[B, V]")
    expect_shape("sample", "step", step, (1,), "a one-element step counter")
    if temperature < 0 or top_k < 0 or not 0.0 < top_p <= 1.0:
        raise BadInput(f"sample: temperature={temperature}, top_k={top_k}, top_p={top_p}; need temperature >= 0, "
                       f"top_k >= 0 (0 = off) and 0 < top_p <= 1 (1 = off)")
    logits = np.asarray(logits, np.float64)
    if temperature == 0:
        return np.argmax(logits, axis=-1).astype(np.int64)  # first maximum = lowest id
    z = logits / temperature
    keep = filter_mask(z, int(top_k), float(top_p))
    u = uniform(int(seed), int(np.asarray(step).reshape(-1)[0]), z.shape[0], z.shape[1])  # [B, V] in (0, 1)
    noisy = np.where(keep, z - np.log(-np.log(u)), -np.inf)
    return np.argmax(noisy, axis=-1).astype(np.int64)
