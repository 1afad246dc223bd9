"""embedding: rows of a (possibly quantized) table."""

import torch
from gguf import GGMLQuantizationType as Q

from ..qweight import QWeight
from ._cases import gen, name, randint, randn
from ._contract import Case, Param, make_contract


def embedding(table, ids, dtype):
    """y[t] = dequantize(table)[ids[t]]: the rows of the token-embedding table for the given ids.

    ids must lie in [0, V); an implementation may not read any other row. Output dtype is `dtype`
    (the engine's activation dtype).
    """


def cases(seed: int) -> list[Case]:
    g = gen(seed)
    out = []
    for qtype, d in [(Q.F32, 64), (Q.F16, 96), (Q.Q8_0, 64), (Q.Q4_K, 256), (Q.Q6_K, 256)]:
        v = 37
        table = QWeight.from_float(randn(g, v, d, std=0.5), qtype, name=f"embd_{qtype.name}")
        ids = randint(g, v, 11)
        ids[0], ids[-1] = 0, v - 1  # the first and last rows are the classic off-by-one places
        out.append(Case(name(f"{qtype.name}_V{v}_D{d}", seed), [dict(table=table, ids=ids, dtype=torch.float32)]))
    return out


CONTRACT = make_contract(
    embedding,
    summary="rows of a quantized table",
    params=(
        Param("table", "weight", "[V, D]", "any supported GGUF type", "the embedding table"),
        Param("ids", "tensor", "[T]", "int64", "token ids, each in [0, V)"),
        Param("dtype", "scalar", "", "torch.dtype", "the activation dtype of the output"),
    ),
    returns="[T, D], dtype `dtype`",
    cases=cases,
)
