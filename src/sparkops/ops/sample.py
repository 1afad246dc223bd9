"""sample: pick the next token: greedy, or temperature / top-k / top-p with a seeded counter RNG."""

import torch

from ._cases import gen, name, randn
from ._contract import Case, Param, make_contract


def sample(logits, temperature, top_k, top_p, seed, step):
    """One token id per row of logits.

    temperature == 0: greedy, argmax (ties: the lowest id).
    Otherwise: z = logits / temperature; keep the top_k largest z (top_k = 0 keeps all; ties at the
    boundary: the lower id); then, among those survivors, keep the smallest set of the largest z whose
    softmax mass (over the survivors) reaches top_p (top_p = 1 keeps all); the
    token is argmax over the kept ids of z + Gumbel noise, -log(-log(u)), where
    u = (hash(seed, step, row, id) + 0.5) / 2^24 is a counter-based uniform defined in
    `sparkops.sampling_rng` (so every backend draws the same noise and a captured step can read
    `step` from device memory). Returns int64 [B].
    """


def cases(seed: int) -> list[Case]:
    g = gen(seed)
    out = []
    for b, v, temp, k, p in [(1, 320, 0.0, 0, 1.0), (2, 1000, 0.8, 0, 1.0), (1, 512, 1.0, 40, 1.0),
                             (3, 777, 0.7, 0, 0.9), (1, 4096, 1.2, 50, 0.95)]:
        out.append(Case(name(f"B{b}_V{v}_T{temp}_k{k}_p{p}", seed),
                        [dict(logits=randn(g, b, v, std=3.0), temperature=temp, top_k=k, top_p=p,
                              seed=int(seed) % 100003, step=torch.tensor([s])) for s in (0, 1, 7)]))
    return out


CONTRACT = make_contract(
    sample,
    summary="greedy / temperature / top-k / top-p sampling with a counter-based RNG",
    params=(
        Param("logits", "tensor", "[B, V]", "float32", "next-token logits"),
        Param("temperature", "scalar", "", "float", "0 = greedy"),
        Param("top_k", "scalar", "", "int", "0 = off"),
        Param("top_p", "scalar", "", "float", "1.0 = off"),
        Param("seed", "scalar", "", "int", "the generation's seed"),
        Param("step", "tensor", "[1]", "int64", "the decode step counter (device memory)"),
    ),
    returns="int64 [B]",
    cases=cases,
)
