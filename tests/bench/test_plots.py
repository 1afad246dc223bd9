"""sparkops.bench.plots: the roofline's labels say each point's share of its ceiling, and points at one spot (the A
and B arms of a tie) share one label instead of drawing text over text."""

from __future__ import annotations

import pytest

pytest.importorskip("matplotlib")

from sparkops.bench.ceilings import Ceilings  # noqa: E402
from sparkops.bench.plots import roofline_labels, roofline_png  # noqa: E402

CEIL = Ceilings(device="test", read_bandwidth=4e12, copy_bandwidth=3e12, matmul_flops=8e14, matmul_dtype="bfloat16",
                launch_eager_s=None, launch_graph_s=None, buffer_bytes=1 << 30)


def test_points_at_one_spot_share_a_label_and_others_keep_their_own(tmp_path):
    points = [{"label": "decode d=0 A", "intensity": 3.0, "achieved_flops": 3.0e12},      # 25% of 12 TFLOP/s
              {"label": "decode d=0 B", "intensity": 3.0, "achieved_flops": 2.97e12},     # a tie: the same spot
              {"label": "decode d=32768 A", "intensity": 10.0, "achieved_flops": 1.2e13},  # 30% of 40
              {"label": "prefill A", "intensity": 1000.0, "achieved_flops": 4e14},        # 50% of the 800 peak
              {"label": "no intensity", "intensity": 0.0, "achieved_flops": 1e12}]       # no place on log axes
    labels = roofline_labels(points, CEIL)
    assert sorted(t for _, _, t in labels) == ["decode d=0 A (25.0%) / decode d=0 B (24.8%)",
                                               "decode d=32768 A (30.0%)", "prefill A (50.0%)"]
    path = tmp_path / "roofline.png"
    roofline_png(points, CEIL, path, "test")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
