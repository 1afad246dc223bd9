"""The scoreboard (design.md, "The scoreboard"): a measurement that cannot be gamed, built before
the optimizations it will judge.

  harness.py    `run_bench`: gate first, then A and B timed ABAB in one process over one weights object,
                at explicit, verified depths; medians, per-pair ratios, the roofline refusal
  depth.py      seeded random prompts; `verify_depth` (host length, device position, MLA rows written);
                the fingerprint of the context; in-place snapshots of the sequence state
  gating.py     the model gate (sparkops.gate.model_gate) on exactly what will be timed
  timing.py     CUDA events / perf_counter; medians, quartiles, the sign test behind a tier
  ceilings.py   bandwidth, matmul rate and launch latency measured on the device
  costs.py      bytes and FLOPs per token from the config and the quant types
  roofline.py   the share of the ceiling a figure is; above 100% is refused
  frontier.py   bench/frontier.toml, raise-only, and the check over its git history
  ledger.py     bench/ledger.jsonl, append-only (retractions are new rows)
  record.py     a run -> ledger rows + frontier offers; retract, import, sync, consistency
  ladder.py     LADDER.md from the ledger;  plots.py: ladder.png and the roofline PNG
  diagnose.py   which ceiling binds a decode step, with a number per ceiling
  peer.py       the user's llama-bench, run on the same GGUF at the same depths
  opbench.py    the per-op benchmark cases at the presets' real shapes (bench/test_bench_ops.py)
  provenance.py device, clocks, library versions, commit, command
"""
