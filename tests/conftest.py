"""pytest configuration: GPU tests are skipped, with the reason, where there is no CUDA device."""

from __future__ import annotations

import pytest
import torch


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (none on this machine); run bench/gpu_suite.sh on a GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
