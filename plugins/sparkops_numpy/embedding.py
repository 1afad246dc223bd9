"""embedding, the reference: dequantize only the requested rows of the table (float64 inside)."""

import numpy as np
import torch

from sparkops.qweight import QWeight

from ._checks import expect_ids, expect_shape, expect_weight
from ._convert import dequant, numpy_op


def gather_rows(table: QWeight, ids: np.ndarray) -> QWeight:
    """The rows `ids` of a 2-D weight, still in its stored format (a row of blocks is self-contained)."""
    index = torch.from_numpy(np.ascontiguousarray(ids, dtype=np.int64))
    return QWeight(table.raw[index], table.qtype, (len(ids), table.shape[-1]), f"{table.name}[ids]")


@numpy_op("embedding", like="dtype")
def embedding(table, ids, dtype):
    expect_weight("embedding", "table", table, (None, None), "the 2-D token table [V, D]")
    expect_shape("embedding", "ids", ids, (None,), "one id per token")
    expect_ids("embedding", "ids", ids, table.shape[0])
    return dequant(gather_rows(table, ids))  # [T, D]
