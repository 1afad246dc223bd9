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
from sparkops.engine.fusion import (LOW_RANK, SHARED_INPUT, block_groups, describe, fuse, low_rank_weights,
                                    merged_conv_layers, project)
from sparkops.engine.state import KDAState, SequenceState, Snapshot
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


def _registry(tmp_path: Path, fused: bool, conv: bool | None = None) -> Registry:
    """fuse_projections = fused; fuse_short_conv = conv (default: as fused)."""
    conv = fused if conv is None else conv
    reg = torch_registry(tmp_path / f"{'fused' if fused else 'plain'}{'-conv' if conv else ''}.toml")
    if fused:
        reg.set_engines({"fuse_projections": True, "fuse_short_conv": conv})
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
    assert [g.names for g in groups] == [("q", "k", "f_a", "g_a", "beta")]


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
    assert "engine: fuse_projections, fuse_short_conv" in out.report
    assert out.selections["[engine]"] == "fuse_projections, fuse_short_conv"


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
    assert "# my comment" in p.read_text() and Registry.load(p).engine_options() == {
        "fuse_projections": True, "fuse_short_conv": False, "fuse_low_rank": False, "side_stream": False,
        "side_priority": False, "fuse_kda_norm": False, "fuse_kda_gates": False, "fuse_router_norm": False,
        "fuse_conv_kda": False, "fuse_moe_norm": False, "fuse_oproj_norm": False, "gates_first": False, "shared_expert_side": False}
    assert main(["engine", "--registry", str(p), "--json"]) == 0
    assert '"fuse_projections": true' in capsys.readouterr().out
    assert main(["engine", "--registry", str(p), "fuse_projections=maybe"]) == 2
    assert main(["engine", "--registry", str(p), "fuse_projections=off"]) == 0
    assert Registry.load(p).engine_options() == {"fuse_projections": False, "fuse_short_conv": False,
                                                 "fuse_low_rank": False, "side_stream": False, "side_priority": False,
                                                 "fuse_kda_norm": False, "fuse_kda_gates": False,
                                                 "fuse_router_norm": False, "fuse_conv_kda": False,
                                                 "fuse_moe_norm": False, "fuse_oproj_norm": False, "gates_first": False,
                                                 "shared_expert_side": False}


def test_a_bench_row_says_the_engine_fused(nano, catalog, tmp_path):
    from sparkops.bench.harness import selections

    assert "[engine]" not in selections(_engine(nano, catalog, _registry(tmp_path, False)))
    assert selections(_engine(nano, catalog, _registry(tmp_path, True, conv=False)))["[engine]"] == "fuse_projections"
    assert selections(_engine(nano, catalog, _registry(tmp_path, True)))["[engine]"] == "fuse_projections, fuse_short_conv"


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


# -- the merged KDA short conv -------------------------------------------------------------------------------

class _CountConv:
    """Counts the engine's short_conv calls (wraps the Ops attribute)."""

    def __init__(self, engine: Engine):
        self.calls = 0
        inner = engine.ops.short_conv

        def short_conv(x, weight, state):
            self.calls += 1
            return inner(x, weight, state)

        engine.ops.short_conv = short_conv


def _n_kda(nano) -> int:
    return sum(layer.kind == "kda" for layer in nano.layers)


def _run(eng: Engine, prompt: list[int], chunk: int | None, steps: list[int]) -> torch.Tensor:
    rows = [eng.prefill(prompt, chunk_size=chunk)] + [eng.decode(t) for t in steps]
    return torch.cat(rows)


def test_the_kda_groups_carry_the_concatenated_conv_taps(nano):
    groups = fuse(nano)
    for i, layer in enumerate(nano.layers):
        if layer.kind != "kda":
            continue
        (g,) = groups[(i, "attn")]
        w = layer.attn
        assert torch.equal(g.conv, torch.cat([w.conv_q, w.conv_k, w.conv_v]))  # [3P, W], q|k|v along channels
        assert g.span(("q", "k", "v")) == (0, 3 * w.q.shape[0]) and g.span(("k", "q")) is None
    assert merged_conv_layers(groups) == {i for i, layer in enumerate(nano.layers) if layer.kind == "kda"}
    assert merged_conv_layers(None) == set()
    assert any("short_conv q+k+v as one" in line for line in describe(groups, merged_conv=True))
    assert not any("short_conv" in line for line in describe(groups))


def test_q_k_v_not_adjacent_in_one_group_keep_three_convs(nano):
    w = next(layer.attn for layer in nano.layers if layer.kind == "kda")
    for n in ("q", "k", "v"):  # one of them of another type: q, k, v are not consecutive members of one group
        odd = QWeight(getattr(w, n).raw.to(torch.float16), Q.F16, getattr(w, n).shape, f"{n} as f16")
        assert all(g.conv is None for g in block_groups(dataclasses.replace(w, **{n: odd})))
    assert [g.conv is not None for g in block_groups(w)] == [True]


def test_the_fused_state_holds_one_window_with_three_views(nano, catalog, tmp_path):
    fused, plain = _engine(nano, catalog, _registry(tmp_path, True)), _engine(nano, catalog, _registry(tmp_path, False))
    kda = [i for i, st in enumerate(fused.state.layers) if isinstance(st, KDAState)]
    assert sorted(fused.state.conv_windows) == kda and plain.state.conv_windows == {}
    for i in kda:
        st, conv = fused.state.layers[i], fused.state.conv_windows[i]
        p = st.conv_q.shape[1]
        assert conv.shape == (nano.config.conv_kernel - 1, 3 * p) and conv.is_contiguous()
        for j, view in enumerate((st.conv_q, st.conv_k, st.conv_v)):
            assert view._base is conv and view.data_ptr() == conv[:, j * p:].data_ptr()
    assert fused.state.nbytes == plain.state.nbytes  # the same buffers, the three windows laid side by side
    assert [t.shape for t in fused.state.tensors()] == [t.shape for t in plain.state.tensors()]


@pytest.mark.parametrize("chunk", [None, 7])
def test_the_merged_conv_gives_the_three_convs_bit_for_bit(nano, catalog, tmp_path, chunk):
    """Prefill (whole or in chunks) then decode steps, the windows carried across: the merged conv's logits
    equal, bit for bit, those of the same fused engine running three convs; and match the unfused engine as
    closely as projection fusion does (the stacked linear itself is not bit-identical to the separate ones)."""
    merged = _engine(nano, catalog, _registry(tmp_path, True))
    three = _engine(nano, catalog, _registry(tmp_path, True, conv=False))
    plain = _engine(nano, catalog, _registry(tmp_path, False))
    prompt, steps = list(range(3, 40)), [5, 9, 11, 2, 30]
    got = [_run(e, prompt, chunk, steps) for e in (merged, three, plain)]
    assert torch.equal(got[0], got[1])
    torch.testing.assert_close(got[0], got[2], rtol=1e-4, atol=1e-4)
    for a, b in zip(merged.state.tensors(), three.state.tensors()):  # the windows too
        assert torch.equal(a, b)


def test_the_fused_engine_runs_one_short_conv_per_kda_layer(nano, catalog, tmp_path):
    n = _n_kda(nano)
    for fused, per_forward in ((True, n), (False, 3 * n)):
        eng = _engine(nano, catalog, _registry(tmp_path, fused))
        c = _CountConv(eng)
        eng.prefill(list(range(1, 20)))
        assert c.calls == per_forward
        c.calls = 0
        eng.decode(7)
        assert c.calls == per_forward
        c.calls = 0
        step = DecodeStep(eng)
        step.forced(torch.tensor([9, 4]))
        assert c.calls == 2 * per_forward
    three = _engine(nano, catalog, _registry(tmp_path, True, conv=False))
    c = _CountConv(three)
    three.decode(7)
    assert c.calls == 3 * n  # fuse_projections without fuse_short_conv: three convs, as before


def test_snapshot_reset_and_copy_keep_the_merged_window(nano, catalog, tmp_path):
    eng = _engine(nano, catalog, _registry(tmp_path, True))
    eng.prefill(list(range(1, 30)), chunk_size=8)
    snap = Snapshot(eng)
    first = torch.cat([eng.decode(t) for t in (4, 8, 15)])
    snap.restore()
    again = torch.cat([eng.decode(t) for t in (4, 8, 15)])
    assert torch.equal(first, again)
    windows = eng.state.conv_windows
    assert windows and all(eng.state.layers[i].conv_q._base is conv for i, conv in windows.items())  # still views

    # copy_from between a merged and a separate-window state, both ways (the bench's filler does this)
    three = _engine(nano, catalog, _registry(tmp_path, True, conv=False))
    three.prefill(list(range(1, 30)), chunk_size=8)
    snap.restore()
    other = _engine(nano, catalog, _registry(tmp_path, True))
    other.state.copy_from(three.state)
    assert torch.equal(other.decode(4), three.decode(4))
    three.state.copy_from(eng.state)
    assert torch.equal(three.decode(4), eng.decode(4))

    eng.reset()
    other.reset()
    assert all(not conv.any() for conv in windows.values()) and eng.length == 0
    assert torch.equal(eng.prefill([1, 2, 3]), other.prefill([1, 2, 3]))


def test_plan_says_what_the_fusion_options_do(tmp_path, capsys):
    p = tmp_path / "r.toml"
    p.write_text("[engine]\nfuse_projections = true\nfuse_short_conv = true\n")
    main(["plan", "--device", "cpu", "--registry", str(p)])
    out = " ".join(capsys.readouterr().out.split())
    assert "engine: fuse_projections, fuse_short_conv" in out and "q/k/v short convs run as one" in out


def test_fuse_short_conv_needs_fuse_projections(tmp_path, capsys):
    p = tmp_path / "r.toml"
    p.write_text("[engine]\nfuse_short_conv = true\n")
    with pytest.raises(RegistryError, match="fuse_short_conv = true needs fuse_projections = true"):
        Registry.load(p)
    p.write_text("")
    assert main(["engine", "--registry", str(p), "fuse_short_conv=on"]) == 2  # refused, nothing written
    assert "needs fuse_projections" in capsys.readouterr().err and p.read_text() == ""
    # both at once, in either order; then turning fuse_projections off alone is refused
    assert main(["engine", "--registry", str(p), "fuse_short_conv=on", "fuse_projections=on"]) == 0
    assert Registry.load(p).engine_options() == {"fuse_projections": True, "fuse_short_conv": True,
                                                 "fuse_low_rank": False, "side_stream": False, "side_priority": False,
                                                 "fuse_kda_norm": False, "fuse_kda_gates": False,
                                                 "fuse_router_norm": False, "fuse_conv_kda": False,
                                                 "fuse_moe_norm": False, "fuse_oproj_norm": False, "gates_first": False,
                                                 "shared_expert_side": False}
    assert main(["engine", "--registry", str(p), "fuse_projections=off"]) == 2
    assert main(["engine", "--registry", str(p), "fuse_projections=off", "fuse_short_conv=off"]) == 0


def test_plan_without_engine_options_says_so(tmp_path, capsys):
    """The line names the [engine] table as text (rich once read "[engine]" as a style and printed "no  option set")."""
    p = tmp_path / "r.toml"
    p.write_text("")
    main(["plan", "--device", "cpu", "--registry", str(p)])
    assert "engine: no [engine] option set" in " ".join(capsys.readouterr().out.split())



# ---- fuse_low_rank: f_b and g_b as one block-diagonal linear -------------------------------------------------------

def _low_rank_registry(tmp_path: Path, low_rank: bool) -> Registry:
    reg = _registry(tmp_path, True)
    reg.set_engines({"fuse_low_rank": low_rank})
    reg.path = tmp_path / f"fused-conv{'-lowrank' if low_rank else ''}.toml"
    return reg


def test_the_block_diagonal_weight_holds_f_b_and_g_b_and_zeros(nano):
    weights = low_rank_weights(nano, fuse(nano))
    kda = [i for i, layer in enumerate(nano.layers) if layer.kind == "kda"]
    assert sorted(weights) == kda and low_rank_weights(nano, fuse(nano)) is weights  # cached on the weights
    w, bd = nano.layers[kda[0]].attn, weights[kda[0]]
    p, dk = w.f_b.shape
    assert bd.shape == (2 * p, 2 * dk) and bd.qtype == w.f_b.qtype
    assert torch.equal(bd.raw[:p, :dk], w.f_b.raw) and torch.equal(bd.raw[p:, dk:], w.g_b.raw)
    assert not bd.raw[:p, dk:].any() and not bd.raw[p:, :dk].any()


def test_a_quantized_low_rank_pair_keeps_its_two_linears(nano):
    """Zeros are written into float weights only: a layer whose f_b is quantized is left out (and so runs two)."""
    from gguf import GGMLQuantizationType as Q

    from sparkops.gguf.quants import quantize

    w = next(layer.attn for layer in nano.layers if layer.kind == "kda")
    p, dk = w.f_b.shape
    if dk % 32:
        pytest.skip("k3-nano's rank is not a multiple of 32")
    q8 = QWeight(torch.from_numpy(quantize(w.f_b.raw.float().numpy(), Q.Q8_0)), Q.Q8_0, (p, dk), "f_b q8")
    model = dataclasses.replace(nano, layers=[dataclasses.replace(layer, attn=dataclasses.replace(layer.attn, f_b=q8))
                                              if layer.kind == "kda" else layer for layer in nano.layers])
    assert low_rank_weights(model, fuse(model)) == {}


def test_the_low_rank_engine_launches_one_linear_fewer_per_kda_layer_and_agrees(nano, catalog, tmp_path):
    n = _n_kda(nano)
    engines = [_engine(nano, catalog, _low_rank_registry(tmp_path, on)) for on in (False, True)]
    assert engines[0].low_rank == {} and len(engines[1].low_rank) == n
    counts, logits = [], []
    for eng in engines:
        c = _CountLinear(eng)
        out = [eng.prefill(list(range(1, 40)), chunk_size=16)]
        c.calls = 0
        out.append(eng.decode(7))
        counts.append(c.calls)
        step = DecodeStep(eng)  # the replayed step's body takes the pair too
        step.forced(torch.tensor([9]))
        out.append(step.logits.float())
        logits.append(torch.cat(out))
    assert counts[0] - counts[1] == n
    torch.testing.assert_close(logits[1], logits[0], rtol=1e-4, atol=1e-4)


def test_project_returns_the_low_rank_inputs_as_one_slice(nano, catalog, tmp_path):
    ops = Ops(make_plan(_registry(tmp_path, False), catalog, "cpu", verify_checks=False))
    w = next(layer.attn for layer in nano.layers if layer.kind == "kda")
    x = torch.randn(3, w.q.shape[1], generator=torch.Generator().manual_seed(2))
    names = SHARED_INPUT[KDAWeights]
    both = project(ops, x, w, names, block_groups(w), joints=(("f_a", "g_a"),))
    one = project(ops, x, w, names, block_groups(w))
    assert "f_a" not in both and "g_a" not in both and both[LOW_RANK].is_contiguous()
    torch.testing.assert_close(both[LOW_RANK], torch.cat([one["f_a"], one["g_a"]], dim=1))


def test_fuse_low_rank_needs_fuse_projections(tmp_path):
    p = tmp_path / "r.toml"
    p.write_text("[engine]\nfuse_low_rank = true\n")
    with pytest.raises(RegistryError, match="fuse_low_rank = true needs fuse_projections = true"):
        Registry.load(p)
