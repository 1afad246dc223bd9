"""sample: every implementation token-identical to the reference; the reference against a torch
re-derivation of the contract; greedy and its limits (top_k=1, tiny top_p); seeded determinism; and
empirical frequencies that follow softmax(z) on the kept ids."""

import pytest
import torch

from sparkops.errors import BadInput
from sparkops.sampling_rng import uniform
from sparkops_numpy.sample import sample

from ._check import check_against_reference

OP = "sample"


def test_matches_reference_on_contract_cases(impl, seed):
    check_against_reference(OP, impl, seed)


def logits_of(seed, b, v, std=2.0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, v, generator=g) * std


def torch_sample(logits, temperature, top_k, top_p, seed, step):
    """The contract re-derived with torch: sort, cut top-k, cut top-p on the renormalised survivors, Gumbel-max."""
    z = logits.double() / temperature
    order = torch.sort(z, dim=-1, descending=True, stable=True).indices
    ranked = z.gather(-1, order)
    keep = torch.ones_like(ranked, dtype=torch.bool)
    if top_k:
        keep[:, top_k:] = False
    probs = torch.softmax(ranked.masked_fill(~keep, float("-inf")), dim=-1)
    keep &= (probs.cumsum(-1) - probs) < top_p
    kept = torch.zeros_like(keep).scatter(-1, order, keep)
    u = torch.from_numpy(uniform(seed, step, *z.shape))
    return (z - torch.log(-torch.log(u))).masked_fill(~kept, float("-inf")).argmax(-1)


@pytest.mark.parametrize("temperature,top_k,top_p", [(1.0, 0, 1.0), (0.7, 5, 1.0), (1.3, 0, 0.8), (0.9, 20, 0.5)])
def test_reference_matches_torch_rederivation(temperature, top_k, top_p):
    logits = logits_of(1, 16, 200)
    for step in (0, 3, 11):
        got = sample(logits, temperature, top_k, top_p, 1234, torch.tensor([step]))
        assert got.dtype == torch.int64 and got.shape == (16,)
        assert torch.equal(got, torch_sample(logits, temperature, top_k, top_p, 1234, step))


def test_greedy_is_argmax_with_ties_to_the_lowest_id(impl_fn):
    logits = logits_of(2, 4, 50)
    logits[1, [7, 30]] = logits[1].max() + 1.0  # a tie at the top
    got = impl_fn(logits, 0.0, 0, 1.0, 5, torch.tensor([0]))
    want = logits.argmax(-1)
    want[1] = 7
    assert torch.equal(got, want)


def test_top_k_one_and_tiny_top_p_are_greedy(impl_fn):
    logits = logits_of(3, 6, 300)
    greedy = logits.argmax(-1)
    for step in range(4):
        assert torch.equal(impl_fn(logits, 1.5, 1, 1.0, 9, torch.tensor([step])), greedy)
        assert torch.equal(impl_fn(logits, 1.5, 0, 1e-9, 9, torch.tensor([step])), greedy)


def test_same_seed_and_step_repeat_and_other_steps_differ(impl_fn):
    logits = logits_of(4, 8, 1000, std=0.5)  # flat: many plausible tokens
    a = impl_fn(logits, 1.0, 0, 1.0, 77, torch.tensor([3]))
    assert torch.equal(impl_fn(logits, 1.0, 0, 1.0, 77, torch.tensor([3])), a)
    others = [impl_fn(logits, 1.0, 0, 1.0, 77, torch.tensor([s])) for s in range(4, 10)]
    assert sum(int((o != a).sum()) for o in others) >= 40  # of 48 draws; collisions are rare on a flat vocab
    assert (impl_fn(logits, 1.0, 0, 1.0, 78, torch.tensor([3])) != a).any()  # the seed matters too


def frequencies(logits_row, temperature, top_k, top_p, rows=4000, steps=5):
    logits = logits_row.expand(rows, -1).contiguous()
    draws = torch.cat([sample(logits, temperature, top_k, top_p, 2024, torch.tensor([s])) for s in range(steps)])
    return torch.bincount(draws, minlength=logits.shape[1]).double() / draws.numel(), draws.numel()


def assert_close_to(freq, p, n):
    sigma = torch.sqrt(p * (1 - p) / n) + 1e-12
    assert bool(((freq - p).abs() <= 5 * sigma + 1e-9).all()), (freq, p)


def test_frequencies_follow_the_softmax():
    row = torch.tensor([1.0, 0.2, -0.5, 2.0, 0.0, -1.5])
    freq, n = frequencies(row, 0.8, 0, 1.0)
    assert_close_to(freq, torch.softmax(row.double() / 0.8, -1), n)


def test_top_k_and_top_p_frequencies_follow_the_renormalised_softmax():
    row = torch.tensor([1.0, 0.2, -0.5, 2.0, 0.0, -1.5])
    p = torch.softmax(row.double(), -1)
    freq, n = frequencies(row, 1.0, 3, 1.0)  # top-3: ids 3, 0, 1
    kept = torch.zeros(6, dtype=torch.float64)
    kept[[3, 0, 1]] = p[[3, 0, 1]]
    assert_close_to(freq, kept / kept.sum(), n)
    # top-p 0.8: sorted masses 0.53 (id 3), 0.20 (id 0), 0.09 (id 1) ... reach 0.8 at id 1
    assert p[3] + p[0] < 0.8 <= p[3] + p[0] + p[1]
    freq, n = frequencies(row, 1.0, 0, 0.8)
    assert_close_to(freq, kept / kept.sum(), n)


def test_bad_parameters_are_named_errors():
    with pytest.raises(BadInput, match="top_p"):
        sample(logits_of(5, 1, 10), 1.0, 0, 0.0, 1, torch.tensor([0]))
    with pytest.raises(BadInput, match="temperature"):
        sample(logits_of(5, 1, 10), -1.0, 0, 1.0, 1, torch.tensor([0]))
