"""embedding in torch: gather the requested rows' blocks, then dequantize only those rows.

(On CPU a table small enough for the dequantization cache is expanded once and indexed; see _weights.)
"""

import torch

from sparkops.errors import BadInput

from ._weights import rows


def embedding(table, ids, dtype):
    vocab = table.shape[0]
    flat = ids.reshape(-1)
    if flat.device.type == "cpu" and flat.numel():  # on the host the check costs no synchronisation
        lo, hi = int(flat.min()), int(flat.max())
        if lo < 0 or hi >= vocab:
            bad = lo if lo < 0 else hi
            raise BadInput(f"embedding: token id {bad} is outside the table {table.name} of {vocab} rows; "
                           f"ids must lie in [0, {vocab}) (is the tokenizer meant for this model?)")
    values = rows(table, flat.to(torch.int64))  # [T, D] float32: only these rows are dequantized
    return values.reshape(*ids.shape, table.shape[-1]).to(dtype)
