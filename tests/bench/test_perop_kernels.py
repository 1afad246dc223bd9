"""sparkops.bench.perop_kernels: a side-by-side column kernel by kernel (the summary is pure arithmetic over the
profiler's intervals, so it is tested here on made-up replays; the profiling itself runs in the GPU timing tests)."""

import json

import pytest

from sparkops.bench import perop_kernels as K


def test_a_serial_chain_s_own_time_is_its_interval_and_its_gaps_the_idle_between():
    # two calls of a -> b, 1 us idle between kernels
    ks = [("a", 0.0, 4.0), ("b", 5.0, 7.0), ("a", 8.0, 12.0), ("b", 13.0, 15.0)]
    s = K.summarize(ks, calls=2)
    assert s["span_us_per_call"] == pytest.approx(7.5)
    assert list(s["kernels"]) == ["a", "b"]
    assert s["kernels"]["a"] == {"per_call": 1.0, "dur_us": 4.0, "own_us": 4.0, "gap_us": 1.0}
    assert s["kernels"]["b"] == {"per_call": 1.0, "dur_us": 2.0, "own_us": 2.0, "gap_us": 1.0}


def test_a_kernel_started_early_under_pdl_owns_only_what_it_adds_after_its_predecessor():
    # b starts 3 us into a (its blocks wait in griddepcontrol.wait), ends 2 us after a
    s = K.summarize([("a", 0.0, 10.0), ("b", 7.0, 12.0)], calls=1)
    assert s["kernels"]["b"]["dur_us"] == 5.0 and s["kernels"]["b"]["own_us"] == 2.0
    assert s["kernels"]["b"]["gap_us"] == -3.0
    assert s["kernels"]["a"]["gap_us"] is None  # nothing before the first kernel


def test_a_kernel_wholly_inside_another_owns_nothing():
    s = K.summarize([("long", 0.0, 10.0), ("short", 2.0, 3.0)], calls=1)
    assert s["kernels"]["short"]["own_us"] == 0.0


def test_the_order_is_by_start_whatever_order_the_profiler_gave():
    a = K.summarize([("b", 5.0, 7.0), ("a", 0.0, 4.0)], calls=1)
    assert list(a["kernels"]) == ["a", "b"] and a["kernels"]["b"]["gap_us"] == 1.0


@pytest.mark.parametrize("ks,calls,match", [([], 1, "no kernels"), ([("a", 2.0, 1.0)], 1, "ends"),
                                            ([("a", 0.0, 1.0)], 0, "calls")])
def test_bad_input_is_refused(ks, calls, match):
    with pytest.raises(ValueError, match=match):
        K.summarize(ks, calls)


def test_nothing_is_written_unless_both_variables_are_set(tmp_path, monkeypatch):
    cols = {"x": K.summarize([("a", 0.0, 1.0)], 1)}
    monkeypatch.delenv(K.PEROP_KERNELS, raising=False)
    monkeypatch.setenv("SPARKOPS_PEROP_DIR", str(tmp_path))
    assert K.write_kernels("rec", "t", cols) is None and not list(tmp_path.iterdir())
    monkeypatch.setenv(K.PEROP_KERNELS, "1")
    path = K.write_kernels("rec", "t", cols)
    assert path.name == "kernels-rec.json"  # not perop-*.json: `ledger perop` never reads it as a record
    assert json.loads(path.read_text())["columns"] == cols
    assert "x: 1.00 us a call" in K.render(cols) and "gap -" in K.render(cols)


def test_the_kernels_variable_without_a_directory_is_refused_naming_both(monkeypatch):
    from sparkops.errors import BadInput

    monkeypatch.delenv("SPARKOPS_PEROP_DIR", raising=False)
    monkeypatch.delenv(K.PEROP_KERNELS, raising=False)
    assert K.wanted() is False
    monkeypatch.setenv(K.PEROP_KERNELS, "1")
    with pytest.raises(BadInput, match="SPARKOPS_PEROP_KERNELS is set but SPARKOPS_PEROP_DIR is not"):
        K.wanted()
