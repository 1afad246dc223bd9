"""bench/probes/_cuda_source.py: a probe's CUDA source reaches NVRTC with its headers' text in place of its includes,
each header once, and a missing header is named."""

import re

import pytest

from tests.helpers import REPO, load_probe


@pytest.fixture(scope="module")
def cuda_source():
    import sys

    sys.path.insert(0, str(REPO / "bench" / "probes"))
    return load_probe("_cuda_source")


@pytest.mark.parametrize("name, defined", [("q4k_chain", ("q8_block", "q8_stage_by", "q8_inverse", "mbar_arrive")),
                                           ("persistent_chain", ("mbar_wait_bounded", "global_ns", "ld_acquire"))])
def test_the_probes_sources_expand_to_one_text_without_includes(cuda_source, name, defined):
    text = cuda_source.expanded(load_probe(name).SOURCE)
    assert "#include" not in text and "#pragma once" not in text
    for fn in defined:  # each helper defined exactly once (a header reached twice is expanded once)
        assert text.count(f" {fn}(") >= 1
        assert len(re.findall(rf"^__device__ [\w<>:, ]* {fn}\(", text, re.MULTILINE)) == 1, fn


def test_a_missing_header_is_named(cuda_source, tmp_path):
    with pytest.raises(FileNotFoundError, match='#include "nowhere.cuh": no such header'):
        cuda_source.expanded('#include "nowhere.cuh"\n', (tmp_path,))
