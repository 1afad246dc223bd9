"""Fixtures of the model-file tests: small synthesized GGUFs and a tool to write damaged copies."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGUFReader, GGUFValueType, GGUFWriter

from sparkops.synth import synth_gguf


@pytest.fixture(scope="session")
def nano_q8(tmp_path_factory):
    """k3-nano, Q8_0 mix, seed 7 (fast to make; every layer kind, every tensor)."""
    path = tmp_path_factory.mktemp("nano") / "k3-nano-q8_0.gguf"
    synth_gguf(path, "k3-nano", "q8_0", seed=7)
    return path


@pytest.fixture(scope="session")
def nano_q4(tmp_path_factory):
    """k3-nano, Q4_K_M mix (K-quants, F16 gates, Q8_0 fallbacks), seed 3."""
    path = tmp_path_factory.mktemp("nano") / "k3-nano-q4_k_m.gguf"
    synth_gguf(path, "k3-nano", "q4_k_m", seed=3)
    return path


def rewrite_gguf(src, dst, *, drop=(), replace=None, drop_kv=(), set_kv=None, arch=None):
    """Copy a GGUF with changes, through gguf-py alone (so the copy can break sparkops' rules).

    replace: {name: (new_name, qtype, stored array)}; set_kv: {key: (value, type, array element type)}.
    """
    replace, set_kv = replace or {}, set_kv or {}
    r = GGUFReader(src)
    arch = arch or r.fields["general.architecture"].contents()
    w = GGUFWriter(dst, arch)
    for key, f in r.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture" or key in drop_kv or key in set_kv:
            continue
        vtype = f.types[0]
        w.add_key_value(key, f.contents(), vtype, sub_type=f.types[-1] if vtype == GGUFValueType.ARRAY else None)
    for key, (value, vtype, sub) in set_kv.items():
        w.add_key_value(key, value, vtype, sub_type=sub)
    for t in r.tensors:
        if t.name in drop:
            continue
        name, qtype, data = replace.get(t.name, (t.name, t.tensor_type, np.array(t.data)))
        w.add_tensor(name, data, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dst


@pytest.fixture
def rewrite():
    return rewrite_gguf
