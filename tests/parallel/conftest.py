"""One torch thread in this directory's tests (restored after each).

The ranks already run single-threaded; the test process itself does small tensor work (the
single-process reference, the hashing of k3-nano's weights), which on a 2-core CI box shared with
its own rank processes runs faster - and far steadier - on one thread than on a contended pool.
"""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_torch_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
