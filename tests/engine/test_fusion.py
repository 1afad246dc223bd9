"""Projection fusion (engine/fusion.py): the registry's [engine] fuse_projections stacks the weights that read
one input, per GGUF type, and runs one linear per group - fewer, larger GEMVs, the same numbers within the gate.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from gguf import GGMLQuantizationType as Q

from sparkops.cli import main
from sparkops.dispatch import Ops
from sparkops.engine import Engine, load_model
from sparkops.engine.decode_step import DecodeStep
from sparkops.engine.fusion import SHARED_INPUT, block_groups, describe, fuse, project
from sparkops.errors import RegistryError
from sparkops.gate.model_gate import model_check
from sparkops.qweight import QWeight
from sparkops.registry.file import Registry
from sparkops.registry.plan import make_plan
from sparkops.weights import KDAWeights
from tests.gate.test_gate_model import torch_registry


@pytest.fixture(scope="module")
def nano():
    return load_model("k3-nano")


@pytest.fixture(scope="module")
def catalog():
    from sparkops.plugins import load_catalog

    return load_catalog()


def _registry(tmp_path: Path, fused: bool) -> Registry:
    reg = torch_registry(tmp_path / ("fused.toml" if fused else "plain.toml"))
    if fused:
        reg.set_engine("fuse_projections", True)
    return reg


def _engine(nano, catalog, reg: Registry) -> Engine:
    return Engine(nano, Ops(make_plan(reg, catalog, "cpu", verify_checks=False)), max_context=160)


class _CountLinear:
    """Counts the engine's linear calls (wraps the Ops attribute)."""

    def __init__(self, engine: Engine):
        self.calls = 0
        inner = engine.ops.linear

        def linear(x, w):
            self.calls += 1
            return inner(x, w)

        engine.ops.linear = linear


def test_groups_stack_the_shared_input_weights_of_one_type(nano):
    groups = fuse(nano)
    kda = next(i for i, layer in enumerate(nano.layers) if layer.kind == "kda")
    (g,) = groups[(kda, "attn")]
    assert g.names == SHARED_INPUT[KDAWeights]  # k3-nano is float32: all six in one group
    w = nano.layers[kda].attn
    assert g.rows == tuple(getattr(w, n).shape[0] for n in g.names)
    assert g.weight.shape == (sum(g.rows), w.q.shape[1])
    assert torch.equal(g.weight.raw[:g.rows[0]], w.q.raw)  # rows stacked in order, bytes unchanged
    assert fuse(nano) is groups  # cached on the weights
    assert any(line.startswith("attn: q+kv_a") for line in describe(groups))


def test_a_member_of_another_type_keeps_its_own_linear(nano):
    w = next(layer.attn for layer in nano.layers if layer.kind == "kda")
    v16 = QWeight(w.v.raw.to(torch.float16), Q.F16, w.v.shape, "v as f16")
    groups = block_groups(dataclasses.replace(w, v=v16))
    assert [g.names for g in groups] == [("q", "k", "f_a", "beta", "g_a")]


def test_project_gives_each_member_its_linear(nano, catalog, tmp_path):
    ops = Ops(make_plan(_registry(tmp_path, False), catalog, "cpu", verify_checks=False))
    w = next(layer.attn for layer in nano.layers if layer.kind == "kda")
    x = torch.randn(5, w.q.shape[1], generator=torch.Generator().manual_seed(1))
    names = SHARED_INPUT[KDAWeights]
    fused = project(ops, x, w, names, block_groups(w))
    plain = project(ops, x, w, names)
    for n in names:
        assert fused[n].is_contiguous() and fused[n].shape == plain[n].shape
        torch.testing.assert_close(fused[n], plain[n], rtol=1e-5, atol=1e-6)


def test_the_fused_engine_launches_fewer_linears_and_gives_the_same_logits(nano, catalog, tmp_path):
    plain, fused = _engine(nano, catalog, _registry(tmp_path, False)), _engine(nano, catalog, _registry(tmp_path, True))
    assert plain.fused is None and fused.fused is not None
    counts = []
    logits = []
    for eng in (plain, fused):
        c = _CountLinear(eng)
        out = [eng.prefill(list(range(1, 70)))]
        c.calls = 0
        out.append(eng.decode(7))
        counts.append(c.calls)
        logits.append(torch.cat(out))
    saved = sum(len(g.names) - 1 for gs in fuse(nano).values() for g in gs)
    assert counts[0] - counts[1] == saved > 0  # one linear per group instead of one per member, per step
    torch.testing.assert_close(logits[1], logits[0], rtol=1e-4, atol=1e-4)


def test_the_decode_step_runs_fused_too(nano, catalog, tmp_path):
    """The step generation replays (a CUDA graph on CUDA; its eager body here) takes the groups as well."""
    counts = {}
    for fused in (False, True):
        ref = _engine(nano, catalog, _registry(tmp_path, fused))
        ref.prefill([3, 1, 4, 1, 5])
        want = ref.decode(9)
        eng = _engine(nano, catalog, _registry(tmp_path, fused))
        eng.prefill([3, 1, 4, 1, 5])
        step = DecodeStep(eng)
        c = _CountLinear(eng)
        step.forced(torch.tensor([9]))
        assert torch.equal(step.logits.float(), want)
        counts[fused] = c.calls
    assert counts[False] - counts[True] == sum(len(g.names) - 1 for gs in fuse(nano).values() for g in gs)


def test_the_model_gate_judges_a_fused_registry(nano, catalog, tmp_path):
    out = model_check("k3-nano", _registry(tmp_path, True), depths=(1, 65), decode_steps=2, catalog=catalog,
                      weights=nano)
    assert out.passed, out.report
    assert "engine: fuse_projections" in out.report and out.selections["[engine]"] == "fuse_projections"


def test_engine_options_are_validated_with_the_fix_named(tmp_path):
    p = tmp_path / "r.toml"
    p.write_text('[engine]\nfuse_projections = "yes"\n')
    with pytest.raises(RegistryError, match="fuse_projections must be a bool"):
        Registry.load(p)
    p.write_text("[engine]\nfuse_everything = true\n")
    with pytest.raises(RegistryError, match="unknown option 'fuse_everything'.*fuse_projections"):
        Registry.load(p)
    p.write_text("[engines]\n")
    with pytest.raises(RegistryError, match="unknown top-level key"):
        Registry.load(p)


def test_engine_cli_sets_and_shows(tmp_path, capsys):
    p = tmp_path / "r.toml"
    p.write_text("# my comment\n")
    assert main(["engine", "--registry", str(p), "fuse_projections=on"]) == 0
    assert "# my comment" in p.read_text() and Registry.load(p).engine_options() == {"fuse_projections": True}
    assert main(["engine", "--registry", str(p), "--json"]) == 0
    assert '"fuse_projections": true' in capsys.readouterr().out
    assert main(["engine", "--registry", str(p), "fuse_projections=maybe"]) == 2
    assert main(["engine", "--registry", str(p), "fuse_projections=off"]) == 0
    assert Registry.load(p).engine_options() == {"fuse_projections": False}


def test_a_bench_row_says_the_engine_fused(nano, catalog, tmp_path):
    from sparkops.bench.harness import selections

    assert "[engine]" not in selections(_engine(nano, catalog, _registry(tmp_path, False)))
    assert selections(_engine(nano, catalog, _registry(tmp_path, True)))["[engine]"] == "fuse_projections"


def test_a_member_slice_is_aligned_and_contiguous(nano, catalog, tmp_path):
    """A member whose rows start off a 16-byte boundary in the group's output gets its own copy."""
    ops = Ops(make_plan(_registry(tmp_path, False), catalog, "cpu", verify_checks=False))
    w = next(layer.attn for layer in nano.layers if layer.kind == "kda")
    odd = QWeight(w.beta.raw[:3].clone(), w.beta.qtype, (3, w.beta.shape[1]), "3 rows")  # 12 bytes a row of out
    w3 = dataclasses.replace(w, beta=odd)
    x = torch.randn(1, w.q.shape[1], generator=torch.Generator().manual_seed(2))
    out = project(ops, x, w3, SHARED_INPUT[KDAWeights], block_groups(w3))
    for n, t in out.items():
        assert t.is_contiguous() and t.data_ptr() % 16 == 0, n
