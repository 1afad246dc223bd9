"""Probe: kda_lowrank_norm's launch shapes at the 48B's decode step, timed side by side (one H200 call, ~20 s).

GPU session 23's first side-by-side put the fused kernel (10.29 us a KDA layer; 9.95 with PDL) behind the chain it
replaces (the f_b and g_b GEMVs 4.58 + kda_norm 4.74 = 9.73 in one graph): the up-projections inside it cost 5.5 us
where their bytes (2 MB a layer, 32 KB a program from the L2 after the first) say ~1. This times the knobs that
change how a program reads them: the products summed once or chunk by chunk (ONE_SUM), the warps a program (WARPS)
and the chunk of the rank a loop step reads (BLOCK_P), each form's output checked against the default's first.

    python3 bench/probes/kda_lowrank_forms.py [--json OUT.json]
"""

from __future__ import annotations

import argparse
import itertools
import json

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the table here")
    args = ap.parse_args()
    from sparkops_triton import kda_lowrank_norm as klr
    from sparkops_triton._workloads import kda_lowrank_norm_args, time_calls
    from sparkops_triton.kda_norm import kda_norm_split_pdl
    from sparkops_triton.linear import linear_lastblock

    sets, nbytes = kda_lowrank_norm_args(1)
    fresh = [tuple(x.clone() if torch.is_tensor(x) and x.dim() == 3 and x.dtype == torch.float32 else x for x in s)
             for s in sets[:1]]
    rows, table = [], []
    want = None
    for one_sum, warps, bp in itertools.product((True, False), (None, 8, 2), (32, 16, 64)):
        klr.ONE_SUM, klr.WARPS, klr.BLOCK_P = one_sum, warps, bp
        s = list(fresh[0])
        s[8] = fresh[0][8].clone()
        got = klr.kda_lowrank_norm_split(*s).float()
        if want is None:
            want = got
        err = float(((got - want) ** 2).sum() / (want ** 2).sum())
        for name, fn in (("split", klr.kda_lowrank_norm_split), ("split_pdl", klr.kda_lowrank_norm_split_pdl)):
            t = time_calls(fn, sets, nbytes)
            label = f"one_sum={one_sum!s:<5} warps={warps or 4:<2} block_p={bp:<3} {name:<9}"
            rows.append(f"{label} {t}  nmse vs first {err:.1e}")
            table.append({"one_sum": one_sum, "warps": warps or 4, "block_p": bp, "form": name, "us": t.us,
                          "mode": t.mode, "nmse_vs_first": err})

    def gates(f, f_b, ga, g_b):
        return linear_lastblock(f, f_b), linear_lastblock(ga, g_b)

    def norm_args(s):
        t, h, d = s[2].shape
        g = torch.randn(t, h, d, device=s[2].device, dtype=s[2].dtype)
        return (*s[:3], g, *s[5:11], torch.randn_like(g), s[13], s[14])

    for label, fn, argsets in (("kda_norm=triton_split_pdl alone", kda_norm_split_pdl, [norm_args(s) for s in sets]),
                               ("f_b + g_b GEMVs alone", gates, [(s[3], s[4], s[11], s[12]) for s in sets])):
        t = time_calls(fn, argsets, nbytes)
        rows.append(f"{label:<48} {t}")
        table.append({"form": label, "us": t.us, "mode": t.mode})
    print("\n".join(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(table, f, indent=1)


if __name__ == "__main__":
    main()
