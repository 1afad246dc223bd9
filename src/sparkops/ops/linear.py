"""linear: x @ W^T for a weight in any supported GGUF type, dequantized on the fly."""

from gguf import GGMLQuantizationType as Q

from ..qweight import QWeight
from ._cases import gen, name, randn
from ._contract import Case, Param, make_contract

#: (type, in-features) pairs the cases sweep: every supported type, K-quants at multiples of 256
_TYPES = [(Q.F32, 96), (Q.F16, 96), (Q.BF16, 64), (Q.Q8_0, 96), (Q.Q4_K, 256), (Q.Q6_K, 512), (Q.IQ1_S, 256)]
#: (type, in-features, out-features) of the one-token calls a decode step makes: the sweep above puts Q4_K and BF16
#: at 3 and 17 tokens, so without these the one-token GEMVs would be proven only on calls they hand on (Q6_K: the
#: lm_head's type, at 17 tokens above; 40 rows of 420 bytes end a one-token Q6_K GEMV on a partial block of rows)
_ONE_TOKEN = [(Q.Q4_K, 512, 40), (Q.BF16, 128, 24), (Q.Q6_K, 512, 40)]


def linear(x, weight):
    """y = x @ dequantize(weight)^T, with weight [OUT, IN] in PyTorch layout. No bias.

    The reference dequantizes exactly as gguf-py does and multiplies in float64. An implementation
    may quantize the activations first (integer dot products, as llama.cpp does) and must declare it
    in its claim; the gate's tolerance for that claim says how far it may land. Output has x's dtype.
    """


def cases(seed: int) -> list[Case]:
    g = gen(seed)
    out = []
    for i, (qtype, k) in enumerate(_TYPES):
        t = (1, 3, 17)[i % 3]
        n = (5, 33, 64)[i % 3]
        w = QWeight.from_float(randn(g, n, k, std=0.05), qtype, name=f"w_{qtype.name}")
        out.append(Case(name(f"{qtype.name}_T{t}_N{n}_K{k}", seed), [dict(x=randn(g, t, k), weight=w)]))
    for qtype, k, n in _ONE_TOKEN:
        w = QWeight.from_float(randn(g, n, k, std=0.05), qtype, name=f"w1_{qtype.name}")
        out.append(Case(name(f"{qtype.name}_T1_N{n}_K{k}", seed), [dict(x=randn(g, 1, k), weight=w)]))
    return out


CONTRACT = make_contract(
    linear,
    summary="x @ W^T, W quantized (F32 F16 BF16 Q8_0 Q4_K Q6_K IQ1_S)",
    params=(
        Param("x", "tensor", "[T, IN]", "activation", "input rows"),
        Param("weight", "weight", "[OUT, IN]", "any supported GGUF type", "the weight as stored in the file"),
    ),
    returns="[T, OUT], dtype of x",
    cases=cases,
)
