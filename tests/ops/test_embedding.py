"""embedding: every implementation against the reference; the reference gives exactly the dequantized
rows (first and last included), only the requested rows are read, ids out of range are named errors."""

import pytest
import torch
from gguf import GGMLQuantizationType as Q

from sparkops.errors import BadInput
from sparkops.qweight import QWeight
from sparkops_numpy.embedding import embedding

from ._check import check_against_reference

OP = "embedding"


def test_matches_reference_on_contract_cases(impl, seed):
    check_against_reference(OP, impl, seed)


@pytest.mark.parametrize("qtype,d", [(Q.F32, 48), (Q.F16, 64), (Q.BF16, 32), (Q.Q8_0, 64), (Q.Q6_K, 256)],
                         ids=["F32", "F16", "BF16", "Q8_0", "Q6_K"])
def test_rows_are_the_dequantized_table_rows(qtype, d):
    g = torch.Generator().manual_seed(d)
    table = QWeight.from_float(torch.randn(23, d, generator=g), qtype, name="token_embd")
    ids = torch.tensor([0, 22, 5, 5, 17, 1, 21])
    out = embedding(table, ids, torch.float32)
    assert out.dtype == torch.float32 and out.shape == (7, d)
    assert torch.equal(out, table.dequantize()[ids])


def test_output_dtype_is_the_requested_one(impl_fn):
    g = torch.Generator().manual_seed(1)
    table = QWeight.from_float(torch.randn(9, 64, generator=g), Q.F32)
    out = impl_fn(table, torch.tensor([8, 0, 3]), torch.bfloat16)
    assert out.dtype == torch.bfloat16
    assert torch.equal(out, table.dequantize()[[8, 0, 3]].to(torch.bfloat16))


def test_only_requested_rows_are_read(impl_fn):
    """Rows not asked for are NaN (floats) or 0xFF bytes (a NaN fp16 scale): the output stays clean."""
    g = torch.Generator().manual_seed(2)
    for qtype in (Q.F32, Q.Q8_0):
        table = QWeight.from_float(torch.randn(12, 64, generator=g), qtype)
        ids = torch.tensor([3, 7, 3])
        clean = impl_fn(table, ids, torch.float32)
        raw = table.raw.clone()
        others = [r for r in range(12) if r not in (3, 7)]
        raw[others] = float("nan") if table.is_float else 0xFF
        poisoned = QWeight(raw, table.qtype, table.shape)
        assert torch.isnan(poisoned.dequantize()).any()
        assert torch.equal(impl_fn(poisoned, ids, torch.float32), clean)


def test_out_of_range_ids_are_named_errors():
    table = QWeight.from_float(torch.randn(5, 32), Q.F32)
    for bad in (5, -1):
        with pytest.raises(BadInput, match="ids"):
            embedding(table, torch.tensor([0, bad]), torch.float32)
