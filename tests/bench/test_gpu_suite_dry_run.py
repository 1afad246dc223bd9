"""bench/gpu_lanes.sh and bench/gpu_suite.sh end to end, with stand-ins for sparkops, python3 and nvidia-smi.

The shell logic that spends the scarce GPU time - two lanes at once, the lock around the prerequisites, the
markers that let a later call carry on where the last one stopped, the choice of the best registry, the
predictions handed to bench, the packing of results - runs here on every CI run, in seconds. What the stand-in
sparkops was asked to do is logged and checked; everything the suite keeps lives under SUITE_TMP.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.helpers import REPO

pytestmark = pytest.mark.skipif(not all(shutil.which(t) for t in ("bash", "flock", "timeout", "tar")),
                                reason="needs bash, flock, timeout and tar")

SUITE = REPO / "bench" / "gpu_suite.sh"

STUB_SPARKOPS = r"""#!/usr/bin/env bash
echo "$*" >> "$STUB_LOG"
case "$1" in
  synth) while [ $# -gt 0 ]; do [ "$1" = "-o" ] && : > "$2"; shift; done ;;
  # swap: the pairs selected on cuda in the registry (stub_swap.py, through cached_swap), a pair in STUB_SWAP_REFUSE
  # failing the swap
  swap) [ "${STUB_SWAP_SECONDS:-0}" = 0 ] || sleep "$STUB_SWAP_SECONDS"
    "$(dirname "$0")/cached_swap" "${@:2}" || exit 1 ;;
  check) for a in "$@"; do case $a in *cuda-bf16.toml) [ -n "${STUB_REFUSE_BF16:-}" ] && exit 1 ;; esac
    # STUB_FAIL_CHECK: a check whose arguments hold this text fails (one gate, not the others)
    [ -n "${STUB_FAIL_CHECK:-}" ] && [[ "$a" == *"$STUB_FAIL_CHECK"* ]] && exit 1; done ;;
  diagnose|bench) prev=""; for a in "$@"; do [ "$prev" = "--json-out" ] && echo '[]' > "$a"; prev=$a; done
    # bench's table row of the B arm: a win, or where the arguments hold one of STUB_NO_WIN's texts, "none"
    tier=win
    for t in ${STUB_NO_WIN:-}; do [[ "$*" == *"$t"* ]] && tier=none; done
    [ "$1" = bench ] && echo "│        │ B   │ reg.toml (graph) │ 304.7 │ 304.7..304.7 │ 15.65%   │ 0.983 (0.983..0.983)   │ $tier │ held     │"
    ;;
esac
exit 0
"""


# The pytest stand-in's per-op records: NAME's stem (perop-STEM-DTYPE.json) -> the test file and the test in it that
# writes it (test_cupy_timing.py unless named). A run writes NAME when it holds that file and either selects no -k or a
# -k with a word found in the test's name (pytest's -k matches substrings; "not" terms are not modelled). Each copy
# made is also listed (SOURCE, NAME, NUL-ended) in the file STUB_PEROP_PLAN names, where set (CACHED_PEROP's record).
PEROP_WRITERS = """import os, shutil, sys
WRITERS = {"rowwarp": "test_rowwarp_gemv_side_by_side_with_triton",
           "mma": "test_mma_gemv_side_by_side_with_rowwarp_and_triton",
           "floatrow": "test_floatrow_gemv_side_by_side_with_triton",
           "attention": "test_attention_active_side_by_side",
           "moe": "test_rowwarp_and_mma_moe_side_by_side_with_triton",
           "router": "test_rowwarp_router_side_by_side_with_triton",
           "routerpdl": "test_router_pdl_pairs_side_by_side",
           "kdanorm": ("test_triton_kda_norm.py", "test_gpu_48b_decode_against_the_unfused_chain_and_timed"),
           "swiglu": ("test_triton_swiglu.py", "test_gpu_contract_cases_and_the_48b_dense_row_timed"),
           "attndeep": "test_attention_deep_side_by_side",
           "kdalowrank": ("test_triton_kda_lowrank_norm.py", "test_gpu_48b_decode_against_the_unfused_chain_and_timed"),
           "f16pdl": ("test_triton_linear.py", "test_gpu_pdl_f16_gate_gemvs_side_by_side"),
           "convpdl": ("test_triton_short_conv.py", "test_gpu_pdl_form_bits_replayed_and_timed_beside_the_plain_one"),
           "expshared": "test_experts_shared_first_after_the_router_side_by_side",
           "expwide": "test_experts_wide_down_after_the_router_side_by_side",
           "expsplit": "test_experts_split_down_after_the_router_side_by_side",
           "expq8": "test_experts_q8_gate_up_after_the_router_side_by_side",
           "expq8h": "test_experts_q8_hidden_after_the_router_side_by_side",
           "rowq8": "test_rowwarp_q8_gemv_side_by_side_with_the_pdl_gemv",
           "expq8p": "test_experts_q8_pipe_after_the_router_side_by_side",
           "expq8w": "test_experts_q8_pairs_after_the_router_side_by_side",
           "x16": "test_x16_lm_head_side_by_side_with_cupy_float",
           "expq8c": "test_experts_copy_down_after_the_router_side_by_side",
           "expq8l": "test_experts_down_loads_after_the_router_side_by_side",
           "normrouter": "test_norm_router_fused_side_by_side",
           "routersort": "test_router_sorted_tail_side_by_side",
           "q8plain": "test_q8_gemv_shortplain_after_the_gated_norm_side_by_side",
           "convkda": ("test_triton_short_conv_kda_norm.py", "test_gpu_48b_decode_against_the_unfused_chain_and_timed"),
           "normwait": "test_norm_wait_after_the_o_proj_side_by_side",
           "attnpdl": "test_attention_deep_pdl_before_the_o_proj_side_by_side",
           "moenorm": "test_experts_norm_fused_side_by_side",
           "oprojnorm": "test_oproj_norm_fused_side_by_side",
           "q8xpf": "test_q8_tall_xpf_after_the_gated_norm_side_by_side",
           "expxpf": "test_experts_down_xpf_after_the_router_side_by_side",
           "q8xr": "test_q8_tall_xregs_after_the_gated_norm_side_by_side",
           "exphs": "test_experts_down_staged_after_the_router_side_by_side",
           "expl2pf": "test_experts_down_l2pf_after_the_router_side_by_side",
           "attnactpdl": "test_attention_active_pdl_before_the_o_proj_side_by_side",
           "routermerge": "test_router_merge_side_by_side",
           "expgrp": "test_experts_gate_up_grouped_after_the_router_side_by_side",
           "expstr": "test_experts_gate_up_streamed_after_the_router_side_by_side"}
args = sys.argv[1:]
k = args[args.index("-k") + 1] if "-k" in args else None
words = [w for w in (k or "").replace("(", " ").replace(")", " ").split() if w not in ("and", "or", "not")]
named = [a.split("::") for a in args]  # a file, or a node id FILE::TEST naming one test of it


def selects(stem):
    path, test = WRITERS[stem] if isinstance(WRITERS[stem], tuple) else ("test_cupy_timing.py", WRITERS[stem])
    return any((f == path or f.endswith("/" + path)) and (not rest or test in rest) for f, *rest in named) \
        and (k is None or any(w in test for w in words))


for entry in os.environ.get("STUB_PEROP", "").split():
    src, name = entry.rsplit(":", 1)
    if selects(name.split("-")[1]):
        shutil.copy(src, os.path.join(os.environ["SPARKOPS_PEROP_DIR"], name))
if os.environ.get("STUB_PEROP_PLAN"):  # CACHED_PEROP's: the stems these arguments select, then every stem
    with open(os.environ["STUB_PEROP_PLAN"], "w") as plan:
        plan.write(" ".join(s for s in WRITERS if selects(s)) + "\\n" + " ".join(WRITERS) + "\\n")
"""


# perop_writers.py's choice kept for the next pytest run of the same arguments: the GPU-test steps run the pytest
# stand-in ~400 times a CI run with STUB_PEROP set, each a Python start. Which records a run copies depends on its
# arguments (the stems of WRITERS they select) and on STUB_PEROP (which of those records a test gives). STUB_PEROP_CACHE
# (a directory) holds the first, the run's plan (the stems its arguments select, then every stem), named by a hash of
# perop_writers.py and of the arguments, where a --junitxml=FILE.xml (not -k's word, no "::") stands as one: the
# suite names each step's file after its call's start time, and such an argument selects nothing (no FILE.xml is, or
# ends with, a test file's path). A run of such arguments again copies with cp each record of STUB_PEROP whose stem the
# plan selects, in STUB_PEROP's order, as perop_writers.py does. No STUB_PEROP_CACHE, an entry perop_writers.py
# would refuse (no NAME, a stem it does not know), a failed copy or run: perop_writers.py runs as ever (copying again
# what was copied), and only a plan of a run that passed is kept.
CACHED_PEROP = r"""#!/usr/bin/env bash
py() { "$STUB_PYTHON" "$(dirname "$0")/perop_writers.py" "$@"; }
[ -n "${STUB_PEROP_CACHE:-}" ] || { py "$@"; exit; }
key=(); prev=""
for a in "$@"; do
  if [[ $prev != -k && $a == --junitxml=*.xml && $a != *::* ]]; then key+=(--junitxml=.xml); else key+=("$a"); fi
  prev=$a
done
sum=$({ printf '%s\0' "${key[@]}"; cat "$(dirname "$0")/perop_writers.py"; } | md5sum)
kept=$STUB_PEROP_CACHE/${sum%% *}
if [ -f "$kept" ] && { IFS= read -r chosen && IFS= read -r known; } < "$kept"; then
  set -f; entries=(${STUB_PEROP:-}); set +f
  for entry in "${entries[@]}"; do
    src=${entry%:*} name=${entry##*:}
    rest=${name#*-} && stem=${rest%%-*}
    [[ $entry == *:* && $name == *-* && " $known " == *" $stem "* ]] || { py "$@"; exit; }
    [[ " $chosen " == *" $stem "* ]] || continue
    cp "$src" "$SPARKOPS_PEROP_DIR/$name" 2> /dev/null || { py "$@"; exit; }
  done
  exit 0
fi
STUB_PEROP_PLAN=$kept.$$ py "$@" || { rc=$?; rm -f "$kept.$$"; exit $rc; }
mv -f "$kept.$$" "$kept"
"""


# The swap stand-in: `swap PAIR... --device cuda --registry FILE` selects each OP=IMPL (OP@TYPE=IMPL: the per-type
# table) on cuda in FILE, as a passing swap does, so that a registry's selections are what the suite's swaps made. A
# pair named in STUB_SWAP_REFUSE fails the whole call and selects nothing (a real swap of several pairs proves all
# before it writes); a FILE that is not there, or not TOML, is left alone
STUB_SWAP = """import os, sys, tomlkit
args = sys.argv[1:]
path = args[args.index("--registry") + 1] if "--registry" in args else None
pairs = [a for a in args if "=" in a and not a.startswith("-")]
if any(p in os.environ.get("STUB_SWAP_REFUSE", "").split() for p in pairs):
    sys.exit(1)
try:
    doc = tomlkit.parse(open(path).read())
except Exception:
    sys.exit(0)
for pair in pairs:
    op, impl = pair.split("=", 1)
    op, _, qtype = op.partition("@")
    t = doc.setdefault("ops", tomlkit.table(True)).setdefault(op, tomlkit.table(True))
    t = t.setdefault("cuda", tomlkit.table())
    if qtype:
        t = t.setdefault("by_type", tomlkit.table(True)).setdefault(qtype, tomlkit.table())
    t["impl"] = impl
open(path, "w").write(tomlkit.dumps(doc))
"""


# stub_swap.py's result kept for the next swap of the same bytes: the suite makes the same registries from the same
# bytes in nearly every test (~1500 swaps a CI run, each a Python start and a tomlkit parse and dump of registry.toml:
# ~80 ms). STUB_SWAP_CACHE (a directory) holds the file stub_swap.py wrote, named by a hash of what it read - the
# registry's bytes, its arguments with the registry's path left out, STUB_SWAP_REFUSE - and a swap of the same again
# writes those bytes without Python. A swap that fails (a refused pair), a registry that is not there, or no
# STUB_SWAP_CACHE: stub_swap.py runs as ever, and only a swap that passed is kept.
CACHED_SWAP = r"""#!/usr/bin/env bash
reg=""; seen=""; prev=""; args=()
for a in "$@"; do
  if [ "$prev" = --registry ] && [ -z "$seen" ]; then reg=$a; seen=1; args+=(REGISTRY); else args+=("$a"); fi
  prev=$a
done
swap() { "$STUB_PYTHON" "$(dirname "$0")/stub_swap.py" "$@"; }
{ [ -n "${STUB_SWAP_CACHE:-}" ] && [ -f "$reg" ]; } || { swap "$@"; exit; }
key=$({ printf '%s\0' "${STUB_SWAP_REFUSE:-}" "${args[@]}"; cat "$reg"; } | sha256sum | cut -c1-64)
kept=$STUB_SWAP_CACHE/$key
if [ -f "$kept" ]; then cat "$kept" > "$reg"; exit 0; fi
swap "$@" || exit
cp "$reg" "$kept.$$" && mv -f "$kept.$$" "$kept"
exit 0
"""

# The pure-Python scripts the suite runs through the python3 stand-in (CACHED_SCRIPTS: its registry checks, per-op
# factors, SUITE_TIMED check and forecasts; ~1900 runs a CI run, 50-250 ms each, about half the file's time:
# timed_check.py alone parses the checkout's 2 MB ledger every call), each run's result kept for the next run of the
# same inputs. STUB_PY_CACHE (a directory) holds a run's stdout, stderr and exit status, named by a hash of all it
# reads: the interpreter, the working directory, the arguments, the variables Python itself reads (PYTHON*, the
# locale's, the terminal's size for argparse), the bytes of every argument that is a file and the sources of the
# script's directory (the siblings it imports; test_the_cached_scripts_read_only_what_their_key_holds checks that
# the scripts import nothing else outside the standard library and read no variable). md5: a name, not a defence
# (sha256sum took 16 ms for the 2 MB ledger, most of a replay's time). A run of the same again writes those bytes
# without Python: stderr, then stdout, as Python's block-buffered stdout does at its exit. An argument naming
# something other than a regular file (a pipe, a directory), an exit status other than the scripts' own 0-2 (a
# timeout's, a signal's), or no STUB_PY_CACHE: the script runs as ever, and nothing is kept.
CACHED_PY = r"""#!/usr/bin/env bash
[ -n "${STUB_PY_CACHE:-}" ] || exec "$STUB_PYTHON" "$@"
files=()
for a in "$@"; do
  if [ -f "$a" ]; then files+=("$a"); elif [ -e "$a" ]; then exec "$STUB_PYTHON" "$@"; fi
done
sum=$({ printf '%s\0' "$STUB_PYTHON" "$PWD" "$@"
  for v in ${!PYTHON@} ${!LC_@} LANG LANGUAGE COLUMNS LINES; do printf '%s=%s\0' "$v" "${!v-}"; done
  md5sum -- "${1%/*}"/*.py "${files[@]}"; } | md5sum)
kept=$STUB_PY_CACHE/${sum%% *}
if [ -f "$kept.rc" ]; then cat "$kept.err" >&2; cat "$kept.out"; exit "$(< "$kept.rc")"; fi
"$STUB_PYTHON" "$@" > "$kept.out.$$" 2> "$kept.err.$$"
rc=$?
cat "$kept.err.$$" >&2; cat "$kept.out.$$"
if [ $rc -le 2 ]; then
  mv -f "$kept.out.$$" "$kept.out" && mv -f "$kept.err.$$" "$kept.err" && echo $rc > "$kept.rc.$$" \
    && mv -f "$kept.rc.$$" "$kept.rc"
fi
rm -f "$kept.out.$$" "$kept.err.$$"
exit $rc
"""

#: the scripts the python3 stand-in runs through CACHED_PY (each reads only its arguments' files; see above)
CACHED_SCRIPTS = ("bench/registry_selects.py", "bench/perop_factor.py", "bench/timed_check.py",
                  "bench/probes/critical_path.py")

#: the directory of the stand-ins' caches (CACHED_SWAP's, CACHED_PY's, CACHED_PEROP's; set by the module's fixture;
#: None: no cache)
STUB_CACHE: Path | None = None


@pytest.fixture(autouse=True, scope="module")
def _stub_cache(tmp_path_factory):
    """One directory of caches for the run, shared by the xdist workers (the root of their base temps: each entry is
    written under a name of its own, then renamed, so a reader sees a whole entry or none)."""
    global STUB_CACHE
    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    STUB_CACHE = root / "dry-run-stub-caches"
    for d in ("swap", "py", "perop"):
        (STUB_CACHE / d).mkdir(parents=True, exist_ok=True)
    yield
    STUB_CACHE = None


@pytest.fixture
def tmp_path(tmp_path: Path) -> Path:
    """pytest's tmp_path (kept as pytest keeps it) seen through a path that is the same for every test of the worker:
    BASETEMP/dry-tmp, a link to it made afresh for each test. The suite hands the stand-ins paths under it (registries,
    ledgers, records, the results' files), which the caches' keys hold (CACHED_PY, CACHED_PEROP): under a path of the
    test's own, no test found a run of another test's; under this one, a test repeating another's steps does."""
    link = tmp_path.parent / "dry-tmp"
    new = link.with_name(f"dry-tmp.{os.getpid()}")
    new.symlink_to(tmp_path, target_is_directory=True)
    os.replace(new, link)
    return link


def _cache_env() -> dict[str, str]:
    if STUB_CACHE is None:
        return {}
    return {"STUB_SWAP_CACHE": str(STUB_CACHE / "swap"), "STUB_PY_CACHE": str(STUB_CACHE / "py"),
            "STUB_PEROP_CACHE": str(STUB_CACHE / "perop")}


def _stubs(tmp: Path, gpus: int) -> Path:
    d = tmp / "stubs"
    d.mkdir()
    (d / "sparkops").write_text(STUB_SPARKOPS)
    (d / "stub_swap.py").write_text(STUB_SWAP)
    (d / "cached_swap").write_text(CACHED_SWAP)
    (d / "cached_py").write_text(CACHED_PY)
    (d / "cached_perop").write_text(CACHED_PEROP)
    # STUB_PYTEST_SECONDS: a pytest run (`python3 -m pytest`: the GPU tests) takes that long, so that two lanes' steps
    # overlap (a call whose arguments merely hold "pytest", a pip install's --target under pytest's temp dir, is none)
    # bench/gpu_test_shard.py, bench/perop_factor.py, bench/registry_selects.py, bench/probes/critical_path.py (a
    # rung's forecast on the committed timeline), bench/timed_check.py (against the
    # checkout's ledger and the stand-in machine's), bench/probes/iq1s_ops.py --factor and --best (a rung's --expect
    # from the probe's JSON: json alone), `python3 -c "print(...)"` arithmetic and `python3 -c "import
    # json..."` reads of a JSON file are pure Python: the real interpreter runs them (the shards' files, a prediction
    # factor); imports of torch and the kernels stay stand-ins
    # STUB_FAIL_MATCH: a pytest run whose arguments hold this text fails (one proof's tests, not the others)
    # STUB_PEROP="FILE:NAME ...": per-op records a GPU test would have written (SPARKOPS_PEROP_DIR/NAME), copied there
    # by the pytest stand-in only when its run would have selected the side-by-side test that writes NAME (PEROP_WRITERS),
    # as on the GPU: a proof without that test writes no record (session 18's rungs18d lost a rung that way)
    # STUB_TIMED_OK: bench/timed_check.py passes whatever the checkout's ledger says (a test of a recipe for a rung
    # that the real ledger records as lost)
    (d / "python3").write_text('#!/usr/bin/env bash\n'
                               '[ "$1" = bench/timed_check.py ] && [ -n "${STUB_TIMED_OK:-}" ] && exit 0\n'
                               f'case "$1" in {"|".join(CACHED_SCRIPTS)}) exec "{d}/cached_py" "$@" ;; esac\n'
                               f'if [ "$1" = bench/gpu_test_shard.py ] || [ "$1" = bench/perop_factor.py ] || '
                               f'[ "$1" = bench/registry_selects.py ] || [ "$1" = bench/timed_check.py ] || '
                               f'[ "$1" = bench/probes/critical_path.py ] || '
                               f'[[ "$1" = bench/probes/iq1s_ops.py && ( "$2" = --factor || "$2" = --best ) ]] || '
                               f'[[ "$1" = -c && ( "$2" == print\\(* || "$2" == "import json,"* ) ]]; then '
                               f'exec "{sys.executable}" "$@"; fi\n'
                               '[ "$1" = -m ] && [ "$2" = pytest ] && { '
                               '[ "${STUB_PYTEST_SECONDS:-0}" = 0 ] || sleep "$STUB_PYTEST_SECONDS"; '
                               # (no STUB_PEROP: no record to copy, so no Python start for perop_writers.py)
                               '[ -n "${SPARKOPS_PEROP_DIR:-}" ] && [ -n "${STUB_PEROP:-}" ] && '
                               f'"{d}/cached_perop" "$@"; '
                               '[ -n "${STUB_FAIL_MATCH:-}" ] && [[ "$*" == *"$STUB_FAIL_MATCH"* ]] && exit 1; '
                               'exit "${STUB_PYTEST_RC:-0}"; }\n'
                               'exit 0\n')
    (d / "perop_writers.py").write_text(PEROP_WRITERS)
    listing = "".join(f"GPU {i}: NVIDIA H200 (UUID: GPU-{i})\\n" for i in range(gpus))
    # STUB_GPU_NAME: the cards' name in the listing (an H200 unless a test names another)
    (d / "nvidia-smi").write_text(f'#!/usr/bin/env bash\nl="{listing}"\n'
                                  '[ "$1" = "-L" ] && printf "${l//NVIDIA H200/${STUB_GPU_NAME:-NVIDIA H200}}"\nexit 0\n')
    for f in d.iterdir():
        f.chmod(0o755)
    return d


def _NO_CARRIED_CACHES(tmp: Path) -> dict[str, str]:
    """The carried caches' paths pointed at nothing unless a test gives its own: a checkout's .kcache (gitignored; a
    developer's holds the last GPU session's kernels.tgz and registries.tgz) must not reach a dry run."""
    return {"SUITE_KCACHE_FILE": str(tmp / "no-kernels.tgz"), "SUITE_RCACHE_FILE": str(tmp / "no-registries.tgz"),
            "SUITE_RCACHE_COMMITTED": str(tmp / "no-committed-registries.tgz")}


def _without_the_checkout_line(log: str) -> str:
    """The suite's log less the line the suite copies from `git log --oneline -1` (the checkout it ran): the tests read
    the log for the suite's own words ("left out", "unknown stage"), which a commit's subject may hold too (session
    36's did, and four tests failed on the subject)."""
    head = subprocess.run(["git", "log", "--oneline", "-1"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    return "\n".join(line for line in log.splitlines() if not head or line != head) + "\n"


def _lanes(tmp: Path, *stages: str, gpus: int = 2, refuse_bf16: bool = False,
           extra_env: dict[str, str] | None = None, ok: bool = True) -> tuple[str, list[str]]:
    """bench/gpu_lanes.sh STAGES on stub GPUs: (the suite's log, the stand-ins' calls). ok=False: the call must fail."""
    stubs = tmp / "stubs" if (tmp / "stubs").exists() else _stubs(tmp, gpus)
    env = {**os.environ, "PATH": f"{stubs}:{os.environ['PATH']}", "SUITE_TMP": str(tmp / "machine"),
           "OUT": str(tmp / "out"), "STUB_LOG": str(tmp / "sparkops.log"), "STUB_PYTHON": sys.executable,
           **_NO_CARRIED_CACHES(tmp), **_cache_env(), **(extra_env or {})}
    env.pop("SUITE_REDO", None)
    if refuse_bf16:
        env["STUB_REFUSE_BF16"] = "1"
    (tmp / "machine").mkdir(exist_ok=True)
    proc = subprocess.run(["bash", "bench/gpu_lanes.sh", "900", *stages], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=240)
    assert (proc.returncode == 0) == ok, proc.stdout + proc.stderr
    log = _without_the_checkout_line((tmp / "out" / "suite.log").read_text())
    calls = (tmp / "sparkops.log").read_text().splitlines() if (tmp / "sparkops.log").exists() else []
    return log, calls


def _suite(tmp: Path, *stages: str, extra_env: dict[str, str] | None = None) -> tuple[str, list[str]]:
    """bench/gpu_suite.sh STAGES on one stub GPU (no lanes), as a single-GPU device call runs it; its log and calls."""
    stubs = tmp / "stubs" if (tmp / "stubs").exists() else _stubs(tmp, 1)
    env = {**os.environ, "PATH": f"{stubs}:{os.environ['PATH']}", "SUITE_TMP": str(tmp / "machine"),
           "OUT": str(tmp / "out"), "STUB_LOG": str(tmp / "sparkops.log"), "STUB_PYTHON": sys.executable,
           **_NO_CARRIED_CACHES(tmp), **_cache_env(), **(extra_env or {})}
    env.pop("SUITE_REDO", None)
    (tmp / "machine").mkdir(exist_ok=True)
    (tmp / "out").mkdir(exist_ok=True)
    (tmp / "out" / "suite.log").write_text("")
    proc = subprocess.run(["bash", "bench/gpu_suite.sh", *stages], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    log = _without_the_checkout_line((tmp / "out" / "suite.log").read_text())
    calls = (tmp / "sparkops.log").read_text().splitlines() if (tmp / "sparkops.log").exists() else []
    return log, calls


def test_the_cached_scripts_read_only_what_their_key_holds():
    """CACHED_PY replays a script's run for the same arguments, argument files and sources of the script's directory:
    each of CACHED_SCRIPTS (and each sibling it imports) imports nothing but the standard library and its siblings,
    and reads no environment variable, so that nothing it reads is left out of the key."""
    def imported(tree: ast.AST) -> set[str]:
        names = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                assert node.level == 0, f"a relative import: {ast.dump(node)}"
                names.add(node.module.split(".")[0])
        return names

    todo, seen = [REPO / s for s in CACHED_SCRIPTS], set()
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        text = path.read_text()
        assert "environ" not in text and "getenv" not in text, f"{path} reads the environment"
        for name in imported(ast.parse(text)):
            sibling = path.parent / f"{name}.py"
            if sibling.is_file():
                todo.append(sibling)
            else:
                assert name in sys.stdlib_module_names, f"{path} imports {name}: not in the cache key"
    assert REPO / "bench" / "probes" / "timeline_tails.py" in seen  # (critical_path.py's sibling, found)


def test_a_cached_perop_plan_copies_what_perop_writers_copies(tmp_path):
    """CACHED_PEROP's replay of a plan (a pytest run of the same arguments again, with another --junitxml file and
    other records given) copies, without Python, what perop_writers.py copies for those arguments: no more, no fewer."""
    stubs = _stubs(tmp_path, 1)
    given = [_records(tmp_path, x16={"a": 1e-6}, expq8h={"a": 2e-6}, kdalowrank={"a": 3e-6}, kdanorm={"a": 4e-6},
                      rowq8={"a": 5e-6}),
             _records(tmp_path, kdanorm={"a": 4e-6}, x16={"a": 1e-6})]
    runs = [["-k", "x16", "tests/backends/test_cupy_x16.py", "tests/backends/test_cupy_timing.py"],
            ["tests/backends/test_triton_kda_lowrank_norm.py", "tests/engine/test_kda_gates_fusion.py"],
            ["-k", "unfused_chain", "tests/backends/test_triton_kda_lowrank_norm.py"],
            ["-k", "contract", "tests/backends/test_triton_kda_lowrank_norm.py"],
            ["tests/backends/test_triton_kda_norm.py::test_gpu_48b_decode_against_the_unfused_chain_and_timed"],
            ["-k", "q8_gemv or x16", "tests/backends/test_cupy_timing.py"]]
    cache = tmp_path / "cache"
    cache.mkdir()

    def copied(args: list[str], perop: str, cached: bool, python: str = sys.executable) -> dict[str, str]:
        out = Path(tempfile.mkdtemp(dir=tmp_path))
        env = {**os.environ, "STUB_PEROP": perop, "STUB_PYTHON": python, "SPARKOPS_PEROP_DIR": str(out),
               **({"STUB_PEROP_CACHE": str(cache)} if cached else {})}
        cmd = [stubs / "cached_perop"] if cached else [python, stubs / "perop_writers.py"]
        subprocess.run([*cmd, "-m", "pytest", "-q", *args, f"--junitxml={out}/a.xml"], env=env, check=True)
        return {f.name: f.read_text() for f in out.iterdir()}

    wants = []
    for args in runs:
        want = [copied(args, perop, cached=False) for perop in given]
        assert copied(args, given[0], cached=True) == want[0], args  # the plan made
        # the plan replayed: no Python (a false interpreter fails any run of perop_writers.py), either set of records
        assert [copied(args, perop, cached=True, python=shutil.which("false")) for perop in given] == want, args
        wants += want
    assert len(list(cache.iterdir())) == len(runs)
    assert any(wants) and not all(wants)  # (runs that copy records, runs that copy none)


def test_two_lanes_make_the_prerequisites_once_and_pick_the_best_registry(tmp_path):
    log, calls = _lanes(tmp_path, "registries synth gate ladder", "tests opbench iq1s")
    assert "[gpu0]" in log and "[gpu1]" in log and "best registry: bf16" in log
    assert sum(c.startswith("synth --preset kimi-linear-48b-a3b --quant q4_k_m") for c in calls) == 1  # the lock
    machine = tmp_path / "machine"
    for reg in ("torch", "fast", "fill", "bf16", "best", "best-fused", "prefill", "fast-cupy-attn",
                "best-fused-cupy-attn", "best-fused-cupy-linear"):
        assert (machine / f"cuda-{reg}.toml").exists(), reg
    assert any(c.startswith("engine fuse_projections=on --registry") for c in calls)
    # the baseline was diagnosed first, so the ladder's main row carries that prediction
    main_row = next(c for c in calls if c.startswith("bench decode") and "--vs " + str(machine / "cuda-best.toml") in c)
    assert "--prediction " + str(machine / "suite-diag" / "diag-torch.json") in main_row
    for f in ("results-gpu0.tgz", "results-gpu1.tgz", "bench.tgz"):
        assert (tmp_path / "out" / f).stat().st_size > 0, f

    # a second call on the same machine carries on: what ended is not run again
    n_before = len(calls)
    log2, calls2 = _lanes(tmp_path, "registries synth gate ladder", "tests")
    assert "gate-others: done earlier on this machine (rc=0), skipped" in log2
    assert calls2[n_before:] == ["plugins"]  # only the install's listing: every step had ended, none ran again


def test_a_refused_bf16_registry_leaves_the_float32_one_as_best(tmp_path):
    log, calls = _lanes(tmp_path, "registries synth rungs", "tests", refuse_bf16=True)
    assert "best registry: float32 (the 48B gate refused bf16)" in log
    machine = tmp_path / "machine"
    assert (machine / "cuda-best.toml").read_text() == (machine / "cuda-fast.toml").read_text()
    # cupy's bf16 attention is no rung of a float32 best registry
    assert not (machine / "cuda-best-fused-cupy-attn.toml").exists()
    assert not (machine / "cuda-best-fused-cupy-linear.toml").exists()
    assert not any("cupy_splitk_bf16" in c or "linear=cupy_dp4a" in c for c in calls)


def test_the_rungs_start_with_cupy_attention_in_the_fused_bf16_registry(tmp_path):
    _, calls = _lanes(tmp_path, "registries synth rungs", "tests")
    machine = tmp_path / "machine"
    decodes = [c for c in calls if c.startswith("bench decode")]
    first = decodes[0]
    assert f"--registry {machine / 'cuda-best-fused.toml'} --vs {machine / 'cuda-best-fused-cupy-attn.toml'}" in first
    assert "--depth 32768,131072" in first and "--graph A,B" in first and "--fill-registry" in first
    # predicted from session 5's stored diagnoses (files in the repo) and its per-op speed-ups
    preds = [a for a in first.split() if a.endswith(".json")]
    assert len(preds) == 2 and all((REPO / a).exists() for a in preds), preds
    assert "--expect attention@32768=" in first
    second = decodes[1]
    assert f"--vs {machine / 'cuda-best-fused-cupy-linear.toml'}" in second and "--depth 0 " in second
    assert any(c.startswith("swap linear=cupy_dp4a") for c in calls)
    assert any(c.startswith("swap attention=cupy_splitk_bf16") for c in calls)


def test_one_gpu_runs_the_lanes_in_turn_and_skips_what_needs_two(tmp_path):
    log, calls = _lanes(tmp_path, "registries synth", "tests", "parallel", gpus=1)
    assert "1 GPU(s) here: the two lanes run one after the other; skipped (needs two GPUs): parallel" in log
    assert "[gpu1]" not in log and not any(c.startswith("parallel ") for c in calls)


def test_the_diagnoses_stage_diagnoses_both_registries_and_times_nothing(tmp_path):
    """"diagnoses": the ladder's two diagnoses (torch, then the best registry) without its decode pair, for a
    session whose ledger already holds the pair; the rows' change text names the registry that was chosen."""
    log, calls = _lanes(tmp_path, "registries synth diagnoses", "tests")
    diags = [c for c in calls if c.startswith("diagnose ")]
    assert len(diags) == 2 and "cuda-torch.toml" in diags[0] and "cuda-best.toml" in diags[1]
    assert not any(c.startswith("bench decode") for c in calls)
    assert (tmp_path / "machine" / "best-kind").read_text().startswith("the bf16 Triton registry")


def test_rungs6_makes_only_the_lean_registries_and_times_lastblock_then_the_merged_conv(tmp_path):
    """Session 6's stage on a fresh machine: torch and bf16 only (bf16 fills the contexts), the lastblock registry
    swapped into the fused one, its GPU tests and captured gate before its rung, then the conv rung, a recorded
    diagnosis of where the step stands and the prefill against the frontier."""
    log, calls = _lanes(tmp_path, "rungs6", "tests", gpus=1)
    machine = tmp_path / "machine"
    assert "best registry: bf16" in log
    for reg in ("fast", "fill", "fast-cupy-attn"):
        assert not (machine / f"cuda-{reg}.toml").exists(), reg
    assert any(c.startswith("swap linear=triton_lastblock moe_experts=triton_lastblock moe_router=triton_lastblock")
               for c in calls)
    decodes = [c for c in calls if c.startswith("bench decode")]
    lb, conv = machine / "cuda-best-fused-lastblock.toml", machine / "cuda-best-fused-lastblock-conv.toml"
    assert f"--registry {machine / 'cuda-best-fused.toml'} --vs {lb}" in decodes[0]
    assert f"--registry {lb} --vs {conv}" in decodes[1]
    # then programmatic dependent launch for the decode GEMVs (an experiment) in a copy of the conv registry, at d=0
    pdl = machine / "cuda-best-fused-lastblock-conv-pdl.toml"
    assert f"--registry {conv} --vs {pdl}" in decodes[2] and "--depth 0 " in decodes[2]
    assert len(decodes) == 3
    assert any(c.startswith("swap linear=triton_pdl --device cuda") for c in calls)
    assert "gpu-tests-pdl (limit" in log and "-k pdl tests/backends/test_triton_linear.py" in log
    assert all(f"--fill-registry {machine / 'cuda-bf16.toml'}" in d for d in decodes)
    assert any(c.startswith("engine fuse_short_conv=on --registry") for c in calls)
    diag = next(c for c in calls if c.startswith("diagnose "))
    assert str(pdl) in diag and "--record" in diag  # the newest registry its own rung timed
    assert any(c.startswith("bench prefill") and "--vs" not in c for c in calls)
    order = [i for i, c in enumerate(calls) if c.startswith(("swap linear=triton_lastblock", "check --model k3-nano",
                                                               "bench decode"))]
    assert order == sorted(order) and len(order) >= 3


def test_rungs6_leaves_the_pdl_rung_out_when_its_gpu_tests_failed(tmp_path):
    """A PDL GEMV that gives other bits than triton_lastblock (a read before griddepcontrol.wait) fails its GPU
    tests; the rung that would time it on the 48B is then not run."""
    machine = tmp_path / "machine"
    (machine / "suite-done").mkdir(parents=True)
    (machine / "suite-done" / "gpu-tests-pdl").write_text("1\n")
    log, calls = _lanes(tmp_path, "rungs6", "tests", gpus=1)
    assert any(c.startswith("swap linear=triton_pdl") for c in calls)
    assert not any(c.startswith("bench decode") and "-pdl.toml" in c for c in calls)
    assert "decode-pdl" not in log


def test_rungs7_times_the_moe_prefetch_then_the_linear_prefetch_after_their_gpu_tests(tmp_path):
    """Session 7's stage on a fresh machine: lean registries, the lastblock and merged-conv registries made (not timed:
    SUITE_TIMED), the prefetch GPU tests and depth studies first, then moe_experts=triton_prefetch over the conv
    registry, and linear=triton_prefetch and moe_router=triton_prefetch each over that, each its own row at d=0;
    the captured gate and the recorded diagnosis take the newest timed registry."""
    log, calls = _lanes(tmp_path, "rungs7", "tests", gpus=1,
                        extra_env={"SUITE_TIMED": "decode-lastblock decode-convmerge"})
    machine = tmp_path / "machine"
    conv = machine / "cuda-best-fused-lastblock-conv.toml"
    moepf, linpf = (machine / "cuda-best-fused-lastblock-conv-moepf.toml",
                    machine / "cuda-best-fused-lastblock-conv-moepf-linpf.toml")
    assert not (machine / "cuda-fast.toml").exists()
    assert "gpu-tests-prefetch (limit" in log and "-k prefetch tests/backends/test_triton_moe.py" in log
    assert "tune-prefetch (limit" in log and "moe_decode_prefetch lm_head_prefetch linear_gemv_prefetch" in log
    assert any(c.startswith("swap moe_experts=triton_prefetch --device cuda") for c in calls)
    assert any(c.startswith("swap linear=triton_prefetch --device cuda") for c in calls)
    routpf = machine / "cuda-best-fused-lastblock-conv-moepf-routpf.toml"
    flatmoe, flatlin = machine / "cuda-step-flatmoe.toml", machine / "cuda-step-flatmoe-flatlin.toml"
    wide = machine / "cuda-step-wide.toml"
    decodes = [c for c in calls if c.startswith("bench decode")]
    assert len(decodes) == 6
    assert f"--registry {conv} --vs {moepf}" in decodes[0] and "--depth 0 " in decodes[0]
    assert f"--registry {moepf} --vs {linpf}" in decodes[1]
    assert f"--registry {moepf} --vs {routpf}" in decodes[2]
    # the wide attention combine over the step now (the router prefetch registry, whose stand-in rung won), at two
    # depths; then the flat rungs over that, then each other
    assert f"--registry {routpf} --vs {wide}" in decodes[3] and "--depth 0,32768 " in decodes[3]
    assert any(c.startswith("swap attention=triton_splitk_wide --device cuda") for c in calls)
    assert "-k wide tests/backends/test_triton_attention.py" in log
    assert f"--registry {wide} --vs {flatmoe}" in decodes[4] and f"--registry {flatmoe} --vs {flatlin}" in decodes[5]
    assert any(c.startswith("swap moe_router=triton_prefetch --device cuda") for c in calls)
    assert any(c.startswith("swap moe_experts=triton_flat --device cuda") for c in calls)
    assert "gpu-tests-flat (limit" in log and "tune-flat (limit" in log
    assert log.index("gpu-tests-flat (limit") < log.index("decode-moe-flat (limit")
    assert f"the step now: {flatlin}" in log
    assert any(c.startswith(f"check --model k3-nano --registry {flatlin}") and "--captured" in c for c in calls)
    diag = next(c for c in calls if c.startswith("diagnose "))
    assert str(flatlin) in diag and "--record" in diag
    assert log.index("gpu-tests-prefetch (limit") < log.index("decode-moe-prefetch (limit")


def test_rungs7_on_a_fresh_machine_may_take_the_prefetch_tests_from_an_earlier_call(tmp_path):
    """SUITE_TESTS_PASSED names GPU tests that passed in an earlier call on the same kernels: with them left out
    (SUITE_SKIP) the prefetch rungs still run; without the name they would not."""
    env = {"SUITE_TIMED": "decode-lastblock decode-convmerge", "SUITE_SKIP": "gpu-tests-prefetch tune-prefetch"}
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    log, calls = _lanes(tmp_path / "a", "rungs7", "tests", gpus=1, extra_env=env)
    assert not any(c.startswith("bench decode") and "-moepf.toml" in c for c in calls)
    log, calls = _lanes(tmp_path / "b", "rungs7", "tests", gpus=1,
                        extra_env={**env, "SUITE_TESTS_PASSED": "gpu-tests-prefetch"})
    assert "gpu-tests-prefetch: left out (SUITE_SKIP)" in log
    assert any(c.startswith("bench decode") and "-moepf.toml" in c for c in calls)


def test_only_a_winning_rung_is_the_step_now(tmp_path):
    """The linear and router prefetch rungs time no win (bench's tier column: "none", as the linear one's 0.983 did):
    both are rows, neither registry is the step now, so the captured gate, the diagnosis and a later call's stages
    take the moe prefetch registry that won before them."""
    env = {"SUITE_TIMED": "decode-lastblock decode-convmerge", "STUB_NO_WIN": "-linpf.toml -routpf.toml",
           "SUITE_SKIP": "gpu-tests-flat gpu-tests-wide"}
    log, calls = _lanes(tmp_path, "rungs7", "tests", gpus=1, extra_env=env)
    machine = tmp_path / "machine"
    moepf = machine / "cuda-best-fused-lastblock-conv-moepf.toml"
    assert sum(c.startswith("bench decode") for c in calls) == 3  # the flat rungs wait for their GPU tests
    tiers = {n: (machine / "suite-done" / f"decode-{n}-prefetch.tier").read_text().strip()
             for n in ("moe", "linear", "router")}
    assert tiers == {"moe": "win", "linear": "no win", "router": "no win"}
    assert f"the step now: {moepf}" in log
    diag = next(c for c in calls if c.startswith("diagnose "))
    assert str(moepf) in diag
    log, calls = _lanes(tmp_path, "iq1s131k", "tests", gpus=1, extra_env=env)
    iq1s = next(c for c in calls if c.startswith("bench decode") and "k48-iq1_s.gguf" in c)
    assert f"--registry {moepf} --graph A" in iq1s


def test_rungs7_leaves_the_flat_rungs_out_when_their_gpu_tests_failed(tmp_path):
    """Flat GEMVs that fail their GPU tests (accuracy at the 48B shapes) are not swapped or timed."""
    machine = tmp_path / "machine"
    (machine / "suite-done").mkdir(parents=True)
    (machine / "suite-done" / "gpu-tests-flat").write_text("1\n")
    log, calls = _lanes(tmp_path, "rungs7", "tests", gpus=1,
                        extra_env={"SUITE_TIMED": "decode-lastblock decode-convmerge"})
    assert not any("triton_flat" in c for c in calls)
    assert not any(c.startswith("bench decode") and "cuda-step-flat" in c for c in calls)
    assert f"the step now: {machine / 'cuda-step-wide.toml'}" in log  # the wide attention's stand-in rung won


def test_rungs7_leaves_the_prefetch_rungs_out_when_their_gpu_tests_failed(tmp_path):
    """Prefetch kernels that give other bits than triton_lastblock on the GPU fail their tests: no prefetch registry
    is swapped or timed; the later rungs take the merged-conv registry as the step they start from."""
    machine = tmp_path / "machine"
    (machine / "suite-done").mkdir(parents=True)
    (machine / "suite-done" / "gpu-tests-prefetch").write_text("1\n")
    log, calls = _lanes(tmp_path, "rungs7", "tests", gpus=1,
                        extra_env={"SUITE_TIMED": "decode-lastblock decode-convmerge"})
    assert not any("triton_prefetch" in c for c in calls)
    assert not any(c.startswith("bench decode") and "-moepf" in c for c in calls)
    # the rungs whose own tests passed build on the step now: the wide attention on the merged-conv registry
    wide = next(c for c in calls if c.startswith("bench decode") and "cuda-step-wide.toml" in c)
    assert f"--registry {machine / 'cuda-best-fused-lastblock-conv.toml'} --vs" in wide


def test_the_follow_up_stages_take_the_newest_registry_its_rung_timed(tmp_path):
    """After rungs6 on the same machine, iq1s131k and attn131k use the newest registry whose own rung was timed
    (the stand-in bench always succeeds: the PDL one), on the lean prerequisites, filled by bf16."""
    _lanes(tmp_path, "rungs6", "tests", gpus=1)
    log, calls = _lanes(tmp_path, "iq1s131k attn131k", "tests", gpus=1)
    machine = tmp_path / "machine"
    conv = machine / "cuda-best-fused-lastblock-conv-pdl.toml"
    assert f"the step now: {conv}" in log
    assert not (machine / "cuda-fast.toml").exists()
    iq1s = next(c for c in calls if c.startswith("bench decode") and "k48-iq1_s.gguf" in c)
    assert f"--registry {conv} --graph A" in iq1s and "--depth 131072" in iq1s and "--vs" not in iq1s
    assert any(c.startswith("synth --preset kimi-linear-48b-a3b --quant iq1_s") for c in calls)
    att = next(c for c in calls if c.startswith("bench decode") and "--expect attention@131072" in c)
    assert f"--registry {conv} --vs {machine / 'cuda-best-fused-lastblock-conv-pdl-cupy-attn.toml'}" in att
    assert all(f"--fill-registry {machine / 'cuda-bf16.toml'}" in c for c in (iq1s, att))


def test_now_reg_falls_back_when_the_rungs_were_refused(tmp_path):
    """A refused rung (bench rc 1) leaves its registry out: the fused best is the step then."""
    machine = tmp_path / "machine"
    (machine / "suite-done").mkdir(parents=True)
    (machine / "suite-done" / "decode-lastblock").write_text("1\n")
    (machine / "suite-done" / "decode-convmerge").write_text("1\n")
    log, calls = _lanes(tmp_path, "iq1s131k", "tests", gpus=1)
    assert f"the step now: {machine / 'cuda-best-fused.toml'}" in log


def test_iq1s131k_times_the_iq1s_step_suite_iq1s_reg_names(tmp_path):
    """SUITE_IQ1S_REG names the IQ1_S step (a registry on the machine): one arm at 131072 on the IQ1_S 48B under it,
    said in the change; one not on the machine is said and left out, nothing timed."""
    machine = tmp_path / "machine"
    machine.mkdir()
    reg = machine / "cuda-s55-stack-iq1s-q8_iq1s_sg_short-q8h_iq1s_t2-q8_iq1s_t2.toml"
    reg.write_text((REPO / "registry.toml").read_text())
    log, calls = _lanes(tmp_path, "iq1s131k", "", gpus=1, extra_env={"SUITE_IQ1S_REG": str(reg)})
    bench = [c for c in calls if c.startswith("bench decode")]
    assert len(bench) == 1 and f"--registry {reg} --graph A " in bench[0], bench
    assert "--depth 131072" in bench[0] and f"--model {machine / 'k48-iq1_s.gguf'} " in bench[0]
    assert f"the IQ1_S step now ({reg.name}, SUITE_IQ1S_REG)" in bench[0]
    log, calls = _lanes(tmp_path, "iq1s131k", "", gpus=1, extra_env={"SUITE_IQ1S_REG": str(machine / "gone.toml")})
    assert f"decode131k-iq1s: left out (SUITE_IQ1S_REG={machine / 'gone.toml'} is not on this machine)" in log


def test_rungs_timed_in_an_earlier_session_are_not_timed_again_but_count(tmp_path):
    """SUITE_TIMED names rungs whose rows are in the ledger already: a fresh machine makes their registries (the
    swaps prove them again) but does not time them, and now_reg takes them as timed. With the PDL tests failing,
    the step now is the merged-conv registry."""
    machine = tmp_path / "machine"
    (machine / "suite-done").mkdir(parents=True)
    (machine / "suite-done" / "gpu-tests-pdl").write_text("1\n")
    log, calls = _lanes(tmp_path, "rungs6", "tests", gpus=1,
                        extra_env={"SUITE_TIMED": "decode-lastblock decode-convmerge"})
    assert "decode-lastblock: timed in an earlier session (SUITE_TIMED); not timed again (leave decode-lastblock out " \
        "of SUITE_TIMED to re-time it)" in log  # session 40's call 1 asked for such a pair and got none
    assert not any(c.startswith("bench decode") for c in calls)
    assert any(c.startswith("swap linear=triton_lastblock") for c in calls)
    assert f"the step now: {machine / 'cuda-best-fused-lastblock-conv.toml'}" in log


def test_two_lanes_naming_the_same_gpu_tests_run_them_once(tmp_path):
    """rungs7 on GPU 0 and proofs7 beside it on GPU 1: each proof (GPU tests, tile studies) runs in one lane only,
    the other lane waits for it or finds it done, and the rungs behind each proof still run."""
    env = {"SUITE_TIMED": "decode-lastblock decode-convmerge", "STUB_PYTEST_SECONDS": "2"}
    log, calls = _lanes(tmp_path, "rungs7", "proofs7", extra_env=env)
    for step in ("gpu-tests-prefetch", "tune-prefetch", "gpu-tests-wide", "gpu-tests-flat", "tune-flat"):
        assert log.count(f"{step} (limit") == 1, step
    assert "running in another lane, waiting for it" in log or "done earlier on this machine" in log
    decodes = [c for c in calls if c.startswith("bench decode")]
    assert len(decodes) == 6 and "cuda-step-flatmoe-flatlin.toml" in decodes[-1]
    assert not list((tmp_path / "machine" / "suite-done").glob("*.running"))


def test_a_step_marked_running_by_a_process_that_is_gone_is_taken_over(tmp_path):
    """A call killed from outside leaves its step's running marker behind; the next call does not wait on it."""
    gone = subprocess.run(["bash", "-c", "echo $$"], capture_output=True, text=True).stdout.strip()
    marker = tmp_path / "machine" / "suite-done" / "gpu-tests.running"
    marker.mkdir(parents=True)
    (marker / "pid").write_text(gone + "\n")
    log, _ = _lanes(tmp_path, "tests", "", gpus=1)
    assert "gpu-tests (limit" in log and "waiting for it" not in log
    assert (tmp_path / "machine" / "suite-done" / "gpu-tests").read_text().strip() == "0"


S8_TIMED = "decode-lastblock decode-convmerge decode-moe-prefetch decode-router-prefetch decode-attn-cupy-now"


def test_rungs8_rebuilds_session_8s_step_and_times_cupy_float_over_it(tmp_path):
    """A fresh machine: the step's registries made again by swaps (their rungs timed in earlier sessions), the
    cupy_float GPU tests in the lane beside, then cupy_float for the lm_head's type alone (linear@Q6_K) over the
    cupy-attention registry, then for every type over that, each at 0 and 32768 and naming its one change; the
    captured gate and the diagnosis take the winner."""
    log, calls = _lanes(tmp_path, "rungs8", "proofs8", extra_env={"SUITE_TIMED": S8_TIMED, "STUB_PYTEST_SECONDS": "1"})
    machine = tmp_path / "machine"
    attn, head, cf = (machine / "cuda-best-fused-lastblock-conv-moepf-routpf-cupy-attn.toml",
                      machine / "cuda-step8-q6k-cupy-float.toml", machine / "cuda-step8-cupy-float.toml")
    swaps = [c for c in calls if c.startswith("swap ")]
    for pair in ("linear=triton_lastblock", "moe_experts=triton_prefetch", "moe_router=triton_prefetch",
                 "attention=cupy_splitk_bf16", "linear@Q6_K=cupy_float", "linear=cupy_float"):
        assert any(c.startswith(f"swap {pair} ") for c in swaps), pair
    lowrank = machine / "cuda-step8-lowrank.toml"
    decodes = [c for c in calls if c.startswith("bench decode")]
    assert len(decodes) == 3
    assert f"--registry {attn} --vs {head}" in decodes[0] and "--changes linear@Q6_K" in decodes[0]
    assert f"--registry {head} --vs {cf}" in decodes[1] and "--changes linear " in decodes[1]
    assert all("--depth 0,32768 " in c for c in decodes[:2])
    assert f"--registry {cf} --vs {lowrank}" in decodes[2] and "--changes engine" in decodes[2]
    assert any(c.startswith("engine fuse_low_rank=on --registry") for c in calls)
    assert log.count("gpu-tests-cupy-float (limit") == 1
    assert log.index("gpu-tests-cupy-float rc=0") < log.index("decode-lmhead-cupy-float (limit")
    assert f"the step now: {lowrank}" in log
    diag = next(c for c in calls if c.startswith("diagnose "))
    assert str(lowrank) in diag and "--record" in diag


def test_rungs8_leaves_cupy_float_out_when_its_gpu_tests_failed(tmp_path):
    machine = tmp_path / "machine"
    (machine / "suite-done").mkdir(parents=True)
    (machine / "suite-done" / "gpu-tests-cupy-float").write_text("1\n")
    log, calls = _lanes(tmp_path, "rungs8", "tests", gpus=1, extra_env={"SUITE_TIMED": S8_TIMED})
    assert not any("=cupy_float" in c or "cupy-float.toml" in c for c in calls)
    assert f"the step now: {machine / 'cuda-step8-lowrank.toml'}" in log  # the low-rank rung (a stand-in win)


def test_a_rung_registry_made_over_another_base_is_made_again(tmp_path):
    """Session 8: the wide attention's registry was made over the MoE prefetch registry in one call and timed in the
    next against the router prefetch registry (two changes, one row). A registry whose recorded base is not the
    rung's base now is swapped again over it."""
    env = {"SUITE_TIMED": "decode-lastblock decode-convmerge decode-moe-prefetch",
           "SUITE_SKIP": "gpu-tests-flat tune-flat", "STUB_NO_WIN": "-routpf.toml -linpf.toml"}
    machine = tmp_path / "machine"
    _lanes(tmp_path, "rungs7", "tests", gpus=1, extra_env={**env, "SUITE_SKIP": env["SUITE_SKIP"] + " decode-attn-wide"})
    wide = machine / "cuda-step-wide.toml"
    moepf = machine / "cuda-best-fused-lastblock-conv-moepf.toml"
    assert (machine / "cuda-step-wide.toml.base").read_text().strip() == str(moepf)
    # the router rung now wins: its registry is the base, and the wide registry is made again over it
    (machine / "suite-done" / "decode-router-prefetch.tier").write_text("win\n")
    routpf = machine / "cuda-best-fused-lastblock-conv-moepf-routpf.toml"
    log, calls = _lanes(tmp_path, "rungs7", "tests", gpus=1, extra_env=env)
    assert (machine / "cuda-step-wide.toml.base").read_text().strip() == str(routpf)
    timed = next(c for c in calls[::-1] if c.startswith("bench decode") and str(wide) in c)
    assert f"--registry {routpf} --vs {wide}" in timed and "--changes attention" in timed


def test_a_rung_that_won_in_an_earlier_call_keeps_its_registry_and_is_the_next_rungs_base(tmp_path):
    """Session 8: the lm_head rung won in one call; in the next, its base was taken as the step now, i.e. its own
    registry, so fresh_over dropped the winner (its .base named the cupy-attention registry) and the later rungs
    were made over the older registry. A rung's base is the newest won registry older than the rung (now_reg RUNG):
    the winner stays, and the every-linear rung is made and timed over it; a third call remakes nothing."""
    machine = tmp_path / "machine"
    attn, head, cf, lowrank = (machine / "cuda-best-fused-lastblock-conv-moepf-routpf-cupy-attn.toml",
                               machine / "cuda-step8-q6k-cupy-float.toml", machine / "cuda-step8-cupy-float.toml",
                               machine / "cuda-step8-lowrank.toml")
    env = {"SUITE_TIMED": S8_TIMED}
    # the first call: the lm_head rung wins, the later rungs are left out (the budget ended)
    _lanes(tmp_path, "rungs8", "tests", gpus=1,
           extra_env={**env, "SUITE_SKIP": "decode-linear-cupy-float decode-fuse-lowrank"})
    assert (machine / "suite-done" / "decode-lmhead-cupy-float.tier").read_text().strip() == "win"
    assert head.exists() and Path(f"{head}.base").read_text().strip() == str(attn)
    # the next call on the same machine
    n_before = len((tmp_path / "sparkops.log").read_text().splitlines())
    log, calls = _lanes(tmp_path, "rungs8", "tests", gpus=1, extra_env=env)
    new = calls[n_before:]
    assert head.exists() and Path(f"{head}.base").read_text().strip() == str(attn)
    assert not any(c.startswith("swap linear@Q6_K=cupy_float") for c in new)
    assert Path(f"{cf}.base").read_text().strip() == str(head)  # made over the winner in the first call, kept
    decodes = [c for c in new if c.startswith("bench decode")]
    assert len(decodes) == 2
    assert f"--registry {head} --vs {cf}" in decodes[0] and "--changes linear " in decodes[0]
    # the low-rank registry, made over the lm_head one in the first call, is made again over the every-linear one
    assert Path(f"{lowrank}.base").read_text().strip() == str(cf)
    assert f"--registry {cf} --vs {lowrank}" in decodes[1]
    assert f"the step now: {lowrank}" in log.split("decode-fuse-lowrank rc=0")[-1]
    # every rung has won: a third call remakes and times nothing, and no registry loses its base
    n_before = len((tmp_path / "sparkops.log").read_text().splitlines())
    log, calls = _lanes(tmp_path, "rungs8", "tests", gpus=1, extra_env=env)
    new = calls[n_before:]
    assert not any(c.startswith(("swap linear", "engine fuse_low_rank", "bench decode")) for c in new), new
    assert [Path(f"{r}.base").read_text().strip() for r in (head, cf, lowrank)] == [str(attn), str(head), str(cf)]
    assert log.count(f"the step now: {lowrank}") == 2


def test_the_rungs7_rungs_that_won_keep_their_registries_in_a_later_call(tmp_path):
    """The same in rungs7: after the wide attention and flat rungs won, a later call takes each rung's base below
    it (now_reg RUNG), not the newest winner (the flat linear registry), and neither registry is made again."""
    machine = tmp_path / "machine"
    env = {"SUITE_TIMED": "decode-lastblock decode-convmerge"}
    routpf = machine / "cuda-best-fused-lastblock-conv-moepf-routpf.toml"
    wide, flatmoe, flatlin = (machine / "cuda-step-wide.toml", machine / "cuda-step-flatmoe.toml",
                              machine / "cuda-step-flatmoe-flatlin.toml")
    _lanes(tmp_path, "rungs7", "tests", gpus=1, extra_env=env)
    n_before = len((tmp_path / "sparkops.log").read_text().splitlines())
    log, calls = _lanes(tmp_path, "rungs7", "tests", gpus=1, extra_env=env)
    new = calls[n_before:]
    assert not any(c.startswith(("swap attention=triton_splitk_wide", "swap moe_experts=triton_flat")) for c in new)
    assert wide.exists() and Path(f"{wide}.base").read_text().strip() == str(routpf)
    assert flatmoe.exists() and Path(f"{flatmoe}.base").read_text().strip() == str(wide)
    assert log.count(f"the step now: {flatlin}") == 2


S9_TIMED = S8_TIMED + " decode-lmhead-cupy-float"


def test_rungs9_swaps_dqmm_over_the_prefill_registry_and_times_the_pair_after_its_gpu_tests(tmp_path):
    """A fresh machine, rungs9 on GPU 0 beside proofs9 on GPU 1: the dqmm GPU tests run once (the rungs lane waits
    for the proof lane's run or finds it done); then triton_dqmm is swapped into a copy of the prefill registry for
    both ops, the first prefill diagnosis is made (missing here), the pair is timed with enough pairs for a tier and
    naming its two changed ops, the chunk is diagnosed under dqmm, and the (stand-in) win opens the 16384-token chunk
    study. A second call on the machine runs none of it again."""
    from sparkops.cli.bench_cmd import MIN_PAIRS_FOR_A_TIER

    log, calls = _lanes(tmp_path, "rungs9", "proofs9", extra_env={"STUB_PYTEST_SECONDS": "1"})
    machine = tmp_path / "machine"
    prefill, dqmm, bf16 = machine / "cuda-prefill.toml", machine / "cuda-prefill-dqmm.toml", machine / "cuda-bf16.toml"
    assert "best registry: bf16" in log and not (machine / "cuda-fast.toml").exists()  # the lean prerequisites
    assert log.count("gpu-tests-dqmm (limit") == 1
    assert "[gpu1] gpu-tests-dqmm" in log and "unknown stage" not in log  # proofs9 took its part in GPU 1's lane
    assert ("-k dqmm or dequantize tests/backends/test_triton_dequantize.py tests/backends/test_triton_linear.py "
            "tests/backends/test_triton_moe.py") in log
    swaps = [c for c in calls if c.startswith("swap ") and "triton_dqmm" in c]
    assert swaps == [f"swap linear=triton_dqmm moe_experts=triton_dqmm --device cuda --registry {dqmm}.new"]
    assert dqmm.exists() and Path(f"{dqmm}.base").read_text().strip() == str(prefill)
    kdac = machine / "cuda-prefill-kdac.toml"
    prefills = [c for c in calls if c.startswith("bench prefill")]
    assert len(prefills) == 3
    pair, kda_pair, chunk = prefills
    assert f"--registry {prefill} --vs {dqmm}" in pair and "--changes linear,moe_experts" in pair
    assert "--tokens 32768 --chunk 4096 " in pair
    assert int(pair.split("--repeats ")[1].split()[0]) >= MIN_PAIRS_FOR_A_TIER  # fewer pairs never give a win
    # predicted from A's chunk diagnosis (made first), with the per-op factors the stage states
    assert f"--prediction {machine / 'suite-diag' / 'diag-prefill.json'} --expect linear=9.5,moe_experts=6.3" in pair
    assert f"--prediction {machine / 'suite-diag' / 'diag-prefill-dqmm.json'} --expect kda=3.4" in kda_pair
    assert (machine / "suite-done" / "prefill-dqmm.tier").read_text().strip() == "win"
    # the chunked KDA over the dqmm registry (its rung won), then the chunk study on the newest winner
    assert f"--registry {dqmm} --vs {kdac}" in kda_pair and "--changes kda" in kda_pair
    assert Path(f"{kdac}.base").read_text().strip() == str(dqmm)
    assert [c for c in calls if c.startswith("swap ") and "kda=triton_chunked" in c] == [
        f"swap kda=triton_chunked --device cuda --registry {kdac}.new"]
    assert f"--registry {kdac} " in chunk and "--chunk 16384 " in chunk and "--vs" not in chunk
    diags = [c for c in calls if c.startswith("diagnose ")]
    assert len(diags) == 2
    assert f"--registry {prefill} " in diags[0] and "--depth 0,28672 --prefill-chunk 4096 " in diags[0]
    assert f"--registry {dqmm} " in diags[1] and "--depth 0 --prefill-chunk 4096 " in diags[1]
    assert all(f"--fill-registry {bf16}" in d for d in diags)
    assert str(machine / "suite-diag" / "diag-prefill-dqmm.json") in diags[1]
    steps = ["gpu-tests-dqmm rc=0", "] swap-dqmm (limit", "] diagnose-prefill (limit", "] prefill-dqmm (limit",
             "] diagnose-prefill-dqmm (limit", "] swap-kda-chunked (limit", "] prefill-kda-chunked (limit",
             "] prefill-chunk16k (limit"]
    at = [log.index(s) for s in steps]
    assert at == sorted(at), list(zip(steps, at))
    # the same call again on this machine: every step ended, none runs again
    n_before = len(calls)
    _, calls2 = _lanes(tmp_path, "rungs9", "proofs9")
    assert calls2[n_before:] == ["plugins"]


def test_rungs9_leaves_the_dqmm_rung_out_when_its_gpu_tests_failed(tmp_path):
    """dqmm kernels that fail their GPU tests (the bf16 decode of a type, or the prefill GEMMs off at the 48B's
    shapes) are neither swapped nor timed, nor is the chunk diagnosed for them."""
    machine = tmp_path / "machine"
    (machine / "suite-done").mkdir(parents=True)
    (machine / "suite-done" / "gpu-tests-dqmm").write_text("1\n")
    log, calls = _lanes(tmp_path, "rungs9", "", gpus=1)
    assert "best registry: bf16" in log  # the stage ran: its prerequisites, then its proof's (failed) result
    assert "gpu-tests-dqmm: done earlier on this machine (rc=1), skipped" in log
    assert not any("triton_dqmm" in c or "cuda-prefill-dqmm" in c for c in calls)
    # the chunked-KDA rung's baseline (the prefill registry) is diagnosed for its prediction, nothing under dqmm
    diags = [c for c in calls if c.startswith("diagnose ")]
    assert len(diags) == 1 and f"--registry {machine / 'cuda-prefill.toml'} " in diags[0]
    assert not (machine / "cuda-prefill-dqmm.toml").exists()
    assert "prefill-dqmm" not in log
    # the chunked-KDA rung does not depend on dqmm: it is timed over the prefill registry
    prefills = [c for c in calls if c.startswith("bench prefill")]
    assert len(prefills) == 2 and "--changes kda" in prefills[0] and "--chunk 16384" in prefills[1]
    assert f"--prediction {machine / 'suite-diag' / 'diag-prefill.json'} --expect kda=3.4" in prefills[0]
    assert f"--registry {machine / 'cuda-prefill.toml'} --vs {machine / 'cuda-prefill-kdac.toml'}" in prefills[0]


def test_rungs9_studies_16384_token_chunks_only_after_the_pair_won(tmp_path):
    """The chunk study follows a prefill rung's win (bench's tier column, kept in $DONE like a decode rung's) and runs
    on the newest winner; after "none" the dqmm pair is a row and the chunked-KDA rung takes the prefill registry. A prefill of one arm (prefill_lean's, against the frontier) keeps
    no tier, and prefill_lean takes the first prefill diagnosis rungs9 made."""
    for case, env in (("win", {}), ("none", {"STUB_NO_WIN": "cuda-prefill-dqmm.toml"})):
        (tmp_path / case).mkdir()
        log, calls = _lanes(tmp_path / case, "rungs9", "", gpus=1, extra_env=env)
        machine = tmp_path / case / "machine"
        dqmm = machine / "cuda-prefill-dqmm.toml"
        prefills = [c for c in calls if c.startswith("bench prefill")]
        assert f"--vs {dqmm} " in prefills[0], case
        assert any(c.startswith("diagnose ") and f"--registry {dqmm} " in c for c in calls), case
        tier = (machine / "suite-done" / "prefill-dqmm.tier").read_text().strip()
        chunks = [c for c in prefills if "--chunk 16384" in c]
        kdac = machine / "cuda-prefill-kdac.toml"
        if case == "win":  # every rung won: the chunk study runs on the newest winner, the chunked-KDA registry
            assert tier == "win" and len(chunks) == 1 and f"--registry {kdac} " in chunks[0]
        else:  # dqmm did not win: the chunked KDA is timed over the prefill registry, and wins: the study runs on it
            assert tier == "no win" and f"--registry {machine / 'cuda-prefill.toml'} --vs {kdac}" in prefills[1]
            assert len(chunks) == 1 and f"--registry {kdac} " in chunks[0]
    n_before = len(calls)
    log, calls = _lanes(tmp_path / "none", "prefill_lean", "", gpus=1)
    new = calls[n_before:]
    assert "diagnose-prefill: done earlier on this machine (rc=0), skipped" in log
    assert [c for c in new if c.startswith("bench prefill")] and not any("--vs" in c for c in new)
    assert not (tmp_path / "none" / "machine" / "suite-done" / "prefill-best.tier").exists()


def test_session_10s_first_call_rebuilt_the_lm_head_step_beside_the_prefill_rung(tmp_path):
    """Session 10's first call (session 9's plan) on a fresh machine: rungs9 on GPU 0, proofs9 then rungs8 on GPU 1,
    with session 9's winner (the lm_head rung) in SUITE_TIMED: rungs8 does not time it again but still swaps its
    registry (its cupy_float tests run first) over the cupy-attention step, so that now_reg takes it; session 9's
    other rungs did not win (stand-ins: "none"). The second call's IQ1_S row runs under the lm_head step."""
    env = {"SUITE_TIMED": S9_TIMED, "STUB_NO_WIN": "step8-cupy-float.toml step8-lowrank.toml",
           "STUB_PYTEST_SECONDS": "1"}
    log, calls = _lanes(tmp_path, "rungs9", "proofs9 prefill_diag rungs8", extra_env=env)
    machine = tmp_path / "machine"
    attn = machine / "cuda-best-fused-lastblock-conv-moepf-routpf-cupy-attn.toml"
    head = machine / "cuda-step8-q6k-cupy-float.toml"
    assert "decode-lmhead-cupy-float: timed in an earlier session (SUITE_TIMED)" in log
    assert log.index("gpu-tests-cupy-float rc=0") < log.index("swap-lmhead-cupy-float (limit")
    assert any(c.startswith(f"swap linear@Q6_K=cupy_float --device cuda --registry {head}.new") for c in calls)
    assert Path(f"{head}.base").read_text().strip() == str(attn)
    assert not any(c.startswith("bench decode") and f"--vs {head}" in c for c in calls)
    assert f"the step now: {head}" in log
    assert any(c.startswith("bench prefill") and f"--vs {machine / 'cuda-prefill-dqmm.toml'}" in c for c in calls)
    # the chunk diagnosis the dqmm pair is predicted from: made once (by GPU 1's prefill_diag, or by rungs9 where it
    # got there first: the lanes race, and run() lets the other wait), before the pair
    assert log.count("diagnose-prefill (limit") == 1 and "unknown stage" not in log
    done = log.index("] diagnose-prefill rc=0")
    assert done < log.index("] prefill-dqmm (limit")
    n_before = len(calls)
    log, calls = _lanes(tmp_path, "rungs9", "iq1s131k", extra_env=env)
    iq1s = next(c for c in calls[n_before:] if c.startswith("bench decode") and "k48-iq1_s.gguf" in c)
    assert f"--registry {head} --graph A" in iq1s


def test_rungs9_studies_no_chunk_size_when_no_prefill_rung_won(tmp_path):
    """Neither dqmm nor the chunked KDA wins (stand-ins: "none"): two rows, no chunk study, and the chunked-KDA
    registry was made over the prefill registry (the dqmm one did not win)."""
    log, calls = _lanes(tmp_path, "rungs9", "", gpus=1,
                        extra_env={"STUB_NO_WIN": "cuda-prefill-dqmm.toml cuda-prefill-kdac.toml"})
    machine = tmp_path / "machine"
    prefills = [c for c in calls if c.startswith("bench prefill")]
    assert len(prefills) == 2 and not any("--chunk 16384" in c for c in prefills)
    assert Path(f"{machine / 'cuda-prefill-kdac.toml'}.base").read_text().strip() == str(machine / "cuda-prefill.toml")
    assert (machine / "suite-done" / "prefill-kda-chunked.tier").read_text().strip() == "no win"
    assert "prefill-chunk16k" not in log


S10_TIMED = "prefill-dqmm prefill-kda-chunked prefill-chunk16k"


def test_rungs10_times_the_fused_moe_prefill_over_the_prefill_registry_now(tmp_path):
    """The next session's first call: rungs9 then rungs10 on GPU 0 beside proofs9 and proofs10 on GPU 1, session 10's
    prefill rows in SUITE_TIMED. rungs9 rebuilds the chunked-KDA registry by its swaps alone (no pair, and none of
    the diagnoses that only predicted them); rungs10 runs the fused MoE's GPU tests once, swaps it over that registry,
    diagnoses the 16384-token chunk of its base, times the pair there against that diagnosis, diagnoses the chunk
    after it, times the winner in one 32768-token forward, and the prefill tune studies run once."""
    from sparkops.cli.bench_cmd import MIN_PAIRS_FOR_A_TIER

    env = {"SUITE_TIMED": S10_TIMED, "STUB_PYTEST_SECONDS": "1"}
    log, calls = _lanes(tmp_path, "rungs9 rungs10", "proofs9 proofs10", extra_env=env)
    machine = tmp_path / "machine"
    kdac, fused = machine / "cuda-prefill-kdac.toml", machine / "cuda-prefill-moefused.toml"
    assert "unknown stage" not in log and f"the prefill registry now: {kdac}" in log
    assert "prefill-dqmm: timed in an earlier session (SUITE_TIMED)" in log and "SKIP prefill" not in log
    assert "prefill-kda-chunked: timed in an earlier session (SUITE_TIMED)" in log
    assert kdac.exists() and Path(f"{kdac}.base").read_text().strip() == str(machine / "cuda-prefill-dqmm.toml")
    assert log.count("gpu-tests-moefused (limit") == 1 and log.count("tune-prefill (limit") == 1
    assert "-k dqmm_fused tests/backends/test_triton_moe.py" in log
    assert "router_prefill dequant_bf16 attention_prefill kda_prefill" in log
    assert [c for c in calls if c.startswith("swap ") and "dqmm_fused" in c] == [
        f"swap moe_experts=triton_dqmm_fused --device cuda --registry {fused}.new"]
    assert Path(f"{fused}.base").read_text().strip() == str(kdac)
    diags = [c for c in calls if c.startswith("diagnose ")]
    assert len(diags) == 4 and all("--prefill-chunk 16384 " in d for d in diags)  # the 4096 ones predicted timed rows
    assert f"--registry {kdac} " in diags[0] and f"--registry {fused} " in diags[1]
    prefills = [c for c in calls if c.startswith("bench prefill")]
    assert len(prefills) == 4
    pair, sdpa_pair, split_pair, whole = prefills
    assert f"--registry {kdac} --vs {fused}" in pair and "--chunk 16384 " in pair and "--changes moe_experts" in pair
    assert int(pair.split("--repeats ")[1].split()[0]) >= MIN_PAIRS_FOR_A_TIER
    assert f"--prediction {machine / 'suite-diag' / 'diag-prefill-16k.json'} --expect moe_experts=1.9" in pair
    # the SDPA attention over the fused-MoE registry (its rung won), predicted from the diagnosis after that rung
    sdpa = machine / "cuda-prefill-sdpa.toml"
    assert f"--registry {fused} --vs {sdpa}" in sdpa_pair and "--changes attention" in sdpa_pair
    assert f"--prediction {machine / 'suite-diag' / 'diag-prefill-moefused.json'} --expect attention=2.5" in sdpa_pair
    assert Path(f"{sdpa}.base").read_text().strip() == str(fused)
    assert log.count("gpu-tests-sdpa (limit") == 1
    # the split KDA prepare over the SDPA registry (it won), its base diagnosed first (the SDPA rung has no diagnosis
    # after it); the stated estimate: the stand-in GPU test printed no ratio
    split = machine / "cuda-prefill-kdasplit.toml"
    assert f"--registry {sdpa} --vs {split}" in split_pair and "--changes kda" in split_pair
    assert f"--prediction {machine / 'suite-diag' / 'diag-prefill-sdpa.json'} --expect kda=1.6" in split_pair
    assert f"--registry {sdpa} " in diags[2] and log.count("gpu-tests-kdasplit (limit") == 1
    assert f"--registry {split} " in whole and "--chunk 32768 " in whole and "--vs" not in whole
    assert f"--registry {split} " in diags[-1]
    steps = ["gpu-tests-moefused rc=0", "] swap-moe-fused (limit", "] diagnose-prefill-16k (limit",
             "] prefill-moe-fused (limit", "] diagnose-prefill-moefused (limit", "] swap-sdpa (limit",
             "] prefill-sdpa (limit", "] swap-kda-split (limit", "] diagnose-prefill-kdabase (limit",
             "] prefill-kda-split (limit", "] prefill-now-32k (limit", "] diagnose-prefill-now-16k (limit"]
    at = [log.index(s) for s in steps]
    assert at == sorted(at), list(zip(steps, at))


def test_rungs10_leaves_the_fused_moe_out_when_its_gpu_tests_failed(tmp_path):
    """Failed GPU tests of the fused MoE: no swap, no pair; the 16384-token chunk of the registry now is still
    diagnosed, and the SDPA rung is timed over that registry against it, the split KDA over the SDPA one. Failed
    ones of the SDPA attention too: neither rung; the split KDA over the registry now. The tune studies still run."""
    for case, failed in (("moe", ("gpu-tests-moefused",)), ("both", ("gpu-tests-moefused", "gpu-tests-sdpa"))):
        machine = tmp_path / case / "machine"
        (machine / "suite-done").mkdir(parents=True)
        for name in failed:
            (machine / "suite-done" / name).write_text("1\n")
        log, calls = _lanes(tmp_path / case, "rungs9 rungs10", "", gpus=1, extra_env={"SUITE_TIMED": S10_TIMED})
        assert "gpu-tests-moefused: done earlier on this machine (rc=1), skipped" in log
        assert not any("dqmm_fused" in c or "moefused" in c for c in calls)
        assert not (machine / "cuda-prefill-moefused.toml").exists()
        assert [c for c in calls if c.startswith("diagnose ")]
        prefills = [c for c in calls if c.startswith("bench prefill")]
        kdac, sdpa = machine / "cuda-prefill-kdac.toml", machine / "cuda-prefill-sdpa.toml"
        split = machine / "cuda-prefill-kdasplit.toml"
        if case == "moe":
            assert f"--registry {kdac} --vs {sdpa}" in prefills[0], prefills
            diag16 = machine / "suite-diag" / "diag-prefill-16k.json"
            assert f"--prediction {diag16} --expect attention=2.5" in prefills[0]
            assert f"--registry {sdpa} --vs {split}" in prefills[1], prefills
        else:  # the split KDA is timed over the registry now, against its diagnosis
            assert not sdpa.exists() and f"--registry {kdac} --vs {split}" in prefills[0], prefills
            assert f"--prediction {machine / 'suite-diag' / 'diag-prefill-16k.json'}" in prefills[0]
        assert "tune-prefill rc=0" in log


def test_the_two_test_halves_run_one_per_lane_and_cover_every_gpu_test_file(tmp_path):
    """tests1of2 on GPU 0 and tests2of2 on GPU 1: each runs pytest -m gpu on its shard's files (bench/gpu_test_shard.py
    from the recorded seconds), the two lists disjoint and together every test file but tests/parallel."""
    log, _ = _lanes(tmp_path, "tests1of2", "tests2of2")
    lines = {lane: next(l for l in log.splitlines() if f"[{lane}] gpu-tests{part} (limit" in l)
             for lane, part in (("gpu0", "1of2"), ("gpu1", "2of2"))}
    halves = [{w for w in line.split() if w.startswith("tests/") and w.endswith(".py")} for line in lines.values()]
    assert halves[0] and halves[1] and not halves[0] & halves[1]
    every = {str(p.relative_to(REPO)) for p in (REPO / "tests").rglob("test_*.py")
             if not str(p.relative_to(REPO)).startswith("tests/parallel/")}
    assert halves[0] | halves[1] == every
    assert all("-m gpu" in line for line in lines.values()) and "SKIP" not in log


def test_the_split_kda_rung_is_predicted_from_its_gpu_tests_per_layer_ratio(tmp_path):
    """The split KDA's GPU test printed split/one 0.512 at T=16384 (in an earlier call, another lane's log): the pair
    is predicted with kda x1.95 on its base's diagnosis."""
    machine = tmp_path / "machine"
    (machine / "suite-done").mkdir(parents=True)
    (machine / "suite-done" / "gpu-tests-kdasplit").write_text("0\n")
    old = machine / "suite-results" / "1700000000-gpu1"
    old.mkdir(parents=True)
    (old / "gpu-tests-kdasplit.log").write_text(
        "kda prefill T=32768 per layer: triton_chunked 17.6 ms, triton_chunked_split 9.1 ms (split/one 0.517)\n"
        "kda prefill T=16384 per layer: triton_chunked 8.80 ms, triton_chunked_split 4.51 ms (split/one 0.512)\n")
    log, calls = _lanes(tmp_path, "rungs9 rungs10", "", gpus=1, extra_env={"SUITE_TIMED": S10_TIMED})
    pair = next(c for c in calls if c.startswith("bench prefill") and "--changes kda" in c)
    assert "--expect kda=1.95" in pair


S11_TIMED = "prefill-dqmm prefill-kda-chunked prefill-chunk16k prefill-moe-fused"


def test_rungs11_times_the_tuned_defaults_then_sdpa_and_split_kda_at_32768(tmp_path):
    """Session 11's third call, fresh: rungs9 then rungs11 on GPU 0 beside proofs9, proofs11 and tune11 on GPU 1.
    rungs11 rebuilds the fused-MoE registry by swap (its GPU tests once, in either lane), times it in one forward of
    32768 (one arm: the tuned launch defaults), diagnoses that forward, then the SDPA pair and the split-KDA pair,
    both over that registry at 32768 and predicted from that diagnosis; GPU 1 runs the retuned kernels' tests and
    the tune studies once."""
    env = {"SUITE_TIMED": S11_TIMED, "STUB_PYTEST_SECONDS": "1"}
    log, calls = _lanes(tmp_path, "rungs9 rungs11", "proofs9 proofs11 tune11", extra_env=env)
    machine = tmp_path / "machine"
    kdac, fused = machine / "cuda-prefill-kdac.toml", machine / "cuda-prefill-moefused.toml"
    sdpa, split = machine / "cuda-prefill-sdpa.toml", machine / "cuda-prefill-kdasplit.toml"
    assert "unknown stage" not in log and f"the prefill registry now: {fused}" in log and "SKIP" not in log
    assert Path(f"{fused}.base").read_text().strip() == str(kdac)
    for proof in ("moefused", "sdpa", "kdasplit", "tuned"):
        assert log.count(f"gpu-tests-{proof} (limit") == 1, proof
    assert log.count("tune-prefill (limit") == 1 and "-k prefill or contract or exact" in log
    prefills = [c for c in calls if c.startswith("bench prefill")]
    assert len(prefills) == 3 and all("--chunk 32768 " in c for c in prefills)
    tuned, sdpa_pair, split_pair = prefills
    assert f"--registry {fused} " in tuned and "--vs" not in tuned and "tuned launch defaults" in tuned
    diag = machine / "suite-diag" / "diag-prefill-32k.json"
    diags = [c for c in calls if c.startswith("diagnose ")]
    assert len(diags) == 1 and "--prefill-chunk 32768 " in diags[0] and f"--registry {fused} " in diags[0]
    assert f"--registry {fused} --vs {sdpa}" in sdpa_pair and f"--prediction {diag} --expect attention=1.3" in sdpa_pair
    assert f"--registry {fused} --vs {split}" in split_pair and f"--prediction {diag} --expect kda=1.17" in split_pair
    steps = ["] swap-moe-fused (limit", "] prefill-tuned-32k (limit", "] diagnose-prefill-32k (limit",
             "] swap-sdpa (limit", "] prefill-sdpa-32k (limit", "] swap-kda-split (limit",
             "] prefill-kda-split-32k (limit"]
    at = [log.index(s) for s in steps]
    assert at == sorted(at), list(zip(steps, at))


def test_the_prefill_base_can_skip_the_48b_gate_of_choose_best_but_no_row_skips_its_own(tmp_path):
    """SUITE_PREFILL_BASE=bf16: no 48B gate of the bf16 registry before the rungs (the base is taken as bf16, said so
    in the log), and every timed prefill row still runs its bench's own 48B gate (the gate options, no --no-gate)."""
    env = {"SUITE_TIMED": S11_TIMED, "STUB_PYTEST_SECONDS": "1", "SUITE_PREFILL_BASE": "bf16"}
    log, calls = _lanes(tmp_path, "rungs9 rungs11", "proofs9 proofs11", extra_env=env)
    assert "gate48-bf16" not in log and "best registry: bf16 (SUITE_PREFILL_BASE" in log
    assert not [c for c in calls if c.startswith("check ") and "k48" in c]
    prefills = [c for c in calls if c.startswith("bench prefill")]
    assert len(prefills) == 3
    assert all("--gate-depths 1,64,4096 --gate-golden" in c and "--no-gate" not in c for c in prefills)


def test_rungs11b_times_the_split_kda_in_the_other_lane_once_its_base_exists(tmp_path):
    """GPU 1 (proofs9, proofs11, rungs11b) waits for the fused-MoE registry and the 32768 diagnosis that GPU 0's
    rungs11 makes, then times the split-KDA pair over that registry; the pair runs once (GPU 0 finds it done or waits
    for it), and GPU 0's own rungs all ran."""
    env = {"SUITE_TIMED": S11_TIMED, "STUB_PYTEST_SECONDS": "1", "SUITE_PREFILL_BASE": "bf16"}
    log, calls = _lanes(tmp_path, "rungs9 rungs11", "proofs9 proofs11 rungs11b", extra_env=env)
    machine = tmp_path / "machine"
    fused, split = machine / "cuda-prefill-moefused.toml", machine / "cuda-prefill-kdasplit.toml"
    assert "unknown stage" not in log and "did not appear in time" not in log
    pairs = [c for c in calls if c.startswith("bench prefill") and "--changes kda" in c]
    assert len(pairs) == 1 and f"--registry {fused} --vs {split}" in pairs[0]
    assert log.count("] prefill-kda-split-32k (limit") == 1
    assert "] prefill-tuned-32k (limit" in log and "] prefill-sdpa-32k (limit" in log


def test_a_misspelt_prefill_base_stops_the_suite_before_any_work():
    """SUITE_PREFILL_BASE has one value; a typo would otherwise run the 48B gate it meant to skip, unnoticed."""
    env = {**os.environ, "SUITE_PREFILL_BASE": "bf17"}
    proc = subprocess.run(["bash", "bench/gpu_suite.sh", "install"], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2 and "the only value is bf16" in proc.stderr


S12_TIMED = f"{S11_TIMED} prefill-kda-split-32k prefill-sdpa-32k prefill-both-32k"


def test_rungs12_rebuilds_both_wins_then_times_the_tf32_prepare_over_them(tmp_path):
    """Session 12's second call, fresh: rungs9 then rungs12 on GPU 0 beside proofs12 on GPU 1. rungs12 rebuilds the
    prefill registry by swaps (the fused MoE, then the split KDA over it, then SDPA over that: each over the one before,
    no row timed again), diagnoses its 32768 forward, and times kda=triton_chunked_split_tf32 over it as a pair at
    32768, predicted from that diagnosis, after the tf32 GPU tests (run once, in either lane)."""
    env = {"SUITE_TIMED": S12_TIMED, "STUB_PYTEST_SECONDS": "1", "SUITE_PREFILL_BASE": "bf16"}
    log, calls = _lanes(tmp_path, "rungs9 rungs12", "proofs12", extra_env=env)
    machine = tmp_path / "machine"
    fused, split = machine / "cuda-prefill-moefused.toml", machine / "cuda-prefill-kdasplit.toml"
    both, tf32 = machine / "cuda-prefill-both.toml", machine / "cuda-prefill-kdatf32.toml"
    assert "unknown stage" not in log and "SKIP" not in log and f"the prefill registry now: {both}" in log
    for reg, base in ((split, fused), (both, split), (tf32, both)):
        assert Path(f"{reg}.base").read_text().strip() == str(base), reg
    swaps = [c for c in calls if c.startswith("swap ")]
    assert any("kda=triton_chunked_split_tf32" in c for c in swaps)
    assert log.count("gpu-tests-kdatf32 (limit") == 1 and "-k split or contract or one_by_one" in log
    assert log.count("tune-kda-tf32 (limit") == 1
    prefills = [c for c in calls if c.startswith("bench prefill")]
    assert len(prefills) == 1, prefills  # the rebuilt rungs are not timed again
    diag = machine / "suite-diag" / "diag-prefill-now-32k.json"
    assert f"--registry {both} --vs {tf32}" in prefills[0] and "--chunk 32768 " in prefills[0]
    assert f"--prediction {diag} --expect kda=1.18" in prefills[0] and "--changes kda" in prefills[0]
    steps = ["] swap-kda-split-32k (limit", "] swap-both-32k (limit", "] diagnose-prefill-now-32k (limit",
             "] swap-kda-tf32 (limit", "] prefill-kda-tf32-32k (limit"]
    at = [log.index(s) for s in steps]
    assert at == sorted(at), list(zip(steps, at))


def test_rungs12_without_the_split_row_keeps_sdpa_out_of_the_base(tmp_path):
    """The combined registry was timed as SDPA over the split KDA: when the split row is not named as timed, neither
    registry is rebuilt (SDPA over another base would be a registry no row measured), and the tf32 rung is timed over
    the fused-MoE registry."""
    env = {"SUITE_TIMED": f"{S11_TIMED} prefill-both-32k", "STUB_PYTEST_SECONDS": "0", "SUITE_PREFILL_BASE": "bf16"}
    log, calls = _lanes(tmp_path, "rungs9 rungs12", "proofs12", extra_env=env)
    machine = tmp_path / "machine"
    fused = machine / "cuda-prefill-moefused.toml"
    assert f"the prefill registry now: {fused}" in log and "cuda-prefill-both.toml" not in log
    assert "swap-both-32k (limit" not in log and "swap-kda-split-32k (limit" not in log
    prefills = [c for c in calls if c.startswith("bench prefill")]
    assert len(prefills) == 1 and f"--registry {fused} --vs" in prefills[0]


S13_TIMED = f"{S12_TIMED} prefill-kda-tf32-32k"


def test_rungs13_rebuilds_the_chain_through_tf32_then_times_the_bf16_scratch(tmp_path):
    """Session 13's plan, fresh: rungs13 rebuilds the chain of timed prefill rungs (split KDA, SDPA, the tf32 prepare),
    each over the one before, diagnoses that registry at 32768 and times the bf16-scratch variant over it, predicted
    from that diagnosis; the chain stops before the stage's own rung."""
    env = {"SUITE_TIMED": S13_TIMED, "STUB_PYTEST_SECONDS": "1", "SUITE_PREFILL_BASE": "bf16"}
    log, calls = _lanes(tmp_path, "rungs9 rungs13", "proofs13", extra_env=env)
    machine = tmp_path / "machine"
    fused, split = machine / "cuda-prefill-moefused.toml", machine / "cuda-prefill-kdasplit.toml"
    both, tf32 = machine / "cuda-prefill-both.toml", machine / "cuda-prefill-kdatf32.toml"
    bf16s = machine / "cuda-prefill-kdabf16s.toml"
    assert "unknown stage" not in log and "SKIP" not in log and f"the prefill registry now: {tf32}" in log
    for reg, base in ((split, fused), (both, split), (tf32, both), (bf16s, tf32)):
        assert Path(f"{reg}.base").read_text().strip() == str(base), reg
    assert "swap-kda-bf16scratch-32k (limit" not in log  # its own rung is a swap of the stage, not a rebuild
    # rungs timed in earlier sessions are rebuilt by their swaps alone (which check the kernels): no GPU tests first
    assert "gpu-tests-dqmm (limit" not in log and "gpu-tests-moefused (limit" not in log
    assert "gpu-tests-dqmm: not run first, the rung was timed in an earlier session" in log
    assert log.count("gpu-tests-kdabf16s (limit") == 1
    prefills = [c for c in calls if c.startswith("bench prefill")]
    assert len(prefills) == 1, prefills
    diag = machine / "suite-diag" / "diag-prefill-tf32-32k.json"
    assert f"--registry {tf32} --vs {bf16s}" in prefills[0] and "--changes kda" in prefills[0]
    assert f"--prediction {diag} --expect kda=1.17" in prefills[0]
    steps = ["] swap-kda-split-32k (limit", "] swap-both-32k (limit", "] swap-kda-tf32-32k (limit",
             "] diagnose-prefill-tf32-32k (limit", "] swap-kda-bf16scratch (limit",
             "] prefill-kda-bf16scratch-32k (limit"]
    at = [log.index(s) for s in steps]
    assert at == sorted(at), list(zip(steps, at))


def test_rungs13d_rebuilds_the_decode_step_then_times_the_row_warp_gemv_over_it(tmp_path):
    """Session 13's decode rung, fresh: rungs13d makes session 9's decode step again by swaps (no decode row timed
    again), diagnoses it at d=0, and after the row-warp GPU tests (run once, in either lane) times
    linear@Q4_K=cupy_rowwarp over the lm_head registry (the newest decode win; fuse_low_rank was a none) at 0 and
    32768, predicted from that diagnosis, naming its one per-type change."""
    env = {"SUITE_TIMED": S9_TIMED, "STUB_PYTEST_SECONDS": "1"}
    log, calls = _lanes(tmp_path, "rungs13d", "proofs13d", extra_env=env)
    machine = tmp_path / "machine"
    head, rw = machine / "cuda-step8-q6k-cupy-float.toml", machine / "cuda-s13-rowwarp.toml"
    assert "unknown stage" not in log and "SKIP" not in log
    swaps = [c for c in calls if c.startswith("swap ")]
    for pair in ("linear=triton_lastblock", "moe_experts=triton_prefetch", "moe_router=triton_prefetch",
                 "attention=cupy_splitk_bf16", "linear@Q6_K=cupy_float", "linear@Q4_K=cupy_rowwarp"):
        assert any(c.startswith(f"swap {pair} ") for c in swaps), pair
    assert Path(f"{rw}.base").read_text().strip() == str(head)
    assert log.count("gpu-tests-rowwarp (limit") == 1 and "-k rowwarp" in log
    decodes = [c for c in calls if c.startswith("bench decode")]
    assert len(decodes) == 1, decodes  # the rebuilt rungs are not timed again
    diag = machine / "suite-diag" / "diag-decode-rw-2d.json"
    assert f"--registry {head} --vs {rw}" in decodes[0] and "--depth 0,32768 " in decodes[0]
    assert f"--prediction {diag} --expect linear=1.25" in decodes[0] and "--changes linear@Q4_K" in decodes[0]
    diag_call = next(c for c in calls if c.startswith("diagnose "))
    assert "--depth 0,32768 " in diag_call  # every depth the pair times (bench refuses a prediction without one)
    steps = ["] swap-lmhead-cupy-float (limit", "] diagnose-decode-rw-2d (limit", "] swap-linear-rowwarp (limit",
             "] gate-captured-rowwarp (limit", "] decode-linear-rowwarp (limit"]
    at = [log.index(s) for s in steps]
    assert at == sorted(at), list(zip(steps, at))
    assert log.index("gpu-tests-rowwarp rc=0") < log.index("] swap-linear-rowwarp (limit")


def test_rungs13d_leaves_the_row_warp_rung_out_when_its_gpu_tests_failed(tmp_path):
    machine = tmp_path / "machine"
    (machine / "suite-done").mkdir(parents=True)
    (machine / "suite-done" / "gpu-tests-rowwarp").write_text("1\n")
    log, calls = _lanes(tmp_path, "rungs13d", "tests", gpus=1, extra_env={"SUITE_TIMED": S9_TIMED})
    assert not any("cupy_rowwarp" in c or "cuda-s13-rowwarp.toml" in c for c in calls)
    assert any(c.startswith("diagnose ") for c in calls)  # the base's diagnosis is still taken


S13D_TIMED = S9_TIMED + " decode-linear-rowwarp"


def _records(tmp_path, **sums) -> str:
    """STUB_PEROP for the named per-op records: NAME={impl: seconds a token} -> perop-NAME-bfloat16.json."""
    out = []
    for name, per_token in sums.items():
        f = tmp_path / f"{name}.json"
        f.write_text(json.dumps({"per_token_seconds": per_token}))
        out.append(f"{f}:perop-{name}-bfloat16.json")
    return " ".join(out)


def test_rungs14d_rebuilds_the_row_warp_step_then_times_its_defaults_and_the_moe_rung(tmp_path):
    """The decode plan after session 13, fresh, with no per-op records (no GPU test wrote one): the step rebuilt through
    the row-warp rung by swaps (no decode row timed again), the step now as one arm against the frontier
    (cupy_rowwarp's defaults changed after its row); the rungs predicted from records are left out, saying so; the
    experts' row-warp rung, predicted by call 8's figure, runs after its GPU tests."""
    env = {"SUITE_TIMED": S13D_TIMED, "STUB_PYTEST_SECONDS": "1"}
    log, calls = _lanes(tmp_path, "rungs14d", "proofs13d", extra_env=env)
    machine = tmp_path / "machine"
    head, rw = machine / "cuda-step8-q6k-cupy-float.toml", machine / "cuda-s13-rowwarp.toml"
    moe = machine / "cuda-s14-moe-rowwarp.toml"
    assert "unknown stage" not in log and "SKIP" not in log
    assert Path(f"{rw}.base").read_text().strip() == str(head)
    assert Path(f"{moe}.base").read_text().strip() == str(rw)
    for name in ("linear-mma", "moe-mma", "linear-floatrow"):
        assert f"decode-{name}: left out" in log, name
    assert log.count("gpu-tests-rowwarp (limit") == 1
    decodes = [c for c in calls if c.startswith("bench decode")]
    assert len(decodes) == 2, decodes  # session 13's rung is rebuilt, not timed again
    assert f"--registry {rw} --graph A " in decodes[0] and "--vs" not in decodes[0]
    assert "one arm, against the frontier" in decodes[0]
    diag = machine / "suite-diag" / "diag-decode-moe-rowwarp.json"
    assert f"--registry {rw} --vs {moe}" in decodes[1] and "--changes moe_experts " in decodes[1]
    assert f"--prediction {diag} --expect moe_experts=1.02" in decodes[1]
    steps = ["] swap-linear-rowwarp (limit", "] decode-rowwarp-copy (limit", "] diagnose-decode-moe-rowwarp (limit",
             "] swap-moe-rowwarp (limit", "] decode-moe-rowwarp (limit"]
    at = [log.index(s) for s in steps]
    assert at == sorted(at), list(zip(steps, at))


def test_rungs14d_times_the_tensor_cores_first_with_the_factors_their_proofs_recorded(tmp_path):
    """With every record: linear@Q4_K=cupy_mma over the row-warp step (cupy_rowwarp's time a token over cupy_mma's:
    2.0), then moe_experts=cupy_mma over that (against triton_prefetch: 2.0), then linear@F16=cupy_floatrow (1.5);
    each over the one before (stand-in wins), after a diagnosis of its base. The experts' row-warp rung is left out:
    their tensor-core rung won."""
    records = _records(tmp_path, mma={"cupy_rowwarp": 700e-6, "cupy_mma": 350e-6},
                       moe={"triton_prefetch": 900e-6, "cupy_rowwarp copy/warp": 880e-6, "cupy_mma": 450e-6},
                       floatrow={"triton_lastblock": 3e-6, "cupy_floatrow": 2e-6})
    env = {"SUITE_TIMED": S13D_TIMED, "STUB_PYTEST_SECONDS": "1", "STUB_PEROP": records}
    log, calls = _lanes(tmp_path, "rungs14d", "proofs14d", extra_env=env)  # the proofs beside, each run once
    machine = tmp_path / "machine"
    rw, mma = machine / "cuda-s13-rowwarp.toml", machine / "cuda-s14-mma.toml"
    moemma, fr = machine / "cuda-s14-moe-mma.toml", machine / "cuda-s14-floatrow.toml"
    assert "decode-moe-rowwarp: left out (the experts' tensor-core rung won)" in log
    decodes = [c for c in calls if c.startswith("bench decode")]
    assert len(decodes) == 4, decodes
    diag = machine / "suite-diag"
    for i, (base, reg, changes, expect, name) in enumerate((
            (rw, mma, "linear@Q4_K", "linear@Q4_K=2.000", "linear-mma"),
            (mma, moemma, "moe_experts", "moe_experts=2.000", "moe-mma"),
            (moemma, fr, "linear@F16", "linear@F16=1.500", "linear-floatrow")), start=1):
        assert f"--registry {base} --vs {reg}" in decodes[i] and f"--changes {changes} " in decodes[i], name
        assert f"--prediction {diag / f'diag-decode-{name}.json'} --expect {expect}" in decodes[i], name
    assert log.index("gpu-tests-mma rc=0") < log.index("] swap-linear-mma (limit")
    assert log.index("gpu-tests-floatrow rc=0") < log.index("] swap-linear-floatrow (limit")
    for proof in ("mma", "floatrow"):
        assert log.count(f"gpu-tests-{proof} (limit") == 1, proof


def test_rungs15d_times_the_staged_row_warp_forms_each_as_its_own_implementation(tmp_path):
    """Session 15's plan, fresh: the step rebuilt through the row-warp rung (not timed again), the row-warp proofs once
    (the lane beside runs them), then linear@Q4_K=cupy_rowwarp_staged over the row-warp step (cupy_rowwarp's time a
    token over the staged form's: 1.25), then moe_experts=cupy_rowwarp_staged over that (a stand-in win), against
    triton_prefetch (1.5): one interleaved pair each, since each form is an implementation of its own."""
    records = _records(tmp_path, rowwarp={"cupy_rowwarp": 500e-6, "staged form": 400e-6},
                       moe={"triton_prefetch": 900e-6, "cupy_rowwarp staged/warp": 600e-6})
    env = {"SUITE_TIMED": S13D_TIMED, "STUB_PYTEST_SECONDS": "1", "STUB_PEROP": records}
    log, calls = _lanes(tmp_path, "rungs15d", "proofs13d", extra_env=env)
    machine = tmp_path / "machine"
    rw, stg = machine / "cuda-s13-rowwarp.toml", machine / "cuda-s15-rowwarp-staged.toml"
    moe = machine / "cuda-s15-moe-rowwarp-staged.toml"
    assert "unknown stage" not in log and "SKIP" not in log
    assert log.count("gpu-tests-rowwarp (limit") == 1
    assert Path(f"{stg}.base").read_text().strip() == str(rw)
    assert Path(f"{moe}.base").read_text().strip() == str(stg)
    decodes = [c for c in calls if c.startswith("bench decode")]
    assert len(decodes) == 2, decodes
    assert f"--registry {rw} --vs {stg}" in decodes[0] and "--changes linear@Q4_K " in decodes[0]
    assert "--expect linear@Q4_K=1.25" in decodes[0]
    assert f"--registry {stg} --vs {moe}" in decodes[1] and "--changes moe_experts " in decodes[1]
    assert "--expect moe_experts=1.5" in decodes[1]
    swaps = [c for c in calls if "cupy_rowwarp_staged" in c and c.startswith("swap")]
    assert any("linear@Q4_K=cupy_rowwarp_staged" in c for c in swaps), swaps
    assert any("moe_experts=cupy_rowwarp_staged" in c for c in swaps), swaps


def test_rungs15r_times_the_one_launch_router_over_the_row_warp_step(tmp_path):
    """Session 15's router rung, fresh: the step rebuilt through the row-warp rung (not timed again), the router's
    proof once (in the lane beside too), then moe_router=cupy_rowwarp over the row-warp step, predicted from the
    proof's record: triton_prefetch's time a token over cupy_rowwarp's (190 / 95 us: 2.0)."""
    records = _records(tmp_path, router={"triton_prefetch": 190e-6, "cupy_rowwarp": 95e-6})
    env = {"SUITE_TIMED": S13D_TIMED, "STUB_PYTEST_SECONDS": "1", "STUB_PEROP": records}
    log, calls = _lanes(tmp_path, "rungs15r", "proofs15r", extra_env=env)
    machine = tmp_path / "machine"
    rw, reg = machine / "cuda-s13-rowwarp.toml", machine / "cuda-s15-router-rowwarp.toml"
    assert "unknown stage" not in log and "SKIP" not in log
    assert log.count("gpu-tests-router (limit") == 1
    assert log.index("gpu-tests-router rc=0") < log.index("] swap-router-rowwarp (limit")
    assert Path(f"{reg}.base").read_text().strip() == str(rw)
    decodes = [c for c in calls if c.startswith("bench decode")]
    assert len(decodes) == 1, decodes
    assert f"--registry {rw} --vs {reg}" in decodes[0] and "--changes moe_router " in decodes[0]
    assert "--expect moe_router=2.000" in decodes[0]
    assert any(c.startswith("swap") and "moe_router=cupy_rowwarp" in c for c in calls)


def test_rungs16d_times_the_half2_copy_form_over_the_row_warp_step(tmp_path):
    """The plan for session 16, fresh: the step rebuilt through the row-warp rung, the half forms' proof once (in the
    lane beside too), then linear@Q4_K=cupy_rowhalf over the row-warp step, predicted from the row-warp side-by-side's
    record (cupy_rowwarp's time a token over cupy_rowhalf's, 500 / 400 us: 1.25), then moe_experts=cupy_rowhalf over
    that (the stub times every pair as a win), predicted from the MoE side-by-side's (900 / 600: 1.5)."""
    records = _records(tmp_path, rowwarp={"cupy_rowwarp": 500e-6, "cupy_rowhalf": 400e-6},
                       moe={"triton_prefetch": 900e-6, "cupy_rowhalf": 600e-6})
    env = {"SUITE_TIMED": S13D_TIMED, "STUB_PYTEST_SECONDS": "1", "STUB_PEROP": records}
    log, calls = _lanes(tmp_path, "rungs16d", "proofs16d", extra_env=env)
    machine = tmp_path / "machine"
    rw, reg = machine / "cuda-s13-rowwarp.toml", machine / "cuda-s16-rowhalf.toml"
    moe = machine / "cuda-s16-moe-rowhalf.toml"
    assert "unknown stage" not in log and "SKIP" not in log
    assert log.count("gpu-tests-rowhalf (limit") == 1
    assert log.index("gpu-tests-rowhalf rc=0") < log.index("] swap-linear-rowhalf (limit")
    assert Path(f"{reg}.base").read_text().strip() == str(rw)
    assert Path(f"{moe}.base").read_text().strip() == str(reg)  # over the linear rung (a stand-in win here)
    decodes = [c for c in calls if c.startswith("bench decode")]
    assert len(decodes) == 2, decodes
    assert f"--registry {rw} --vs {reg}" in decodes[0] and "--changes linear@Q4_K " in decodes[0]
    assert "--expect linear@Q4_K=1.250" in decodes[0]
    assert f"--registry {reg} --vs {moe}" in decodes[1] and "--changes moe_experts " in decodes[1]
    assert "--expect moe_experts=1.500" in decodes[1]


def _pdl_probe_saved(tmp_path: Path) -> Path:
    """The machine's /tmp with the PDL probe's JSON already there (2 us saved a pair after add_rmsnorm, 1.5 after
    gated_rmsnorm), as an earlier call on the machine would have left it."""
    machine = tmp_path / "machine"
    (machine / "suite-diag").mkdir(parents=True)
    (machine / "suite-diag" / "probe-pdl-chain.json").write_text(json.dumps({"norm_pair": {"saving_us": 2.0},
                                                                            "gnorm_pair": {"saving_us": 1.5}}))
    return machine


def test_rungs17d_times_copy2_and_the_pdl_pair_each_over_the_row_warp_step(tmp_path):
    """The plan for session 17: the step rebuilt through the row-warp rung, copy2's proof, then
    linear@Q4_K=cupy_rowwarp_copy2 over the row-warp step, predicted from the row-warp side-by-side's record
    (cupy_rowwarp's time a token over copy2's, 500 / 450 us: 1.111); then the PDL proof and the norm-and-projection
    pairs (add_rmsnorm and gated_rmsnorm = triton_pdl with linear@Q4_K=cupy_rowwarp_pdl, one row naming the three
    ops) over the row-warp step too, though copy2 won (the stub times every pair as a win): both change the tall
    projections' form. Its forecast is the probe's savings a pair (2 us after add_rmsnorm, 27 a token; 1.5 us after
    gated_rmsnorm, 20 a token) off cupy_rowwarp's 500 us: 500 / 416 = 1.202."""
    records = _records(tmp_path, rowwarp={"cupy_rowwarp": 500e-6, "cupy_rowwarp_copy2": 450e-6},
                       moe={"triton_prefetch": 900e-6, "cupy_rowwarp_pdl": 800e-6})
    machine = _pdl_probe_saved(tmp_path)
    env = {"SUITE_TIMED": S13D_TIMED, "STUB_PYTEST_SECONDS": "1", "STUB_PEROP": records}
    log, calls = _lanes(tmp_path, "rungs17d", "probe_pdl", extra_env=env)
    rw, copy2 = machine / "cuda-s13-rowwarp.toml", machine / "cuda-s17-rowwarp-copy2.toml"
    pdl, moe = machine / "cuda-s17-norm-rowwarp-pdl.toml", machine / "cuda-s17-moe-rowwarp-pdl.toml"
    assert "unknown stage" not in log and "SKIP" not in log
    assert log.count("gpu-tests-copy2 (limit") == 1 and log.count("gpu-tests-pdl (limit") == 1
    assert log.index("gpu-tests-copy2 rc=0") < log.index("] swap-linear-rowwarp-copy2 (limit")
    assert Path(f"{copy2}.base").read_text().strip() == str(rw)
    assert Path(f"{pdl}.base").read_text().strip() == str(rw)
    decodes = [c for c in calls if c.startswith("bench decode")]
    assert len(decodes) == 3, decodes
    assert Path(f"{moe}.base").read_text().strip() == str(rw)
    assert f"--registry {rw} --vs {moe}" in decodes[2] and "--expect moe_experts=1.125" in decodes[2]
    assert f"--registry {rw} --vs {copy2}" in decodes[0] and "--expect linear@Q4_K=1.111" in decodes[0]
    assert f"--registry {rw} --vs {pdl}" in decodes[1] and "--expect linear@Q4_K=1.202" in decodes[1]
    assert "--changes add_rmsnorm,gated_rmsnorm,linear@Q4_K " in decodes[1]
    swap = next(c for c in calls if c.startswith("swap") and "cupy_rowwarp_pdl" in c)
    assert all(p in swap for p in ("add_rmsnorm=triton_pdl", "gated_rmsnorm=triton_pdl",
                                   "linear@Q4_K=cupy_rowwarp_pdl"))


def test_rungs17d_leaves_the_pdl_pair_out_without_the_probe_s_saving(tmp_path):
    """No probe JSON (its run wrote nothing): no forecast, so no pair; the stage says so."""
    records = _records(tmp_path, rowwarp={"cupy_rowwarp": 500e-6, "cupy_rowwarp_copy2": 450e-6})
    env = {"SUITE_TIMED": S13D_TIMED, "STUB_PYTEST_SECONDS": "0", "STUB_PEROP": records}
    log, calls = _lanes(tmp_path, "rungs17d", "", extra_env=env)
    assert "decode-norm-rowwarp-pdl: left out" in log and "] probe-pdl-chain (limit" in log
    assert not any("linear@Q4_K=cupy_rowwarp_pdl" in c for c in calls)


def test_probe_mma_times_the_pipe_form_s_warps_beside_the_tile_form(tmp_path):
    log, _ = _suite(tmp_path, "probe_mma")
    line = next(x for x in log.splitlines() if "probe-mma-pipe-warps (limit" in x)
    assert "python3 bench/probes/mma_pipe_warps.py --out " in line and "probe-mma-pipe-warps.json" in line


def test_rungs14d_leaves_the_float_row_rung_out_without_a_record(tmp_path):
    """No per-op record (the tests wrote none): no factor, so no pair - the stage says so instead of guessing."""
    env = {"SUITE_TIMED": S13D_TIMED, "STUB_PYTEST_SECONDS": "0"}
    log, calls = _lanes(tmp_path, "rungs14d", "proofs13d", extra_env=env)
    assert "decode-linear-floatrow: left out" in log
    assert not any("cupy_floatrow" in c or "cuda-s14-floatrow.toml" in c for c in calls)


def test_a_failed_step_runs_again_when_the_code_changed_and_only_then(tmp_path):
    """Session 12: a kernel's test failed, the kernel was fixed, and the next warm call skipped the test as "done
    earlier (rc=1)". A failed step is now run again under other code (SUITE_CODE_ID), skipped under the same code,
    and a passed step stays done whatever the code."""
    def call(code: str, rc: str) -> str:
        return _suite(tmp_path, "probe_l2", extra_env={"SUITE_CODE_ID": code, "STUB_PYTEST_RC": rc})[0]

    first = call("a", "1")
    assert "gpu-tests-l2prefetch rc=1" in first and "probe-l2-prefetch (limit" not in first
    same = call("a", "0")
    assert "gpu-tests-l2prefetch: done earlier on this machine (rc=1), skipped" in same
    assert "probe-l2-prefetch (limit" not in same
    fixed = call("b", "0")
    assert "failed earlier on this machine (rc=1) under other code; run again" in fixed
    assert "gpu-tests-l2prefetch rc=0" in fixed and "probe-l2-prefetch (limit" in fixed
    later = call("c", "0")
    assert "gpu-tests-l2prefetch: done earlier on this machine (rc=0), skipped" in later


def test_probe_l2_runs_the_prefetch_tests_then_the_probe(tmp_path):
    """The decode lead's stage: the prefetch kernel's GPU tests first, then the probe, whose JSON lands with the
    results; no model, no prerequisites (a short call on one GPU)."""
    log, calls = _suite(tmp_path, "probe_l2")
    assert "unknown stage" not in log and "synth48" not in log
    at = [log.index(s) for s in ("] gpu-tests-l2prefetch (limit", "] probe-l2-prefetch (limit")]
    assert at == sorted(at) and "bench/probes/l2_prefetch.py --out" in log
    assert not [c for c in calls if c.startswith(("bench ", "synth ", "swap "))]


def test_probe_pdl_runs_its_gpu_tests_then_the_chain_probe_and_no_model(tmp_path):
    log, calls = _suite(tmp_path, "probe_pdl")
    at = [log.index(s) for s in ("] gpu-tests-pdl (limit", "] probe-pdl-chain (limit")]
    assert at == sorted(at)
    assert "tests/backends/test_cupy_pdl.py" in log and "bench/probes/pdl_chain.py --out" in log
    assert "unknown stage" not in log and "synth48" not in log and not calls


def test_probe_copy2_runs_its_bitwise_tests_and_the_side_by_side_with_a_record(tmp_path):
    log, calls = _suite(tmp_path, "probe_copy2")
    assert "] gpu-tests-copy2 (limit" in log and "SPARKOPS_PEROP_DIR=" in log
    assert '-k copy2 or rowwarp_gemv_side_by_side' in log and "tests/backends/test_cupy_timing.py" in log
    assert "unknown stage" not in log and "synth48" not in log and not calls


def test_probe_ncu_source_reads_the_copy_forms_sass_page_or_says_there_is_no_ncu(tmp_path):
    log, calls = _ncu_stage(tmp_path, "probe_ncu_source", "probe-ncu-source")
    assert "] probe-ncu-source (limit" in log and "unknown stage" not in log
    [ncu] = [c for c in calls if c.startswith("ncu ")]
    assert "--page source --print-source sass --csv" in ncu and "--launch-skip 1 --launch-count 1" in ncu
    assert "regex:linear_q4_k_rowcp_bf16" in ncu and "rowwarp_kernels.py --shapes 12288x2304" in ncu


def test_probe_ncu_iq1s_profiles_each_iq1s_form_alone_on_its_kernel_or_says_there_is_no_ncu(tmp_path):
    log, calls = _ncu_stage(tmp_path, "probe_ncu_iq1s", "probe-ncu-iq1s")
    ncu = [c for c in calls if c.startswith("ncu ")]
    assert len(ncu) == 4 and all("--replays 3" in c for c in ncu), ncu
    # staged_pair launches the flat pair's gate/up kernel first: each of the flat pair's kernels its own first launch
    assert "regex:moe_iq1_s_gateupq8hpairsgpdl_bf16$" in ncu[0] and "--launch-count 1 " in ncu[0]
    assert "regex:moe_iq1_s_downq8hflatpdl_bf16$" in ncu[1] and "--launch-count 1 " in ncu[1]
    assert "regex:moe_iq1_s_t2(gateup|down)q8hpdl_bf16$" in ncu[2] and "--launch-count 2 " in ncu[2]
    assert all("--only experts" in c for c in ncu[:3])
    assert "regex:linear_iq1_s_t2rowq8(pair)?pdl_bf16$" in ncu[3] and "--only kda_qkv" in ncu[3]
    assert "unknown stage" not in log and "synth48" not in log


def test_probe_ncu_source_moe_reads_the_down_and_the_pairs_gate_up_each_launched_alone(tmp_path):
    """Session 30's instrument: the Q8 hidden pair's down, the pairs gate/up and the down with its loads earlier, each
    profiled as the one matching launch after its warm-up (moe_kernels.py --only), the source page as CSV, a table read
    from each."""
    log, calls = _ncu_stage(tmp_path, "probe_ncu_source_moe", "probe-ncu-source-moe")
    assert "unknown stage" not in log
    ncu = [c for c in calls if c.startswith("ncu ")]
    assert len(ncu) == 3, ncu
    assert all("--page source --print-source sass --csv" in c and "--launch-skip 1 --launch-count 1" in c for c in ncu)
    assert "regex:moe_q4_k_downq8pdl$" in ncu[0] and "--only cupy_rowwarp_pdl_q8_hidden" in ncu[0], ncu[0]
    assert "regex:moe_q4_k_gateupq8hwxpdl_bf16$" in ncu[1] and "cupy_rowwarp_pdl_q8_pairs padded x" in ncu[1], ncu[1]
    assert "regex:moe_q4_k_downq8aheadpdl$" in ncu[2] and "cupy_rowwarp_pdl_q8_hidden_ld ahead" in ncu[2], ncu[2]
    assert "] probe-ncu-source-moe-downq8pdl (limit" in log and "] probe-ncu-source-moe-gateupq8hwxpdl_bf16" in log


def test_probe_ncu_source_router_reads_the_pdl_routers_measured_bf16_launch(tmp_path):
    """Session 30's instrument for the router: the PDL router's fourth launch in router_kernels.py (warm-up float32 and
    bf16, measured float32, then measured bf16) profiled alone, its source page as CSV and read into a table."""
    _stubs_with_ncu(tmp_path)
    log, calls = _suite(tmp_path, "probe_ncu_source_router")
    assert "] probe-ncu-source-router (limit" in log and "unknown stage" not in log
    [ncu] = [c for c in calls if c.startswith("ncu ")]
    assert "regex:moe_router_rowwarp_pdl$" in ncu and "--launch-skip 3 --launch-count 1" in ncu, ncu
    assert "--page source --print-source sass --csv" in ncu and "bench/probes/router_kernels.py" in ncu


def test_probe_fold_runs_the_fold_anatomy_into_the_call_s_results(tmp_path):
    """Session 38's fold probe: bench/probes/fold_anatomy.py once, its JSON among the call's results."""
    log, calls = _suite(tmp_path, "probe_fold")
    assert "] probe-fold-anatomy (limit" in log and "unknown stage" not in log
    assert "bench/probes/fold_anatomy.py --out" in log and "probe-fold-anatomy.json" in log


def test_probe_router_anatomy_runs_the_stage_probe_into_the_call_s_results(tmp_path):
    """Session 31's router probe: bench/probes/router_anatomy.py once, its JSON among the call's results."""
    log, calls = _suite(tmp_path, "probe_router_anatomy")
    assert "] probe-router-anatomy (limit" in log and "unknown stage" not in log
    assert "bench/probes/router_anatomy.py --out" in log and "probe-router-anatomy.json" in log
    assert not any(c.startswith("synth ") for c in calls)  # a probe of random weights: no model is made


def test_probe_gateup_runs_the_anatomy_into_the_call_s_results(tmp_path):
    """Session 43's gate/up probe: bench/probes/gateup_anatomy.py once, its JSON among the call's results, no model."""
    log, calls = _suite(tmp_path, "probe_gateup")
    assert "] probe-gateup-anatomy (limit" in log and "unknown stage" not in log
    assert "bench/probes/gateup_anatomy.py --out" in log and "probe-gateup-anatomy.json" in log
    assert not any(c.startswith("synth ") for c in calls)


def test_probe_l2_hot_runs_the_stage_probe_into_the_call_s_results(tmp_path):
    """Session 34's probe: bench/probes/l2_hot.py once, its JSON among the call's results, no model made."""
    log, calls = _suite(tmp_path, "probe_l2_hot")
    assert "] probe-l2-hot (limit" in log and "unknown stage" not in log
    assert "bench/probes/l2_hot.py --out" in log and "probe-l2-hot.json" in log
    assert not any(c.startswith("synth ") for c in calls)


def test_probe_ncu_source_profiles_another_form_s_kernel_by_name(tmp_path):
    _stubs_with_ncu(tmp_path)
    log, calls = _suite(tmp_path, "probe_ncu_source", extra_env={"NCU_SOURCE_KERNEL": "rowcp2x"})
    assert "] probe-ncu-source-rowcp2x (limit" in log
    [ncu] = [c for c in calls if c.startswith("ncu ")]
    assert "regex:linear_q4_k_rowcp2x_bf16" in ncu


def test_rungs17e_times_copy2x_over_the_row_warp_step_after_its_proof(tmp_path):
    """Session 17's second rung: the step rebuilt through the row-warp rung, copy2x's proof (its bit tests and the
    side-by-side with its column), then linear@Q4_K=cupy_rowwarp_copy2x over the row-warp step, predicted from the
    record (cupy_rowwarp's time a token over copy2x's, 500 / 400 us: 1.250)."""
    records = _records(tmp_path, rowwarp={"cupy_rowwarp": 500e-6, "cupy_rowwarp_copy2x": 400e-6})
    env = {"SUITE_TIMED": S13D_TIMED, "STUB_PYTEST_SECONDS": "1", "STUB_PEROP": records}
    log, calls = _lanes(tmp_path, "rungs17e", "probe_copy2x", extra_env=env)
    machine = tmp_path / "machine"
    rw, copy2x = machine / "cuda-s13-rowwarp.toml", machine / "cuda-s17-rowwarp-copy2x.toml"
    assert "unknown stage" not in log and "SKIP" not in log
    assert log.count("gpu-tests-copy2x (limit") == 1 and "-k copy2 or copyx or rowwarp_gemv_side_by_side" in log
    assert log.index("gpu-tests-copy2x rc=0") < log.index("] swap-linear-rowwarp-copy2x (limit")
    assert Path(f"{copy2x}.base").read_text().strip() == str(rw)
    [decode] = [c for c in calls if c.startswith("bench decode")]
    assert f"--registry {rw} --vs {copy2x}" in decode and "--expect linear@Q4_K=1.250" in decode
    swap = next(c for c in calls if c.startswith("swap") and "cupy_rowwarp_copy2x" in c)
    assert "linear@Q4_K=cupy_rowwarp_copy2x" in swap


def test_rungs17e_leaves_the_rung_out_when_copy2x_s_tests_fail(tmp_path):
    records = _records(tmp_path, rowwarp={"cupy_rowwarp": 500e-6, "cupy_rowwarp_copy2x": 400e-6})
    env = {"SUITE_TIMED": S13D_TIMED, "STUB_PYTEST_SECONDS": "0", "STUB_PEROP": records,
           "STUB_FAIL_MATCH": "gpu-tests-copy2x.xml"}
    log, calls = _lanes(tmp_path, "rungs17e", "", extra_env=env)
    assert "decode-linear-rowwarp-copy2x: left out" in log
    assert not any("cupy_rowwarp_copy2x" in c for c in calls)


def test_rungs18d_times_both_pdl_rungs_again_under_their_own_names_over_the_row_warp_step(tmp_path):
    """Session 18's plan: the PDL kernels now read x through L1, so the two PDL rungs run again as rows of their own
    (norm-pdl-l1, moe-pdl-l1; registries of their own), each over the row-warp step, after the PDL proof and probe,
    forecast as rungs17d's were: 500 / 416 = 1.202 from the probe's savings, 900 / 800 = 1.125 from the MoE record."""
    records = _records(tmp_path, rowwarp={"cupy_rowwarp": 500e-6},
                       moe={"triton_prefetch": 900e-6, "cupy_rowwarp_pdl": 800e-6})
    machine = _pdl_probe_saved(tmp_path)
    env = {"SUITE_TIMED": S13D_TIMED, "STUB_PYTEST_SECONDS": "1", "STUB_PEROP": records}
    log, calls = _lanes(tmp_path, "rungs18d", "probe_pdl", extra_env=env)
    rw = machine / "cuda-s13-rowwarp.toml"
    pdl, moe = machine / "cuda-s18-norm-rowwarp-pdl-l1.toml", machine / "cuda-s18-moe-rowwarp-pdl-l1.toml"
    assert "unknown stage" not in log and "SKIP" not in log and log.count("gpu-tests-pdl (limit") == 1
    assert Path(f"{pdl}.base").read_text().strip() == str(rw) and Path(f"{moe}.base").read_text().strip() == str(rw)
    decodes = [c for c in calls if c.startswith("bench decode")]
    assert len(decodes) == 3, decodes
    assert f"--registry {rw} --vs {pdl}" in decodes[0] and "--expect linear@Q4_K=1.202" in decodes[0]
    assert "--changes add_rmsnorm,gated_rmsnorm,linear@Q4_K " in decodes[0]
    assert "x read through L1 after the wait (session 17's kernels read it from L2)" in decodes[0]
    assert f"--registry {rw} --vs {moe}" in decodes[1] and "--expect moe_experts=1.125" in decodes[1]
    both = machine / "cuda-s18-pdl-l1-both.toml"
    assert f"--registry {rw} --vs {both}" in decodes[2]
    assert "--expect linear@Q4_K=1.202,moe_experts=1.125" in decodes[2]
    assert "--changes add_rmsnorm,gated_rmsnorm,linear@Q4_K,moe_experts " in decodes[2]
    assert "cuda-s17-" not in " ".join(decodes)
    assert log.count("gpu-tests-rowwarp-side (limit") == 1 and "-k rowwarp_gemv_side_by_side" in log


def test_rungs18d_skips_the_side_by_side_when_its_record_is_already_there(tmp_path):
    """A record left by an earlier proof on this machine (a shard, copy2's proof) is the forecast's base already."""
    records = _records(tmp_path, rowwarp={"cupy_rowwarp": 500e-6},
                       moe={"triton_prefetch": 900e-6, "cupy_rowwarp_pdl": 800e-6})
    _pdl_probe_saved(tmp_path)
    env = {"SUITE_TIMED": S13D_TIMED, "STUB_PYTEST_SECONDS": "0", "STUB_PEROP": records}
    log, calls = _lanes(tmp_path, "probe_copy2 rungs18d", "", extra_env=env)
    assert "gpu-tests-rowwarp-side" not in log
    assert len([c for c in calls if c.startswith("bench decode")]) == 3


@pytest.mark.parametrize("stage", ["rungs17d", "rungs17e", "rungs18d", "rungs18e"])
def test_the_row_warp_rungs_stop_and_say_why_without_the_row_warp_step(tmp_path, stage):
    """SUITE_TIMED without session 13's row-warp rung: no base for these rungs, so the stage names what is missing and
    times nothing (no swap onto a step it did not build)."""
    env = {"SUITE_TIMED": S9_TIMED, "STUB_PYTEST_SECONDS": "0"}
    log, calls = _lanes(tmp_path, stage, "", extra_env=env)
    assert f"{stage}: no row-warp step" in log and "SUITE_TIMED must name decode-linear-rowwarp" in log
    assert not [c for c in calls if c.startswith("bench decode")]


def test_rungs18d_leaves_the_combined_rung_out_without_the_moe_record(tmp_path):
    """No MoE side-by-side record: the experts' rung and the combined rung have no forecast and are left out; the
    norm-PDL pair, forecast from the probe, still runs."""
    records = _records(tmp_path, rowwarp={"cupy_rowwarp": 500e-6})
    _pdl_probe_saved(tmp_path)
    env = {"SUITE_TIMED": S13D_TIMED, "STUB_PYTEST_SECONDS": "0", "STUB_PEROP": records}
    log, calls = _lanes(tmp_path, "rungs18d", "", extra_env=env)
    assert "decode-moe-pdl-l1: left out" in log and "decode-pdl-l1-both: left out" in log
    decodes = [c for c in calls if c.startswith("bench decode")]
    assert len(decodes) == 1 and "cuda-s18-norm-rowwarp-pdl-l1.toml" in decodes[0]


def test_rungs18e_times_the_active_attention_over_the_row_warp_step_after_its_proof(tmp_path):
    """The attention rung: its proof in the lane beside (run once: the rung's lane waits for it and takes its
    record), then the pair over the row-warp step, forecast 90 / 60 = 1.5 from the side-by-side at pos 63."""
    records = _records(tmp_path, attention={"cupy_splitk_bf16": 90e-6, "cupy_splitk_bf16_active": 60e-6})
    env = {"SUITE_TIMED": S13D_TIMED, "STUB_PYTEST_SECONDS": "1", "STUB_PEROP": records}
    log, calls = _lanes(tmp_path, "rungs18e", "probe_attn_active", extra_env=env)
    machine = tmp_path / "machine"
    rw, act = machine / "cuda-s13-rowwarp.toml", machine / "cuda-s18-attn-active.toml"
    assert "unknown stage" not in log and log.count("gpu-tests-attn-active (limit") == 1
    assert "-k attention tests/backends/test_cupy_kernels.py" in log
    decodes = [c for c in calls if c.startswith("bench decode")]
    assert len(decodes) == 1 and f"--registry {rw} --vs {act}" in decodes[0]
    assert "--expect attention=1.500" in decodes[0] and "--changes attention " in decodes[0]
    assert any(c.startswith("swap attention=cupy_splitk_bf16_active") for c in calls)


def test_rungs18e_leaves_the_rung_out_when_its_proof_fails(tmp_path):
    records = _records(tmp_path, attention={"cupy_splitk_bf16": 90e-6, "cupy_splitk_bf16_active": 60e-6})
    env = {"SUITE_TIMED": S13D_TIMED, "STUB_PYTEST_SECONDS": "0", "STUB_PEROP": records,
           "STUB_FAIL_MATCH": "gpu-tests-attn-active.xml"}
    log, calls = _lanes(tmp_path, "rungs18e", "", extra_env=env)
    assert "decode-attn-active: left out" in log
    assert not any("cupy_splitk_bf16_active" in c for c in calls)


def test_rungs19_times_the_side_stream_over_the_row_warp_step_after_its_proof_and_captured_gate(tmp_path):
    """The side-stream rung: its GPU tests in the lane beside (run once), the row-warp step with [engine] side_stream
    set by `sparkops engine` (no swap), a k3-nano in the 48B's mix synthesized for the captured gate, then the pair
    over the row-warp step, its change 'engine', forecast from half the F16 GEMVs' time."""
    env = {"SUITE_TIMED": S13D_TIMED, "STUB_PYTEST_SECONDS": "1"}
    log, calls = _lanes(tmp_path, "rungs19", "proofs19", extra_env=env)
    machine = tmp_path / "machine"
    rw, side = machine / "cuda-s13-rowwarp.toml", machine / "cuda-s19-side-stream.toml"
    assert "unknown stage" not in log and log.count("gpu-tests-side (limit") == 1
    assert "tests/engine/test_side_stream.py" in log
    assert any(c.startswith("engine side_stream=on --registry") for c in calls)
    nano = machine / "k3-nano-q4_k_m.gguf"
    assert any(c.startswith(f"synth --preset k3-nano --quant q4_k_m -o {nano}") for c in calls)
    gate = [c for c in calls if c.startswith(f"check --model {nano}")]
    assert len(gate) == 1 and f"--registry {side}" in gate[0] and "--captured" in gate[0]
    decodes = [c for c in calls if c.startswith("bench decode")]
    assert len(decodes) == 1 and f"--registry {rw} --vs {side}" in decodes[0]
    assert "--changes engine " in decodes[0] and "--expect linear@F16=2.0" in decodes[0]
    assert "diag-decode-side-stream.json" in decodes[0]


@pytest.mark.parametrize("fail", ["gpu-tests-side.xml", "check --model"])
def test_rungs19_leaves_the_rung_out_when_its_proof_or_gate_fails(tmp_path, fail):
    env = {"SUITE_TIMED": S13D_TIMED, "STUB_PYTEST_SECONDS": "0"}
    if fail.endswith(".xml"):
        env["STUB_FAIL_MATCH"] = fail
    else:
        env["STUB_FAIL_CHECK"] = "k3-nano-q4_k_m.gguf"
    log, calls = _lanes(tmp_path, "rungs19", "", extra_env=env)
    assert "decode-side-stream: left out" in log
    assert not any(c.startswith("bench decode") for c in calls)


def test_rungs20_times_side_priority_over_the_side_stream_step(tmp_path):
    """The priority rung: the side stream's proof, the side-stream registry made over the row-warp step (it is the
    base), the priority registry over it by `sparkops engine`, its captured gate, then the pair over the side-stream
    step with its stated forecast."""
    env = {"SUITE_TIMED": S13D_TIMED, "STUB_PYTEST_SECONDS": "0"}
    log, calls = _lanes(tmp_path, "rungs20", "", extra_env=env)
    machine = tmp_path / "machine"
    side, prio = machine / "cuda-s19-side-stream.toml", machine / "cuda-s20-side-priority.toml"
    assert "unknown stage" not in log and "gpu-tests-side (limit" in log
    engines = [c for c in calls if c.startswith("engine side_")]  # (the step's own rebuild sets other options)
    assert engines == [f"engine side_stream=on --registry {side}.new", f"engine side_priority=on --registry {prio}.new"]
    assert (machine / "cuda-s20-side-priority.toml.base").read_text().strip() == str(side)
    gate = [c for c in calls if c.startswith("check --model") and "k3-nano-q4_k_m.gguf" in c]
    assert len(gate) == 1 and f"--registry {prio}" in gate[0]
    decodes = [c for c in calls if c.startswith("bench decode")]
    assert len(decodes) == 1 and f"--registry {side} --vs {prio}" in decodes[0]
    assert "--changes engine " in decodes[0] and "--expect linear@F16=1.5" in decodes[0]
    assert "decode-router-pdl: left out" in log  # no pairs' record: the router rung has no forecast


def test_rungs20_times_the_pdl_router_over_the_row_warp_step_from_its_pairs_record(tmp_path):
    """The router rung: its proof writes the norm-and-router pairs' record (the pytest stand-in, only when its run
    selects the side-by-side that writes it), then the pair over the row-warp step, forecast 7.3 / 5.0 = 1.46."""
    records = _records(tmp_path, routerpdl={"triton_prefetch": 7.3e-6, "cupy_rowwarp": 7.2e-6,
                                            "cupy_rowwarp_pdl": 5.0e-6})
    env = {"SUITE_TIMED": S13D_TIMED, "STUB_PYTEST_SECONDS": "0", "STUB_PEROP": records}
    log, calls = _lanes(tmp_path, "rungs20", "", extra_env=env)
    machine = tmp_path / "machine"
    rw, rout = machine / "cuda-s13-rowwarp.toml", machine / "cuda-s20-router-pdl.toml"
    assert "gpu-tests-router-pdl (limit" in log and "-k router tests/backends/test_cupy_pdl.py" in log
    decodes = [c for c in calls if c.startswith("bench decode")]
    assert len(decodes) == 2 and f"--registry {rw} --vs {rout}" in decodes[1]
    assert "--changes add_rmsnorm,moe_router " in decodes[1] and "--expect moe_router=1.460" in decodes[1]
    assert any(c.startswith("swap add_rmsnorm=triton_pdl moe_router=cupy_rowwarp_pdl") for c in calls)


def test_rungs21_leaves_the_fused_norm_out_without_its_record(tmp_path):
    """No side-by-side record (the stand-in's proof wrote none): the rung says so and times nothing, after its
    proof ran over the whole two files (no -k)."""
    env = {"SUITE_TIMED": S13D_TIMED, "STUB_PYTEST_SECONDS": "0"}
    log, calls = _lanes(tmp_path, "rungs21", "", extra_env=env)
    assert "unknown stage" not in log and "gpu-tests-kda-norm (limit" in log
    line = next(x for x in log.splitlines() if "] gpu-tests-kda-norm (limit" in x)
    assert "tests/backends/test_triton_kda_norm.py tests/engine/test_kda_norm_fusion.py" in line and " -k " not in line
    assert "decode-kda-norm: left out" in log
    assert not any(c.startswith("bench decode") for c in calls)


@pytest.mark.parametrize("split,impl,factor", [(95e-6, "triton", "1.333"), (80e-6, "triton_split", "1.500")])
def test_rungs21_times_the_faster_fused_norm_over_the_row_warp_step_from_its_record(tmp_path, split, impl, factor):
    """With the record (chain 120 us a token, the one-program form 90, the split form SPLIT): the faster form swapped
    into a copy of the row-warp step, [engine] fuse_kda_norm set on it, its captured gate, then the pair with both ops
    forecast at the chain's time over that form's, --changes naming both the option and the op."""
    records = _records(tmp_path, kdanorm={"chain": 120e-6, "triton": 90e-6, "triton_pdl": 88e-6,
                                          "triton_split": split})
    env = {"SUITE_TIMED": S13D_TIMED, "STUB_PYTEST_SECONDS": "0", "STUB_PEROP": records}
    log, calls = _lanes(tmp_path, "rungs21", "", extra_env=env)
    machine = tmp_path / "machine"
    rw, reg = machine / "cuda-s13-rowwarp.toml", machine / "cuda-s21-kda-norm.toml"
    assert any(c.startswith(f"swap kda_norm={impl} ") and f"--registry {reg}.swap.new" in c for c in calls)
    assert f"engine fuse_kda_norm=on --registry {reg}.new" in calls
    assert Path(f"{reg}.base").read_text().strip() == str(rw)
    gate = [c for c in calls if c.startswith("check --model") and "k3-nano-q4_k_m.gguf" in c]
    assert len(gate) == 1 and f"--registry {reg}" in gate[0]
    decodes = [c for c in calls if c.startswith("bench decode")]
    assert len(decodes) == 1 and f"--registry {rw} --vs {reg}" in decodes[0]
    assert "--changes engine,kda_norm " in decodes[0] and f"--expect kda={factor},gated_rmsnorm={factor}" in decodes[0]
    assert f"kda_norm={impl} (the faster fused form" in decodes[0]


def test_rungs21_times_swiglu_over_the_row_warp_step_from_its_pair(tmp_path):
    """After the fused-norm rung (left out here: no record of its own), the Triton SwiGLU's proof writes its pair's
    record, then swiglu=triton is swapped over the row-warp step and timed, forecast 8.2 / 1.6 = 5.125."""
    records = _records(tmp_path, swiglu={"torch": 8.2e-6, "triton": 1.6e-6})
    env = {"SUITE_TIMED": S13D_TIMED, "STUB_PYTEST_SECONDS": "0", "STUB_PEROP": records}
    log, calls = _lanes(tmp_path, "rungs21", "", extra_env=env)
    machine = tmp_path / "machine"
    rw, reg = machine / "cuda-s13-rowwarp.toml", machine / "cuda-s21-swiglu.toml"
    assert "decode-kda-norm: left out" in log and "gpu-tests-swiglu (limit" in log
    assert any(c.startswith("swap swiglu=triton ") for c in calls)
    decodes = [c for c in calls if c.startswith("bench decode")]
    assert len(decodes) == 1 and f"--registry {rw} --vs {reg}" in decodes[0]
    assert "--changes swiglu " in decodes[0] and "--expect swiglu=5.125" in decodes[0]
    # the record is a GPU measurement: it goes into the machine's ledger, once however many lanes pack
    recorded = [c for c in calls if c.startswith("ledger perop")]
    assert recorded == [f"ledger perop {machine}/suite-diag/perop-swiglu-bfloat16.json"], recorded


def test_rungs21_leaves_the_rung_out_when_the_captured_gate_fails(tmp_path):
    records = _records(tmp_path, kdanorm={"chain": 120e-6, "triton": 90e-6, "triton_pdl": 88e-6,
                                          "triton_split": 95e-6})
    env = {"SUITE_TIMED": S13D_TIMED, "STUB_PYTEST_SECONDS": "0", "STUB_PEROP": records,
           "STUB_FAIL_CHECK": "k3-nano-q4_k_m.gguf"}
    log, calls = _lanes(tmp_path, "rungs21", "", extra_env=env)
    assert "decode-kda-norm: left out (the captured gate did not pass)" in log
    assert not any(c.startswith("bench decode") for c in calls)


def test_probe_timeline_times_the_three_steps_it_makes(tmp_path):
    """The timeline probe: the row-warp step rebuilt, the side-stream and priority registries made over it, then the
    probe over all three with the fill registry; no pair is timed."""
    env = {"SUITE_TIMED": S13D_TIMED, "STUB_PYTEST_SECONDS": "0"}
    log, calls = _lanes(tmp_path, "probe_timeline", "", extra_env=env)
    machine = tmp_path / "machine"
    assert "] probe-timeline (limit" in log and "bench/probes/step_timeline.py" in log
    line = next(x for x in log.splitlines() if "] probe-timeline (limit" in x)
    for reg in ("cuda-s13-rowwarp.toml", "cuda-s19-side-stream.toml", "cuda-s20-side-priority.toml"):
        assert f"--registry {machine / reg}" in line
    assert f"--fill-registry {machine / 'cuda-bf16.toml'}" in line and "--png" in line
    assert not any(c.startswith("bench decode") for c in calls)


def test_probe_timeline23_replays_session_22s_and_23s_steps(tmp_path):
    """Session 22's step and session 23's (made by its swaps over it) through the timeline probe at d=0, session 22's
    first (the comparison's base); no pair is timed."""
    env = {"SUITE_TIMED": S13D_TIMED + " decode-s22-all", "STUB_PYTEST_SECONDS": "0"}
    log, calls = _lanes(tmp_path, "probe_timeline23", "", extra_env=env)
    machine = tmp_path / "machine"
    line = next(x for x in log.splitlines() if "] probe-timeline23 (limit" in x)
    s22, s23 = machine / "cuda-s22-all.toml", machine / "cuda-s23-nones.toml"
    assert f"--registry {s22} --registry {s23} " in line and "--depth 0 " in line
    assert f"--fill-registry {machine / 'cuda-bf16.toml'}" in line
    assert any("engine fuse_low_rank=on side_stream=on" in c for c in calls)
    assert not any(c.startswith("bench decode") for c in calls)


def test_probe_persist_runs_the_persistent_chain_probe_alone_and_no_model(tmp_path):
    log, calls = _suite(tmp_path, "probe_persist")
    assert "] probe-persist (limit" in log and "bench/probes/persistent_chain.py --out" in log
    assert "] probe-persist-1152 (limit" in log and "persistent_chain.py --rows 1152 --out" in log
    # the stand-in probe writes no JSON: the forecast from it is left out, and says why
    assert "probe-persist-forecast: left out: the probe wrote no JSON at 1152 rows" in log
    assert "unknown stage" not in log and "synth48" not in log and not calls


def test_probe_persist_floor_runs_the_chain_at_few_rows_alone_and_no_model(tmp_path):
    log, calls = _suite(tmp_path, "probe_persist_floor")
    assert "] probe-persist-8 (limit" in log and "persistent_chain.py --rows 8 --out" in log
    assert "] probe-persist-264 (limit" in log and "persistent_chain.py --rows 264 --out" in log
    assert "unknown stage" not in log and "synth48" not in log and not calls


def test_probe_q4k_runs_the_q4k_chain_probe_alone_and_no_model(tmp_path):
    log, calls = _suite(tmp_path, "probe_q4k")
    assert "] probe-q4k (limit" in log and "bench/probes/q4k_chain.py --out" in log
    assert "probe-q4k-forecast: left out: the probe wrote no JSON" in log
    assert "unknown stage" not in log and "synth48" not in log and not calls


def test_probe_iq1s_runs_the_iq1s_kernel_probe_alone_and_no_model(tmp_path):
    log, calls = _suite(tmp_path, "probe_iq1s")
    assert "] gpu-tests-iq1s (limit" in log and "tests/backends/test_cupy_linear_iq1s.py" in log
    assert log.index("] gpu-tests-iq1s (limit") < log.index("] probe-iq1s (limit")
    assert "] probe-iq1s (limit" in log and "bench/probes/iq1s_ops.py --out" in log
    assert "] gpu-tests-iq1s-t2 (limit" in log and "--without" not in log  # the t2 tests passed: nothing left out
    assert "unknown stage" not in log and "synth48" not in log and not calls


def test_probe_iq1s_leaves_the_t2_forms_out_where_their_gpu_tests_fail_and_not_the_rest(tmp_path):
    log, calls = _suite(tmp_path, "probe_iq1s", extra_env={"STUB_FAIL_MATCH": "-k t2"})
    done = tmp_path / "machine" / "suite-done"
    assert (done / "gpu-tests-iq1s").read_text().strip() == "0"
    assert (done / "gpu-tests-iq1s-t2").read_text().strip() != "0"
    probe = log[log.index("] probe-iq1s (limit"):]
    for name in ("linear=cupy_rowwarp_pdl_q8_iq1s_t2", "linear=cupy_rowwarp_pdl_q8_iq1s_t2_rows16",
                 "moe_experts=cupy_rowwarp_pdl_q8h_iq1s_t2"):
        assert f"--without {name}" in probe.splitlines()[0] + probe.splitlines()[1], probe[:600]


def test_probe_pdl_floor_runs_the_chain_probe_alone_and_no_model(tmp_path):
    log, calls = _suite(tmp_path, "probe_pdl_floor")
    assert "] probe-pdl-floor (limit" in log and "bench/probes/pdl_floor.py --out" in log
    assert "unknown stage" not in log and "synth48" not in log and not calls


def test_probe_xcast_runs_the_broadcast_probe_alone_and_no_model(tmp_path):
    log, calls = _suite(tmp_path, "probe_xcast")
    assert "] probe-x-broadcast (limit" in log and "bench/probes/x_broadcast.py --out" in log
    assert "unknown stage" not in log and "synth48" not in log and not calls


def test_probe_gemv_runs_the_anatomy_probe_alone(tmp_path):
    log, calls = _suite(tmp_path, "probe_gemv")
    assert "] probe-gemv-anatomy (limit" in log and "bench/probes/gemv_anatomy.py --out" in log
    assert log.index("] probe-gemv-anatomy (limit") < log.index("] tune-decode-gemv (limit")
    assert "_tune linear_gemv moe_decode" in log
    assert "unknown stage" not in log and "synth48" not in log and not calls


def test_probe_ncu_profiles_the_decode_gemvs_where_ncu_exists_and_says_so_where_not(tmp_path):
    """With ncu on the PATH the stage profiles the measured pass only (the warm-up's 24 launches skipped) with the
    sections that say what binds; without it, it says that nothing was profiled and runs nothing."""
    log, calls = _ncu_stage(tmp_path, "probe_ncu", "probe-ncu-rowwarp")
    assert "] probe-ncu-rowwarp (limit" in log and "unknown stage" not in log
    ncu, stalls = [c for c in calls if c.startswith("ncu ")]
    assert "--clock-control none" in ncu and "--launch-skip 24 --launch-count 24" in ncu
    assert "--section WarpStateStats" in ncu and "bench/probes/rowwarp_kernels.py" in ncu
    # the stall reasons in a pass of their own, every reason in the one metric form ncu_table.py reads
    assert "] probe-ncu-rowwarp-stalls (limit" in log and "--launch-skip 24 --launch-count 24" in stalls
    metrics = stalls.split("--metrics ")[1].split()[0].split(",")
    assert metrics[0] == "smsp__inst_executed.sum" and len(metrics) == 15
    assert all(m.startswith("smsp__average_warps_issue_stalled_") and m.endswith("_per_issue_active.ratio")
               for m in metrics[1:]), metrics


def test_probe_router_profiles_the_routers_measured_pass_with_the_same_two_passes(tmp_path):
    """Stage probe_router: ncu_passes on bench/probes/router_kernels.py, its 4 warm-up launches skipped, both the
    sections and the stall pass, each regex naming the two routers' kernels."""
    _stubs_with_ncu(tmp_path)
    log, calls = _suite(tmp_path, "probe_router")
    assert "] probe-ncu-router (limit" in log and "] probe-ncu-router-stalls (limit" in log
    ncu, stalls = [c for c in calls if c.startswith("ncu ")]
    for c in (ncu, stalls):
        assert "--launch-skip 6 --launch-count 6" in c and "bench/probes/router_kernels.py" in c
        assert "regex:moe_router_rowwarp|_logits_gemv_kernel" in c


def _ncu_stage(tmp: Path, stage: str, step: str) -> tuple[str, list[str]]:
    """An ncu stage on a machine without ncu (it must say that nothing was profiled and run nothing: checked here),
    then on one with the logging stand-in ncu: that run's log and calls."""
    bare = tmp / "without"
    bare.mkdir()
    stubs = _stubs(bare, 1)
    log, calls = _suite(bare, stage, extra_env={"PATH": f"{stubs}{os.pathsep}{_path_without('ncu')}"})
    assert f"{step}: no ncu on this machine; nothing profiled" in log and not calls
    _stubs_with_ncu(tmp)
    return _suite(tmp, stage)


def _stubs_with_ncu(tmp: Path) -> Path:
    """The stand-ins of one GPU with an ncu that only logs its arguments (a machine where Nsight Compute runs)."""
    stubs = _stubs(tmp, 1)
    (stubs / "ncu").write_text('#!/usr/bin/env bash\necho "ncu $*" >> "$STUB_LOG"\n')
    (stubs / "ncu").chmod(0o755)
    return stubs


def _path_without(tool: str) -> str:
    """PATH with every directory holding `tool` left out (the stubs are put in front by _suite)."""
    return os.pathsep.join(d for d in os.environ["PATH"].split(os.pathsep)
                           if not (Path(d) / tool).exists())


def test_the_48b_is_synthesized_beside_the_registries_swaps(tmp_path):
    """A fresh machine's prerequisites: the synthesis (CPU) starts before the first swap (GPU) has ended, not after
    the last (session 12: ~60 s of each fresh call were spent waiting on one or the other); it runs once."""
    log, calls = _suite(tmp_path, "rungs9", extra_env={"STUB_SWAP_SECONDS": "2", "SUITE_PREFILL_BASE": "bf16",
                                                       "SUITE_TIMED": "prefill-dqmm prefill-kda-chunked"})
    assert log.index("] synth48 (limit") < log.index("] swap-torch rc=")
    assert sum(c.startswith("synth --preset kimi-linear-48b-a3b --quant q4_k_m") for c in calls) == 1
    assert "best registry: bf16" in log and "SKIP" not in log


def test_rungs22_times_the_deep_absorb_over_the_row_warp_step_from_its_record(tmp_path):
    """With its record (the plain attention 90 us a token, the deep absorb's 60): the proof's tests, the swap of
    attention=cupy_splitk_bf16_deep over the row-warp step, and the pair forecast at 1.5; the record goes into the
    ledger once."""
    records = _records(tmp_path, attndeep={"cupy_splitk_bf16": 90e-6, "cupy_splitk_bf16_deep": 60e-6})
    env = {"SUITE_TIMED": S13D_TIMED, "STUB_PYTEST_SECONDS": "0", "STUB_PEROP": records}
    log, calls = _lanes(tmp_path, "rungs22", "", extra_env=env)
    machine = tmp_path / "machine"
    rw, reg = machine / "cuda-s13-rowwarp.toml", machine / "cuda-s22-attn-deep.toml"
    assert "gpu-tests-attn-deep (limit" in log
    assert any(c.startswith("swap attention=cupy_splitk_bf16_deep ") for c in calls)
    decodes = [c for c in calls if c.startswith("bench decode")]
    assert len(decodes) == 1 and f"--registry {rw} --vs {reg}" in decodes[0]
    assert "--changes attention " in decodes[0] and "--expect attention=1.500" in decodes[0], decodes[0]
    assert [c for c in calls if c.startswith("ledger perop")] == [
        f"ledger perop {machine}/suite-diag/perop-attndeep-bfloat16.json"]


def test_rungs22_leaves_the_rung_out_without_its_record(tmp_path):
    env = {"SUITE_TIMED": S13D_TIMED, "STUB_PYTEST_SECONDS": "0"}
    log, calls = _lanes(tmp_path, "rungs22", "", extra_env=env)
    assert "decode-attn-deep: left out" in log
    assert not any("cupy_splitk_bf16_deep" in c for c in calls)


S22_PAIRS = ("add_rmsnorm=triton_pdl moe_router=cupy_rowwarp_pdl kda_norm=triton_split swiglu=triton "
             "attention=cupy_splitk_bf16_deep")


def _selects(reg: Path) -> dict[str, str]:
    """A registry's cuda selections, OP (or OP@TYPE) -> IMPL, as the stand-in swaps left them."""
    import tomllib

    ops = tomllib.loads(reg.read_text()).get("ops", {})
    out = {op: t["cuda"]["impl"] for op, t in ops.items() if "impl" in t.get("cuda", {})}
    out.update({f"{op}@{q}": b["impl"] for op, t in ops.items()
                for q, b in t.get("cuda", {}).get("by_type", {}).items()})
    return out


def test_rungs22all_makes_session_22s_step_and_times_it_as_one_rung(tmp_path):
    """Session 22's step: the four pairs swapped over the row-warp step in one swap, [engine] fuse_kda_norm set, its
    registry selecting all of them; then its captured gate and the pair over the row-warp step with the four per-op
    forecasts and every change named."""
    env = {"SUITE_TIMED": S13D_TIMED, "STUB_PYTEST_SECONDS": "0"}
    log, calls = _lanes(tmp_path, "rungs22all", "", extra_env=env)
    machine = tmp_path / "machine"
    rw, reg = machine / "cuda-s13-rowwarp.toml", machine / "cuda-s22-all.toml"
    assert "unknown stage" not in log
    assert any(c.startswith(f"swap {S22_PAIRS} ") and f"--registry {reg}.swap.new" in c for c in calls)
    assert f"engine fuse_kda_norm=on --registry {reg}.new" in calls
    sel = _selects(reg)
    assert all(sel[p.split("=")[0]] == p.split("=")[1] for p in S22_PAIRS.split()), sel
    assert Path(f"{reg}.base").read_text().strip() == str(rw)
    gate = [c for c in calls if c.startswith("check --model") and "k3-nano-q4_k_m.gguf" in c]
    assert len(gate) == 1 and f"--registry {reg}" in gate[0]
    decodes = [c for c in calls if c.startswith("bench decode")]
    assert len(decodes) == 1 and f"--registry {rw} --vs {reg}" in decodes[0]
    assert "--changes engine,add_rmsnorm,moe_router,kda_norm,swiglu,attention " in decodes[0]
    assert "--expect moe_router=1.399,kda=1.167,gated_rmsnorm=1.167,swiglu=5.994,attention=1.213" in decodes[0]


def test_rungs22all_only_makes_the_step_when_session_22_timed_it(tmp_path):
    env = {"SUITE_TIMED": S13D_TIMED + " decode-s22-all", "STUB_PYTEST_SECONDS": "0"}
    log, calls = _lanes(tmp_path, "rungs22all", "", extra_env=env)
    assert (tmp_path / "machine" / "cuda-s22-all.toml").exists()
    assert "decode-s22-all: timed in an earlier session" in log
    assert not any(c.startswith(("bench decode", "diagnose")) and "s22" in c for c in calls)


def test_a_pair_the_swap_could_not_prove_leaves_the_step_out(tmp_path):
    """swap_into keeps the base's selection for a pair it cannot prove (one by one after the swap of all failed): the
    registry would name a change it does not hold, so the check removes it, says which, and nothing is timed."""
    env = {"SUITE_TIMED": S13D_TIMED, "STUB_PYTEST_SECONDS": "0", "STUB_SWAP_REFUSE": "swiglu=triton"}
    log, calls = _lanes(tmp_path, "rungs22all", "", extra_env=env)
    assert "s22-all: registry_selects:" in log and "swiglu=triton (it selects" in log
    assert "rungs22all: no session-22 step" in log
    assert not (tmp_path / "machine" / "cuda-s22-all.toml").exists()
    assert not any(c.startswith("bench decode") for c in calls)


def test_rungs23_times_the_earlier_nones_together_then_each_alone_over_session_22s_step(tmp_path):
    """Over session 22's step (made, not timed again): the side stream's proof, one diagnosis of the step, then four
    pairs against it - all three levers together first, then the PDL kernels, fuse_low_rank and side_stream alone -
    each after its own captured gate, every one forecast on the one diagnosis."""
    env = {"SUITE_TIMED": S13D_TIMED + " decode-s22-all", "STUB_PYTEST_SECONDS": "0"}
    log, calls = _lanes(tmp_path, "rungs23", "", extra_env=env)
    machine = tmp_path / "machine"
    s22 = machine / "cuda-s22-all.toml"
    assert "unknown stage" not in log and "gpu-tests-side (limit" in log
    diags = [c for c in calls if c.startswith("diagnose")]
    assert len(diags) == 1 and f"--registry {s22}" in diags[0] and "diag-decode-s23-nones.json" in diags[0]
    both = machine / "cuda-s23-nones.toml"
    assert _selects(both)["linear@Q4_K"] == "cupy_rowwarp_pdl" and _selects(both)["moe_experts"] == "cupy_rowwarp_pdl"
    assert f"engine fuse_low_rank=on side_stream=on --registry {both}.new" in calls
    decodes = [c for c in calls if c.startswith("bench decode")]
    regs = ["cuda-s23-nones.toml", "cuda-s23-pdl.toml", "cuda-s23-lowrank.toml", "cuda-s23-side.toml"]
    assert [c.split("--vs ")[1].split()[0] for c in decodes] == [str(machine / r) for r in regs]
    assert all(f"--registry {s22} " in c and "diag-decode-s23-nones.json" in c for c in decodes)
    assert "--expect linear@F16=1.6,linear@Q4_K=1.061,moe_experts=1.012" in decodes[0]
    assert "--changes engine,gated_rmsnorm,kda_norm,linear@Q4_K,moe_experts " in decodes[0]
    assert _selects(both)["kda_norm"] == "triton_split_pdl"
    # every proof runs before the first diagnosis and pair
    assert max(log.index(f"] gpu-tests-{t} (limit") for t in ("side", "kda-norm", "attn-deep")) \
        < log.index("] diagnose-decode-s23-nones (limit") < log.index("] decode-s23-nones (limit")
    assert "--expect linear@F16=1.37" in decodes[2] and "--expect linear@F16=1.19" in decodes[3]
    gates = [c for c in calls if c.startswith("check --model") and "k3-nano-q4_k_m.gguf" in c]
    assert [g.split("--registry ")[1].split()[0] for g in gates] == [str(machine / r) for r in regs]


@pytest.mark.parametrize("proof", ["side", "kda-norm"])
def test_rungs23_leaves_everything_out_when_a_proof_fails(tmp_path, proof):
    env = {"SUITE_TIMED": S13D_TIMED + " decode-s22-all", "STUB_PYTEST_SECONDS": "0",
           "STUB_FAIL_MATCH": f"gpu-tests-{proof}.xml"}
    log, calls = _lanes(tmp_path, "rungs23", "", extra_env=env)
    assert f"decode-s23-nones: left out (the GPU tests gpu-tests-{proof} did not pass)" in log
    assert not any(c.startswith("bench decode") for c in calls)


def test_rungs23_ends_with_the_deep_active_attention_from_its_record(tmp_path):
    """After the four pairs: the deep attention's proof (its side-by-side writes the record: deep 60, deep and active
    50 us a token), the swap over session 22's step, checked, and the pair forecast at 60 / 50 = 1.2; without the
    record (test above) it is left out."""
    records = _records(tmp_path, attndeep={"cupy_splitk_bf16": 90e-6, "cupy_splitk_bf16_deep": 60e-6,
                                           "cupy_splitk_bf16_deep_active": 50e-6})
    env = {"SUITE_TIMED": S13D_TIMED + " decode-s22-all", "STUB_PYTEST_SECONDS": "0", "STUB_PEROP": records}
    log, calls = _lanes(tmp_path, "rungs23", "", extra_env=env)
    machine = tmp_path / "machine"
    s22, reg = machine / "cuda-s22-all.toml", machine / "cuda-s23-attn-deep-active.toml"
    assert log.index("] decode-s23-side (limit") < log.index("] decode-s23-attn-deep-active (limit")
    assert _selects(reg)["attention"] == "cupy_splitk_bf16_deep_active"
    decodes = [c for c in calls if c.startswith("bench decode")]
    assert len(decodes) == 5 and f"--registry {s22} --vs {reg}" in decodes[4]
    assert "--changes attention " in decodes[4] and "--expect attention=1.200" in decodes[4], decodes[4]


def test_rungs23_leaves_the_deep_active_attention_out_without_its_record(tmp_path):
    env = {"SUITE_TIMED": S13D_TIMED + " decode-s22-all", "STUB_PYTEST_SECONDS": "0"}
    log, calls = _lanes(tmp_path, "rungs23", "", extra_env=env)
    assert "decode-s23-attn-deep-active: left out" in log
    assert not any("cupy_splitk_bf16_deep_active" in c for c in calls)


S22_TIMED = S13D_TIMED + " decode-s22-all"


def _kdalowrank(tmp_path, split=50e-6, pdl=48e-6) -> str:
    """STUB_PEROP for the fused gates' side-by-side: the chain 160 us a token, kda_norm alone 40, the gate linears
    110, and the two fused forms."""
    return _records(tmp_path, kdalowrank={"chain": 160e-6, "kda_norm": 40e-6, "gates": 110e-6, "triton_split": split,
                                          "triton_split_pdl": pdl})


@pytest.mark.parametrize("split,pdl,impl,factor", [(50e-6, 48e-6, "triton_split_pdl", "0.833"),
                                                    (45e-6, 48e-6, "triton_split", "0.889")])
def test_rungs24_times_the_fused_gates_over_session_22s_step_from_its_record(tmp_path, split, pdl, impl, factor):
    """No win of decode-s23-nones: session 22's step is the base. The proof's tests (both files, no -k), the base's own
    diagnosis, the faster fused form swapped over it (checked to select it), [engine] fuse_kda_gates set, the captured
    gate, then the pair forecast on kda_norm at kda_norm's time over that form's and on linear@F16 at 3.0."""
    env = {"SUITE_TIMED": S22_TIMED, "STUB_PYTEST_SECONDS": "0", "STUB_PEROP": _kdalowrank(tmp_path, split, pdl)}
    log, calls = _lanes(tmp_path, "rungs24", "", extra_env=env)
    machine = tmp_path / "machine"
    s22, reg = machine / "cuda-s22-all.toml", machine / "cuda-s24-gates.toml"
    assert "unknown stage" not in log and "left out" not in log
    line = next(x for x in log.splitlines() if "] gpu-tests-kda-lowrank (limit" in x)
    assert "tests/backends/test_triton_kda_lowrank_norm.py tests/engine/test_kda_gates_fusion.py" in line
    assert f"SPARKOPS_PEROP_DIR={machine}/suite-diag " in line and " -k " not in line and "-m gpu" in line
    diags = [c for c in calls if c.startswith("diagnose")]
    assert len(diags) == 1 and f"--registry {s22} " in diags[0] and "diag-decode-s24-gates.json" in diags[0]
    assert any(c.startswith(f"swap kda_lowrank_norm={impl} ") and f"--registry {reg}.swap.new" in c for c in calls)
    assert f"engine fuse_kda_gates=on --registry {reg}.new" in calls
    assert _selects(reg)["kda_lowrank_norm"] == impl
    assert Path(f"{reg}.base").read_text().strip() == str(s22)
    gate = [c for c in calls if c.startswith("check --model") and "k3-nano-q4_k_m.gguf" in c]
    assert len(gate) == 1 and f"--registry {reg} " in gate[0] + " " and "--captured" in gate[0]
    decodes = [c for c in calls if c.startswith("bench decode")]
    assert len(decodes) == 1 and f"--registry {s22} --vs {reg} " in decodes[0]
    assert "--depth 0,32768 " in decodes[0] and f"--prediction {machine}/suite-diag/diag-decode-s24-gates.json" \
        in decodes[0]
    assert "--changes engine,kda_lowrank_norm " in decodes[0]
    assert f"--expect kda_norm={factor},linear@F16=3.0 " in decodes[0], decodes[0]
    assert f"fuse_kda_gates with kda_lowrank_norm={impl} (the faster" in decodes[0]
    steps = ["] gpu-tests-kda-lowrank (limit", "] diagnose-decode-s24-gates (limit", "] swap-s24-gates (limit",
             "] gate-captured-s24-gates (limit", "] decode-s24-gates (limit"]
    at = [log.index(x) for x in steps]
    assert at == sorted(at), list(zip(steps, at))
    # the record is a GPU measurement: into the machine's ledger
    assert f"ledger perop {machine}/suite-diag/perop-kdalowrank-bfloat16.json" in calls


@pytest.mark.parametrize("why", ["proof", "record"])
def test_rungs24_is_left_out_when_its_proof_fails_or_writes_no_record(tmp_path, why):
    env = {"SUITE_TIMED": S22_TIMED, "STUB_PYTEST_SECONDS": "0"}
    if why == "proof":  # the record is written, the tests fail
        env.update(STUB_PEROP=_kdalowrank(tmp_path), STUB_FAIL_MATCH="gpu-tests-kda-lowrank.xml")
    log, calls = _lanes(tmp_path, "rungs24", "", extra_env=env)
    assert "] gpu-tests-kda-lowrank (limit" in log
    assert "decode-s24-gates: left out (its GPU tests failed, or their record gave no factor)" in log
    assert not any("kda_lowrank_norm" in c or "fuse_kda_gates" in c or "s24-gates" in c for c in calls), calls
    assert not (tmp_path / "machine" / "cuda-s24-gates.toml").exists()


def test_rungs24_is_left_out_when_its_captured_gate_fails(tmp_path):
    env = {"SUITE_TIMED": S22_TIMED, "STUB_PYTEST_SECONDS": "0", "STUB_PEROP": _kdalowrank(tmp_path),
           "STUB_FAIL_CHECK": "k3-nano-q4_k_m.gguf"}
    log, calls = _lanes(tmp_path, "rungs24", "", extra_env=env)
    assert "decode-s24-gates: left out (the captured gate did not pass)" in log
    assert not any(c.startswith("bench decode") for c in calls)


def _s24_pair(calls: list[str]) -> str:
    decodes = [c for c in calls if c.startswith("bench decode") and "cuda-s24-gates.toml" in c]
    assert len(decodes) == 1, decodes
    return decodes[0]


def test_rungs24_is_timed_over_the_rungs23_registry_when_suite_timed_names_decode_s23_nones(tmp_path):
    """A fresh machine, SUITE_TIMED naming decode-s23-nones: the rungs23 registry is made by swaps (session 22's step,
    the PDL pairs, fuse_low_rank and side_stream) and is the base; linear@F16 is forecast at 2.2 (fuse_low_rank's two
    F16 GEMVs become one)."""
    env = {"SUITE_TIMED": S22_TIMED + " decode-s23-nones", "STUB_PYTEST_SECONDS": "0",
           "STUB_PEROP": _kdalowrank(tmp_path)}
    log, calls = _lanes(tmp_path, "rungs24", "", extra_env=env)
    machine = tmp_path / "machine"
    s23, reg = machine / "cuda-s23-nones.toml", machine / "cuda-s24-gates.toml"
    assert f"engine fuse_low_rank=on side_stream=on --registry {s23}.new" in calls
    assert _selects(s23)["linear@Q4_K"] == "cupy_rowwarp_pdl" and _selects(s23)["kda_norm"] == "triton_split_pdl"
    assert Path(f"{reg}.base").read_text().strip() == str(s23)
    diags = [c for c in calls if c.startswith("diagnose")]
    assert len(diags) == 1 and f"--registry {s23} " in diags[0] and "diag-decode-s24-gates.json" in diags[0]
    pair = _s24_pair(calls)
    assert f"--registry {s23} --vs {reg} " in pair and "--expect kda_norm=0.833,linear@F16=2.2 " in pair
    assert "--changes engine,kda_lowrank_norm " in pair and "over cuda-s23-nones.toml, graph" in pair
    assert not any(c.startswith("bench decode") and "--vs " + str(s23) in c for c in calls)  # not timed again


@pytest.mark.parametrize("won", [True, False])
def test_rungs24_after_rungs23_takes_the_rungs23_registry_as_its_base_only_when_decode_s23_nones_won(tmp_path, won):
    """rungs23 then rungs24 in one call: rungs24's proof runs with rungs23's, before the first diagnosis; a win of
    decode-s23-nones makes the rungs23 registry rungs24's base, a none leaves session 22's step."""
    env = {"SUITE_TIMED": S22_TIMED, "STUB_PYTEST_SECONDS": "0", "STUB_PEROP": _kdalowrank(tmp_path)}
    if not won:
        env["STUB_NO_WIN"] = "cuda-s23-nones.toml"  # only decode-s23-nones's pair names it (its --vs)
    log, calls = _lanes(tmp_path, "rungs23 rungs24", "", extra_env=env)
    machine = tmp_path / "machine"
    s22, s23, reg = (machine / f"cuda-{n}.toml" for n in ("s22-all", "s23-nones", "s24-gates"))
    assert (machine / "suite-done" / "decode-s23-nones.tier").read_text().strip() == ("win" if won else "no win")
    assert log.index("] gpu-tests-kda-lowrank (limit") < log.index("] diagnose-decode-s23-nones (limit")
    assert log.count("] gpu-tests-kda-lowrank (limit") == 1
    assert log.index("] decode-s23-nones (limit") < log.index("] diagnose-decode-s24-gates (limit")
    base = s23 if won else s22
    assert Path(f"{reg}.base").read_text().strip() == str(base)
    diag = next(c for c in calls if c.startswith("diagnose") and "diag-decode-s24-gates.json" in c)
    assert f"--registry {base} " in diag
    pair = _s24_pair(calls)
    assert f"--registry {base} --vs {reg} " in pair
    assert f"linear@F16={'2.2' if won else '3.0'} " in pair


def test_rungs23_alone_does_not_run_rungs24s_proof(tmp_path):
    env = {"SUITE_TIMED": S22_TIMED, "STUB_PYTEST_SECONDS": "0"}
    log, _ = _lanes(tmp_path, "rungs23", "", extra_env=env)
    assert "] gpu-tests-kda-norm (limit" in log and "gpu-tests-kda-lowrank" not in log


def test_rungs24_diagnoses_gates_and_times_again_when_decode_s23_nones_wins_after_it(tmp_path):
    """The planned session: a first call diagnoses and times rungs24 over session 22's step; decode-s23-nones then
    wins on this machine, and the next call forgets what was done over the old base - its diagnosis, captured gate and
    pair are made again over the rungs23 registry, the pair forecast on that diagnosis; a third call does nothing."""
    env = {"SUITE_TIMED": S22_TIMED, "STUB_PYTEST_SECONDS": "0", "STUB_PEROP": _kdalowrank(tmp_path)}
    _lanes(tmp_path, "rungs24", "", extra_env=env)
    machine = tmp_path / "machine"
    s22, s23, reg = (machine / f"cuda-{n}.toml" for n in ("s22-all", "s23-nones", "s24-gates"))
    (machine / "suite-done" / "decode-s23-nones.tier").write_text("win\n")
    log, calls = _lanes(tmp_path, "rungs24", "", extra_env=env)
    assert "decode-s24-gates: its base is now cuda-s23-nones.toml, not cuda-s22-all.toml" in log
    diags = [c for c in calls if c.startswith("diagnose") and "diag-decode-s24-gates.json" in c]
    assert [d.split("--registry ")[1].split()[0] for d in diags] == [str(s22), str(s23)]
    gates = [c for c in calls if c.startswith("check --model") and "k3-nano-q4_k_m.gguf" in c]
    assert len(gates) == 2 and all(f"--registry {reg}" in g for g in gates)
    decodes = [c for c in calls if c.startswith("bench decode") and "cuda-s24-gates.toml" in c]
    assert [d.split("--registry ")[1].split()[0] for d in decodes] == [str(s22), str(s23)]
    assert "linear@F16=3.0 " in decodes[0] and "linear@F16=2.2 " in decodes[1]
    assert Path(f"{reg}.base").read_text().strip() == str(s23)
    n = len(calls)
    log3, calls3 = _lanes(tmp_path, "rungs24", "", extra_env=env)  # (the machine's suite.log grows call by call)
    assert log3.startswith(log) and "its base is now" not in log3[len(log):]
    assert not any(c.startswith(("diagnose", "bench decode", "check --model")) for c in calls3[n:])


def test_a_win_of_rungs24_is_the_step_now(tmp_path):
    """decode-s24-gates is the newest rung of NOW_RUNGS: once it wins, the stages that time the step now take it."""
    env = {"SUITE_TIMED": S22_TIMED, "STUB_PYTEST_SECONDS": "0", "STUB_PEROP": _kdalowrank(tmp_path)}
    log, calls = _lanes(tmp_path, "rungs24 frontier131k", "", extra_env=env)
    reg = tmp_path / "machine" / "cuda-s24-gates.toml"
    assert f"the step now: {reg}" in log
    assert any(c.startswith("bench decode") and "--depth 131072" in c and f"--registry {reg} --graph A " in c
               for c in calls)


def test_proofs24_runs_the_fused_gates_proof_alone_and_its_record_only_from_its_own_test(tmp_path):
    """Stage proofs24: the proof alone, no model made; the pytest stand-in writes perop-kdalowrank only for a run that
    selects its side-by-side test (its file, no -k or a -k naming it), not for kda_norm's proof (whose side-by-side test
    has the same name in another file) or a -k that leaves it out."""
    records = _kdalowrank(tmp_path)
    diag = tmp_path / "machine" / "suite-diag"
    log, calls = _suite(tmp_path, "proofs21", extra_env={"STUB_PEROP": records})
    assert "] gpu-tests-kda-norm (limit" in log and not (diag / "perop-kdalowrank-bfloat16.json").exists()
    stubs = tmp_path / "stubs"
    run_env = {**os.environ, "SPARKOPS_PEROP_DIR": str(diag), "STUB_PEROP": records}
    lowrank = "tests/backends/test_triton_kda_lowrank_norm.py"
    subprocess.run([sys.executable, str(stubs / "perop_writers.py"), "-m", "pytest", "-k", "contract", lowrank],
                   env=run_env, check=True)
    assert not (diag / "perop-kdalowrank-bfloat16.json").exists()
    log, calls = _suite(tmp_path, "proofs24", extra_env={"STUB_PEROP": records})
    assert "] gpu-tests-kda-lowrank (limit" in log and "unknown stage" not in log
    assert json.loads((diag / "perop-kdalowrank-bfloat16.json").read_text())["per_token_seconds"]["kda_norm"] == 40e-6
    assert not any(c.startswith(("synth", "swap", "bench", "diagnose")) for c in calls)
    (diag / "perop-kdalowrank-bfloat16.json").unlink()
    subprocess.run([sys.executable, str(stubs / "perop_writers.py"), "-m", "pytest", "-k", "unfused_chain", lowrank],
                   env=run_env, check=True)
    assert (diag / "perop-kdalowrank-bfloat16.json").exists()


S23_TIMED = S22_TIMED + " decode-s23-nones"  # the planned session 25: session 23's win made by swaps, not timed again


def _s25_records(tmp_path, f16=True, kda=True, conv=True) -> str:
    """STUB_PEROP for rungs25's three records: the F16 side-by-side (triton_lastblock 120 us a token, triton_pdl 100:
    x1.200), the short conv's (triton 50, triton_pdl 40: x1.250) and the fused gates' (_kdalowrank: kda_norm 40 us,
    triton_split_pdl 48: x0.833)."""
    recs = {}
    if f16:
        recs["f16pdl"] = {"triton_lastblock": 120e-6, "triton_pdl": 100e-6}
    if conv:
        recs["convpdl"] = {"triton": 50e-6, "triton_pdl": 40e-6}
    out = [_records(tmp_path, **recs)] if recs else []
    if kda:
        out.append(_kdalowrank(tmp_path))
    return " ".join(out)


def _s25_decode(machine: Path, reg: Path, changes: str, expect: str) -> str:
    """The exact command line of a rungs25 pair up to its --change text."""
    return (f"bench decode --model {machine}/k48-q4_k_m.gguf --depth 0,32768 --tokens 64 --repeats 6 "
            f"--registry {machine}/cuda-s23-nones.toml --vs {reg} --graph A,B --gate-depths 1,64,4096 "
            f"--gate-golden {machine}/cuda-torch.toml --bench-dir {machine}/suite-bench --device cuda --reuse-gate "
            f"--fill-registry {machine}/cuda-bf16.toml --changes {changes} "
            f"--prediction {machine}/suite-diag/diag-decode-s25-base.json --expect {expect} --change ")


S25 = ("s25-chain", "s25-conv-pdl", "s25-f16pdl", "s25-gates-pdl")  # rungs25's rungs in the order they are timed


def test_rungs25_times_the_pdl_chain_then_its_parts_then_the_pdl_fused_gates_over_session_23s_step(tmp_path):
    """The planned session 25: SUITE_TIMED names decode-s23-nones (not timed again; its registry made by swaps); the
    three proofs (the PDL GEMV's tests with -k pdl, writing the F16 record; the PDL short conv's, writing its record;
    the fused gates'); one diagnosis of the rungs23 registry; then, each swapped over it with its captured gate and
    pair: linear=triton_pdl with short_conv=triton_pdl (forecast 1.200 on linear@F16 and 1.250 on short_conv), the
    short conv alone (1.250), the F16 GEMVs alone (1.200, the by_type selections kept), then kda_lowrank_norm=
    triton_split_pdl with fuse_kda_gates (40 / 48 on kda_norm and 2.2 on linear@F16)."""
    env = {"SUITE_TIMED": S23_TIMED, "STUB_PYTEST_SECONDS": "0", "STUB_PEROP": _s25_records(tmp_path)}
    log, calls = _lanes(tmp_path, "rungs25", "", extra_env=env)
    machine = tmp_path / "machine"
    s23 = machine / "cuda-s23-nones.toml"
    chain, conv, f16, gates = (machine / f"cuda-{n}.toml" for n in S25)
    assert "unknown stage" not in log and "left out" not in log, log
    line = next(x for x in log.splitlines() if "] gpu-tests-f16-pdl (limit" in x)
    assert f"): env SPARKOPS_PEROP_DIR={machine}/suite-diag python3 -m pytest -q -rP -m gpu -p no:cacheprovider " \
        f"-k pdl tests/backends/test_triton_linear.py --junitxml={machine}/suite-results/" in line, line
    assert line.endswith("-gpu0/gpu-tests-f16-pdl.xml"), line
    line = next(x for x in log.splitlines() if "] gpu-tests-conv-pdl (limit" in x)
    assert f"): env SPARKOPS_PEROP_DIR={machine}/suite-diag python3 -m pytest -q -rP -m gpu -p no:cacheprovider " \
        f"tests/backends/test_triton_short_conv.py --junitxml={machine}/suite-results/" in line, line
    assert "] gpu-tests-kda-lowrank (limit" in log
    assert f"engine fuse_low_rank=on side_stream=on --registry {s23}.new" in calls
    diags = [c for c in calls if c.startswith("diagnose")]
    assert diags == [f"diagnose --model {machine}/k48-q4_k_m.gguf --device cuda --depth 0,32768 --registry {s23} "
                     f"--fill-registry {machine}/cuda-bf16.toml --out {diags[0].split('--out ')[1].split()[0]} "
                     f"--json-out {machine}/suite-diag/diag-decode-s25-base.json --record"], diags
    assert f"swap linear=triton_pdl short_conv=triton_pdl --device cuda --registry {chain}.new" in calls
    assert f"swap short_conv=triton_pdl --device cuda --registry {conv}.new" in calls
    assert f"swap linear=triton_pdl --device cuda --registry {f16}.new" in calls
    sel, base = _selects(f16), _selects(s23)
    assert (sel["linear"], sel["linear@Q4_K"], sel["linear@Q6_K"]) == ("triton_pdl", "cupy_rowwarp_pdl", "cupy_float")
    assert {k: v for k, v in sel.items() if k != "linear"} == {k: v for k, v in base.items() if k != "linear"}
    sel = _selects(chain)
    assert (sel["linear"], sel["short_conv"], sel["linear@Q4_K"]) == ("triton_pdl", "triton_pdl", "cupy_rowwarp_pdl")
    assert _selects(conv)["short_conv"] == "triton_pdl" and _selects(conv)["linear"] == base["linear"]
    assert f"swap kda_lowrank_norm=triton_split_pdl --device cuda --registry {gates}.swap.new" in calls
    assert f"engine fuse_kda_gates=on --registry {gates}.new" in calls
    assert _selects(gates)["kda_lowrank_norm"] == "triton_split_pdl"
    assert all(Path(f"{r}.base").read_text().strip() == str(s23) for r in (chain, conv, f16, gates))
    checks = [c for c in calls if c.startswith("check --model") and "k3-nano-q4_k_m.gguf" in c]
    assert checks == [f"check --model {machine}/k3-nano-q4_k_m.gguf --registry {r} --device cuda --captured"
                      for r in (chain, conv, f16, gates)]
    decodes = [c for c in calls if c.startswith("bench decode")]
    assert len(decodes) == 4, decodes
    want = _s25_decode(machine, chain, "linear,short_conv", "linear@F16=1.200,short_conv=1.250")
    assert decodes[0].startswith(want + "linear=triton_pdl short_conv=triton_pdl: the step's last two kinds"), \
        decodes[0]
    want = _s25_decode(machine, conv, "short_conv", "short_conv=1.250")
    assert decodes[1].startswith(want + "short_conv=triton_pdl: the fused q/k/v short conv"), decodes[1]
    want = _s25_decode(machine, f16, "linear", "linear@F16=1.200")
    assert decodes[2].startswith(want + "linear=triton_pdl (the default selection"), decodes[2]
    assert decodes[2].endswith("(the same bits as triton_lastblock; session 23's PDL kernels paid ~2x their per-op "
                               "forecast), over cuda-s23-nones.toml, graph"), decodes[2]
    want = _s25_decode(machine, gates, "engine,kda_lowrank_norm", "kda_norm=0.833,linear@F16=2.2")
    assert decodes[3].startswith(want + "[engine] fuse_kda_gates with kda_lowrank_norm=triton_split_pdl (the PDL "
                                 "form, chosen though slower per op"), decodes[3]
    assert decodes[3].endswith("inside its fused recurrence and norm, over cuda-s23-nones.toml, graph"), decodes[3]
    steps = ["] gpu-tests-f16-pdl (limit", "] gpu-tests-conv-pdl (limit", "] gpu-tests-kda-lowrank (limit",
             "] swap-s23-pdl (limit", "] diagnose-decode-s25-base (limit"]
    for n in S25:
        steps += [f"] swap-{n} (limit", f"] gate-captured-{n} (limit", f"] decode-{n} (limit"]
    at = [log.index(x) for x in steps]
    assert at == sorted(at), list(zip(steps, at))
    for rec in ("f16pdl", "convpdl"):
        assert f"suite-diag/perop-{rec}-bfloat16.json" in " ".join(c for c in calls if c.startswith("ledger perop"))
    # a second call on the same machine: every step done, nothing diagnosed, gated or timed again
    n = len(calls)
    _, calls2 = _lanes(tmp_path, "rungs25", "", extra_env=env)
    assert not any(c.startswith(("diagnose", "bench decode", "check --model", "swap")) for c in calls2[n:]), calls2[n:]


@pytest.mark.parametrize("rung,why", [("f16pdl", "proof"), ("f16pdl", "record"), ("gates-pdl", "proof"),
                                      ("gates-pdl", "record"), ("conv-pdl", "proof"), ("conv-pdl", "record")])
def test_rungs25_leaves_a_rung_out_when_its_proof_fails_or_writes_no_record_and_times_the_others(tmp_path, rung,
                                                                                                 why):
    """A rung without its proof's pass or its record's factor is said to be left out and nothing of it runs; the
    chain, which holds both PDL swaps, goes with either of them; the other rungs are timed."""
    tests = {"f16pdl": "f16-pdl", "gates-pdl": "kda-lowrank", "conv-pdl": "conv-pdl"}[rung]
    env = {"SUITE_TIMED": S23_TIMED, "STUB_PYTEST_SECONDS": "0"}
    if why == "proof":  # every record written, the rung's tests fail
        env.update(STUB_PEROP=_s25_records(tmp_path), STUB_FAIL_MATCH=f"gpu-tests-{tests}.xml")
    else:
        env["STUB_PEROP"] = _s25_records(tmp_path, f16=rung != "f16pdl", kda=rung != "gates-pdl",
                                         conv=rung != "conv-pdl")
    log, calls = _lanes(tmp_path, "rungs25", "", extra_env=env)
    machine = tmp_path / "machine"
    out = {f"s25-{rung}"} | ({"s25-chain"} if rung != "gates-pdl" else set())
    assert f"decode-s25-{rung}: left out (its GPU tests failed, or their record gave no factor)" in log
    if "s25-chain" in out:
        assert "decode-s25-chain: left out (it needs both PDL swaps' proofs and records)" in log
    decodes = [c for c in calls if c.startswith("bench decode")]
    for name in S25:
        timed = [d for d in decodes if f"--vs {machine}/cuda-{name}.toml " in d]
        assert len(timed) == (0 if name in out else 1), (name, timed)
        assert (machine / f"cuda-{name}.toml").exists() == (name not in out), name
    assert sum(c.startswith("diagnose") for c in calls) == 1


def test_rungs25_makes_nothing_when_no_rung_has_its_proof_and_record(tmp_path):
    """No record at all: every rung said to be left out, and neither the rungs23 registry nor its diagnosis made."""
    env = {"SUITE_TIMED": S23_TIMED, "STUB_PYTEST_SECONDS": "0"}
    log, calls = _lanes(tmp_path, "rungs25", "", extra_env=env)
    for name in ("s25-conv-pdl", "s25-f16pdl", "s25-gates-pdl"):
        assert f"decode-{name}: left out (its GPU tests failed, or their record gave no factor)" in log
    assert not any(c.startswith(("diagnose", "bench decode")) or "side_stream=on" in c for c in calls)
    assert not any(c.startswith("swap") and "linear@Q4_K=cupy_rowwarp_pdl" in c for c in calls)
    assert not (tmp_path / "machine" / "cuda-s23-nones.toml").exists()


@pytest.mark.parametrize("failing", S25)
def test_rungs25_leaves_a_rung_out_when_its_captured_gate_fails(tmp_path, failing):
    env = {"SUITE_TIMED": S23_TIMED, "STUB_PYTEST_SECONDS": "0", "STUB_PEROP": _s25_records(tmp_path),
           "STUB_FAIL_CHECK": f"cuda-{failing}.toml"}
    log, calls = _lanes(tmp_path, "rungs25", "", extra_env=env)
    assert f"decode-{failing}: left out (the captured gate did not pass)" in log
    decodes = [c for c in calls if c.startswith("bench decode")]
    for name in S25:
        timed = [d for d in decodes if f"--vs {tmp_path / 'machine'}/cuda-{name}.toml " in d]
        assert len(timed) == (0 if name == failing else 1), (name, timed)


def test_rungs25_leaves_all_out_when_the_rungs23_registry_cannot_be_made(tmp_path):
    """A PDL pair of the rungs23 registry that its swap cannot prove: registry_selects removes the registry, and every
    rung is said to be left out, with no diagnosis, swap or pair of theirs."""
    env = {"SUITE_TIMED": S23_TIMED, "STUB_PYTEST_SECONDS": "0", "STUB_PEROP": _s25_records(tmp_path),
           "STUB_SWAP_REFUSE": "moe_experts=cupy_rowwarp_pdl"}
    log, calls = _lanes(tmp_path, "rungs25", "", extra_env=env)
    assert "s23-pdl: registry_selects:" in log
    assert ("decode-s25-chain, decode-s25-conv-pdl, decode-s25-f16pdl, decode-s25-gates-pdl: left out (the rungs23 "
            "registry") in log
    assert not any(c.startswith(("diagnose", "bench decode")) or "cuda-s25-" in c for c in calls)


def test_rungs25_forgets_what_it_did_over_another_base(tmp_path):
    """rebase: with the rungs' markers saying another base (as a first call whose base then moved would leave them),
    the shared diagnosis, the four captured gates and the four pairs are made again over the rungs23 registry."""
    env = {"SUITE_TIMED": S23_TIMED, "STUB_PYTEST_SECONDS": "0", "STUB_PEROP": _s25_records(tmp_path)}
    _lanes(tmp_path, "rungs25", "", extra_env=env)
    done = tmp_path / "machine" / "suite-done"
    for name in ("s25-base",) + S25:
        assert (done / f"decode-{name}.base").read_text().strip() == str(tmp_path / "machine" / "cuda-s23-nones.toml")
        (done / f"decode-{name}.base").write_text(str(tmp_path / "machine" / "cuda-s22-all.toml") + "\n")
    n = len((tmp_path / "sparkops.log").read_text().splitlines())
    log, calls = _lanes(tmp_path, "rungs25", "", extra_env=env)
    assert "decode-s25-f16pdl: its base is now cuda-s23-nones.toml, not cuda-s22-all.toml" in log
    again = calls[n:]
    assert sum(c.startswith("diagnose") and "diag-decode-s25-base.json" in c for c in again) == 1
    assert sum(c.startswith("check --model") and "k3-nano" in c for c in again) == 4
    assert sum(c.startswith("bench decode") for c in again) == 4


@pytest.mark.parametrize("no_win,now", [("cuda-s25-gates-pdl.toml", "s25-chain"),
                                        ("cuda-s25-gates-pdl.toml cuda-s25-chain.toml", "s25-f16pdl")])
def test_a_win_of_a_rungs25_rung_is_the_step_now(tmp_path, no_win, now):
    """rungs25's rungs are the newest of NOW_RUNGS, the chain first (it holds both PDL swaps): the first that won is
    the step the later stages time."""
    env = {"SUITE_TIMED": S23_TIMED, "STUB_PYTEST_SECONDS": "0", "STUB_PEROP": _s25_records(tmp_path),
           "STUB_NO_WIN": no_win}
    log, calls = _lanes(tmp_path, "rungs25 frontier131k", "", extra_env=env)
    reg = tmp_path / "machine" / f"cuda-{now}.toml"
    assert f"the step now: {reg}" in log
    assert any(c.startswith("bench decode") and "--depth 131072" in c and f"--registry {reg} --graph A " in c
               for c in calls)


def test_proofs25_runs_the_proofs_alone_and_the_f16_record_only_from_its_own_test(tmp_path):
    """Stage proofs25: the F16 PDL proof, the PDL short conv's and the fused gates' proof, no model made; the pytest
    stand-in writes
    perop-f16pdl only for a run of test_triton_linear.py that selects its side-by-side (-k pdl does; proof_prefetch's
    -k prefetch, on the same file, does not)."""
    records = _s25_records(tmp_path)
    diag = tmp_path / "machine" / "suite-diag"
    log, calls = _suite(tmp_path, "proofs25", extra_env={"STUB_PEROP": records})
    assert "] gpu-tests-f16-pdl (limit" in log and "] gpu-tests-kda-lowrank (limit" in log
    assert "] gpu-tests-conv-pdl (limit" in log and "unknown stage" not in log
    assert json.loads((diag / "perop-f16pdl-bfloat16.json").read_text())["per_token_seconds"]["triton_pdl"] == 100e-6
    assert json.loads((diag / "perop-convpdl-bfloat16.json").read_text())["per_token_seconds"]["triton_pdl"] == 40e-6
    assert (diag / "perop-kdalowrank-bfloat16.json").exists()
    assert not any(c.startswith(("synth", "swap", "bench", "diagnose")) for c in calls)
    (diag / "perop-f16pdl-bfloat16.json").unlink()
    run_env = {**os.environ, "SPARKOPS_PEROP_DIR": str(diag), "STUB_PEROP": records}
    subprocess.run([sys.executable, str(tmp_path / "stubs" / "perop_writers.py"), "-m", "pytest", "-k", "prefetch",
                    "tests/backends/test_triton_linear.py"], env=run_env, check=True)
    assert not (diag / "perop-f16pdl-bfloat16.json").exists()


def test_frontier131k_makes_and_times_session_23s_step_once_it_is_timed(tmp_path):
    """With SUITE_TIMED naming decode-s23-nones (session 23's win), a fresh machine makes that step by its swaps
    (the PDL kernels, fuse_low_rank and side_stream over session 22's) and times it at 131072, not session 22's."""
    env = {"SUITE_TIMED": S13D_TIMED + " decode-s22-all decode-s23-nones", "STUB_PYTEST_SECONDS": "0"}
    log, calls = _lanes(tmp_path, "frontier131k", "", extra_env=env)
    machine = tmp_path / "machine"
    s23 = machine / "cuda-s23-nones.toml"
    assert f"the step now: {s23}" in log, log[-2000:]
    assert any("engine fuse_low_rank=on side_stream=on" in c for c in calls)
    decodes = [c for c in calls if c.startswith("bench decode")]
    assert len(decodes) == 2 and f"--registry {s23} --graph A " in decodes[0]
    assert f"--registry {machine / 'cuda-s23-nones-iq1s.toml'} --graph A " in decodes[1]


def test_frontier131k_times_the_step_now_at_131072_for_both_mixes(tmp_path):
    """Session 22's step (made, not timed again) as one arm against the frontier at 131072, for the Q4_K 48B and then
    the IQ1_S one (synthesized once), each gated on its own model; the IQ1_S row with its experts sent to a kernel
    that reads IQ1_S (moe_experts@IQ1_S: the step's Q4_K expert kernels pass other types to the float32 path)."""
    env = {"SUITE_TIMED": S13D_TIMED + " decode-s22-all", "STUB_PYTEST_SECONDS": "0"}
    log, calls = _lanes(tmp_path, "frontier131k", "", extra_env=env)
    machine = tmp_path / "machine"
    s22, iq1s = machine / "cuda-s22-all.toml", machine / "cuda-s22-all-iq1s.toml"
    assert "unknown stage" not in log and f"the step now: {s22}" in log
    decodes = [c for c in calls if c.startswith("bench decode")]
    assert len(decodes) == 2 and all("--depth 131072" in c for c in decodes)
    assert f"--registry {s22} --graph A " in decodes[0] and f"--registry {iq1s} --graph A " in decodes[1]
    assert any(c.startswith("swap moe_experts@IQ1_S=triton_prefetch") and f"{iq1s}.new" in c for c in calls), calls
    assert "--vs" not in " ".join(decodes)
    assert f"--model {machine / 'k48-q4_k_m.gguf'} " in decodes[0]
    assert f"--model {machine / 'k48-iq1_s.gguf'} " in decodes[1]
    assert sum(c.startswith("synth --preset kimi-linear-48b-a3b --quant iq1_s") for c in calls) == 1


def _kernel_archive(tmp: Path, machine: Path, broken: bool = False) -> Path:
    """A kernels.tgz as pack_kernels makes it: the machine's two cache folders, by absolute path."""
    import tarfile

    src = tmp / "kcache-src"
    for sub, name in (("sparkops-triton-cache/abc", "k.cubin"), ("sparkops-cupy-cache", "m.cubin")):
        (src / sub).mkdir(parents=True, exist_ok=True)
        (src / sub / name).write_bytes(b"\x7fELF kernel")
    arc = tmp / "kernels.tgz"
    if broken:
        arc.write_bytes(b"not a tar archive")
        return arc
    with tarfile.open(arc, "w:gz") as t:
        for sub in ("sparkops-triton-cache", "sparkops-cupy-cache"):
            t.add(src / sub, arcname=str(machine / sub).lstrip("/"))
    return arc


def test_the_kernel_caches_are_restored_once_a_machine_and_packed_by_the_last_lane(tmp_path):
    """A carried kernels.tgz is unpacked at install on a fresh machine (the caches at the paths Triton's groups name),
    the lanes compile into TRITON_CACHE_DIR / CUPY_CACHE_DIR there, and the call's last lane packs both caches into
    $OUT/kernels.tgz for the next session; a second call on the same machine does not unpack again."""
    import tarfile

    machine = tmp_path / "machine"
    env = {"SUITE_KCACHE_FILE": str(_kernel_archive(tmp_path, machine))}
    log, _ = _lanes(tmp_path, "", "", extra_env=env)
    assert "kernel caches restored from" in log and ": 2 files" in log
    assert (machine / "sparkops-triton-cache" / "abc" / "k.cubin").read_bytes() == b"\x7fELF kernel"
    assert "kernel caches: 2 files packed into kernels.tgz" in log
    with tarfile.open(tmp_path / "out" / "kernels.tgz") as t:
        names = t.getnames()
    assert str(machine / "sparkops-triton-cache" / "abc" / "k.cubin").lstrip("/") in names
    assert str(machine / "sparkops-cupy-cache" / "m.cubin").lstrip("/") in names
    log2, _ = _lanes(tmp_path, "", "", extra_env=env)
    assert log2.count("kernel caches restored from") == log.count("kernel caches restored from") == 1


def test_a_damaged_kernel_archive_costs_only_the_compiles(tmp_path):
    machine = tmp_path / "machine"
    env = {"SUITE_KCACHE_FILE": str(_kernel_archive(tmp_path, machine, broken=True))}
    log, _ = _lanes(tmp_path, "", "", extra_env=env)
    assert "could not be unpacked (kcache.log); every kernel compiles cold" in log
    assert not (machine / "sparkops-triton-cache").exists() and not (tmp_path / "out" / "kernels.tgz").exists()



@pytest.mark.parametrize("made", [False, True])
def test_probe_timeline24_replays_session_23s_step_first_then_22s_and_the_rungs25_registries_made(tmp_path, made):
    """Session 23's step (made by swaps, SUITE_TIMED naming its row) is the comparison's base, session 22's follows;
    rungs25's registries join only where this machine made them; no pair is timed."""
    env = {"SUITE_TIMED": S13D_TIMED + " decode-s22-all decode-s23-nones", "STUB_PYTEST_SECONDS": "0"}
    machine = tmp_path / "machine"
    machine.mkdir()
    f16, gates = machine / "cuda-s25-f16pdl.toml", machine / "cuda-s25-gates-pdl.toml"
    chain = machine / "cuda-s25-chain.toml"
    if made:
        f16.write_text("")
        chain.write_text("")
    log, calls = _lanes(tmp_path, "probe_timeline24", "", extra_env=env)
    line = next(x for x in log.splitlines() if "] probe-timeline24 (limit" in x)
    s22, s23 = machine / "cuda-s22-all.toml", machine / "cuda-s23-nones.toml"
    want = f"--registry {s23} --registry {s22}" + (f" --registry {chain} --registry {f16}" if made else "") + \
        " --fill-registry"
    assert want in line and "--depth 0 " in line and str(gates) not in line
    assert not any(c.startswith("bench decode") for c in calls)


def _registry_archive(tmp: Path) -> Path:
    """A registries.tgz as pack_registries makes it: names relative to the machine's TMP."""
    import tarfile

    src = tmp / "rcache-src"
    src.mkdir()
    (src / "cuda-s23-nones.toml").write_text("# a registry\n")
    (src / "cuda-s23-nones.toml.base").write_text(str(tmp / "machine" / "cuda-s22-all.toml") + "\n")
    f = tmp / "registries.tgz"
    with tarfile.open(f, "w:gz") as t:
        for p in src.iterdir():
            t.add(p, arcname=p.name)
    return f


def test_carried_registries_are_restored_on_a_fresh_machine_checked_and_packed_again(tmp_path):
    """A carried registries.tgz is unpacked at install where the machine has made no registry, each one passed to
    bench/registry_keep.py (which keeps those whose plans hold on cuda), and the last lane packs the machine's
    registries with their .base files for the next session; a machine that has registries restores nothing."""
    import tarfile

    machine = tmp_path / "machine"
    env = {"SUITE_RCACHE_FILE": str(_registry_archive(tmp_path))}
    log, _ = _lanes(tmp_path, "", "", extra_env=env)
    assert "registries restored from" in log and (machine / "cuda-s23-nones.toml").exists()
    assert "registries: 1 packed into registries.tgz" in log
    with tarfile.open(tmp_path / "out" / "registries.tgz") as t:
        assert sorted(t.getnames()) == ["cuda-s23-nones.toml", "cuda-s23-nones.toml.base"]
    (machine / "cuda-s23-nones.toml").write_text("# made here since\n")
    log2, _ = _lanes(tmp_path, "", "", extra_env=env)
    assert log2.count("registries restored from") == 1  # the first call's line (the log is the machine's)
    assert (machine / "cuda-s23-nones.toml").read_text() == "# made here since\n"


def test_committed_registries_are_restored_when_the_call_carries_none(tmp_path):
    """A checkout is new each session (no .kcache): the committed archive (bench/carry/registries.tgz) is restored in
    its place; a carried .kcache/registries.tgz, when there is one, is taken before it."""
    machine = tmp_path / "machine"
    env = {"SUITE_RCACHE_COMMITTED": str(_registry_archive(tmp_path))}
    log, _ = _lanes(tmp_path, "", "", extra_env=env)
    assert f"registries restored from {tmp_path / 'registries.tgz'}" in log and (machine / "cuda-s23-nones.toml").exists()


def _s26_record(tmp_path) -> str:
    """STUB_PEROP for rungs26's record: the norm-router-experts chain under cupy_rowwarp_pdl (50 us a layer's worth a
    token: 1300) and the shared-first form (1250): x1.040."""
    return _records(tmp_path, expshared={"cupy_rowwarp_pdl": 1300e-6, "cupy_rowwarp_pdl_shared": 1250e-6})


@pytest.mark.parametrize("with_s25", [False, True])
def test_rungs26_times_the_shared_first_experts_over_session_23s_step_after_its_proof_and_captured_gate(tmp_path,
                                                                                                        with_s25):
    """Stage rungs26: session 23's step made by swaps, the shared-first experts' GPU tests (-k shared_first, which
    selects its side-by-side: the record), the swap over the step, the captured gate, then the pair forecast from the
    record on moe_experts. Its base's diagnosis is rungs25's when that stage made one of the same registry on this
    machine, else its own."""
    env = {"SUITE_TIMED": S23_TIMED, "STUB_PYTEST_SECONDS": "0",
           "STUB_PEROP": " ".join([_s26_record(tmp_path)] + ([_s25_records(tmp_path)] if with_s25 else [])),
           "STUB_NO_WIN": " ".join(f"cuda-{n}.toml" for n in S25)}  # session 23's step stays the step now
    log, calls = _lanes(tmp_path, ("rungs25 " if with_s25 else "") + "rungs26", "", extra_env=env)
    machine = tmp_path / "machine"
    s23, reg = machine / "cuda-s23-nones.toml", machine / "cuda-s26-exp-shared.toml"
    assert "] gpu-tests-exp-shared (limit" in log and "-k shared_first" in log, log[-3000:]
    assert any(c.startswith("swap moe_experts=cupy_rowwarp_pdl_shared") and f"{reg}.new" in c for c in calls)
    assert any(c.startswith("check --model") and f"--registry {reg} " in c and "--captured" in c for c in calls)
    decodes = [c for c in calls if c.startswith("bench decode") and f"--vs {reg} " in c]
    assert len(decodes) == 1 and f"--registry {s23} " in decodes[0], decodes
    assert "--changes moe_experts " in decodes[0] and "--expect moe_experts=1.040" in decodes[0]
    assert f"--prediction {machine}/suite-diag/diag-decode-s26-exp-shared.json" in decodes[0]
    own = [c for c in calls if c.startswith("diagnose") and "diag-decode-s26-exp-shared.json" in c]
    assert len(own) == (0 if with_s25 else 1), own
    if with_s25:
        assert "decode-s26-exp-shared: its base's diagnosis is diag-decode-s25-base's" in log


@pytest.mark.parametrize("stage, name, impl", [("rungs26", "s26-exp-shared", "cupy_rowwarp_pdl_shared"),
                                               ("rungs26w", "s26-exp-wide", "cupy_rowwarp_pdl_wide"),
                                               ("rungs27", "s27-exp-split", "cupy_rowwarp_pdl_split"),
                                               ("rungs27q", "s27-exp-q8", "cupy_rowwarp_pdl_q8")])
def test_an_experts_rung_is_left_out_without_its_record_and_nothing_of_it_is_made(tmp_path, stage, name, impl):
    env = {"SUITE_TIMED": S23_TIMED, "STUB_PYTEST_SECONDS": "0"}
    log, calls = _lanes(tmp_path, stage, "", extra_env=env)
    assert f"decode-{name}: left out (its GPU tests failed, or their record gave no factor)" in log
    assert not any(impl in c for c in calls)
    assert not (tmp_path / "machine" / f"cuda-{name}.toml").exists()


def test_proofs26_runs_the_proof_alone_and_a_rungs26_call_after_it_takes_its_verdict(tmp_path):
    env = {"SUITE_TIMED": S23_TIMED, "STUB_PYTEST_SECONDS": "0", "STUB_PEROP": _s26_record(tmp_path)}
    log, calls = _suite(tmp_path, "proofs26", extra_env=env)
    assert "] gpu-tests-exp-shared (limit" in log and "unknown stage" not in log
    assert (tmp_path / "machine" / "suite-diag" / "perop-expshared-bfloat16.json").exists()
    assert not any(c.startswith(("synth", "swap", "bench", "diagnose")) for c in calls)


def test_rungs26_goes_over_a_rungs25_rung_that_won_with_its_own_diagnosis(tmp_path):
    """A rungs25 rung that won is the step now: rungs26's pair is over it (the chain, the first of NOW_RUNGS's rungs25
    entries), with a diagnosis of that registry, not rungs25's of session 23's step."""
    env = {"SUITE_TIMED": S23_TIMED, "STUB_PYTEST_SECONDS": "0",
           "STUB_PEROP": " ".join([_s26_record(tmp_path), _s25_records(tmp_path)])}
    log, calls = _lanes(tmp_path, "rungs25 rungs26", "", extra_env=env)
    machine = tmp_path / "machine"
    decodes = [c for c in calls if c.startswith("bench decode") and "cuda-s26-exp-shared.toml" in c]
    assert len(decodes) == 1 and f"--registry {machine / 'cuda-s25-chain.toml'} " in decodes[0], decodes
    assert sum(c.startswith("diagnose") and "diag-decode-s26-exp-shared.json" in c for c in calls) == 1


def test_rungs26_then_rungs25_diagnose_session_23s_step_once(tmp_path):
    """rungs26 first (the next session's order): its diagnosis of session 23's step serves rungs25's rungs too."""
    env = {"SUITE_TIMED": S23_TIMED, "STUB_PYTEST_SECONDS": "0",
           "STUB_PEROP": " ".join([_s26_record(tmp_path), _s25_records(tmp_path)]),
           "STUB_NO_WIN": "cuda-s26-exp-shared.toml"}
    log, calls = _lanes(tmp_path, "rungs26 rungs25", "", extra_env=env)
    assert sum(c.startswith("diagnose") for c in calls) == 1, [c for c in calls if c.startswith("diagnose")]
    assert "is rungs25's base's too (diag-decode-s25-base.json)" in log
    assert sum(c.startswith("bench decode") and "--prediction" in c and "diag-decode-s25-base.json" in c
               for c in calls) == 4


def _s26w_record(tmp_path) -> str:
    """STUB_PEROP for rungs26w's record: the chain under cupy_rowwarp_pdl (1300) and the wide down (1200): x1.083."""
    return _records(tmp_path, expwide={"cupy_rowwarp_pdl": 1300e-6, "cupy_rowwarp_pdl_wide": 1200e-6})


@pytest.mark.parametrize("stage, name, impl, stem, k, text", [
    ("rungs26w", "s26-exp-wide", "cupy_rowwarp_pdl_wide", "expwide", "wide_down", "down's whole row"),
    ("rungs27", "s27-exp-split", "cupy_rowwarp_pdl_split", "expsplit", "split_down", "down as four warps"),
    ("rungs27q", "s27-exp-q8", "cupy_rowwarp_pdl_q8", "expq8", "q8_gate_up", "gate/up on Q8 activations"),
])
def test_an_experts_rung_times_its_form_over_session_23s_step_after_its_proof_and_captured_gate(tmp_path, stage, name,
                                                                                               impl, stem, k, text):
    """Stages rungs26w (the wide down) and rungs27 (the split down): session 23's step made by swaps, the form's GPU
    tests (-k K: the bits or closeness, the NaN and the side-by-side that writes its record), the swap over the step,
    the captured gate, the pair forecast from the record (1300 -> 1100 us a token: x1.182) on moe_experts, with its
    base's own diagnosis."""
    env = {"SUITE_TIMED": S23_TIMED, "STUB_PYTEST_SECONDS": "0",
           "STUB_PEROP": _records(tmp_path, **{stem: {"cupy_rowwarp_pdl": 1300e-6, impl: 1100e-6}})}
    log, calls = _lanes(tmp_path, stage, "", extra_env=env)
    machine = tmp_path / "machine"
    s23, reg = machine / "cuda-s23-nones.toml", machine / f"cuda-{name}.toml"
    tests = name.split("-", 1)[1]
    assert f"] gpu-tests-{tests} (limit" in log and f"-k {k}" in log, log[-3000:]
    assert any(c.startswith(f"swap moe_experts={impl}") and f"{reg}.new" in c for c in calls)
    assert any(c.startswith("check --model") and f"--registry {reg} " in c and "--captured" in c for c in calls)
    decodes = [c for c in calls if c.startswith("bench decode") and f"--vs {reg} " in c]
    assert len(decodes) == 1 and f"--registry {s23} " in decodes[0], decodes
    assert "--expect moe_experts=1.182" in decodes[0] and f"moe_experts={impl}: {text}" in decodes[0]
    assert f"--prediction {machine}/suite-diag/diag-decode-{name}.json" in decodes[0]
    assert sum(c.startswith("diagnose") and f"diag-decode-{name}.json" in c for c in calls) == 1


def test_a_won_wide_down_is_the_step_now_that_frontier131k_times(tmp_path):
    """decode-s26-exp-wide, once a win, heads NOW_RUNGS: frontier131k's rows at 131072 run its registry."""
    env = {"SUITE_TIMED": S23_TIMED, "STUB_PYTEST_SECONDS": "0", "STUB_PEROP": _s26w_record(tmp_path)}
    log, calls = _lanes(tmp_path, "rungs26w frontier131k", "", extra_env=env)
    machine = tmp_path / "machine"
    assert "unknown stage" not in log and f"the step now: {machine / 'cuda-s26-exp-wide.toml'}" in log, log[-2000:]
    rows = [c for c in calls if c.startswith("bench decode") and "--depth 131072" in c]
    assert rows and f"--registry {machine / 'cuda-s26-exp-wide.toml'} " in rows[0], rows


def test_frontier131k_leaves_the_iq1s_row_out_when_its_experts_swap_did_not_take(tmp_path):
    """A refused moe_experts@IQ1_S swap leaves the step's own selection in the registry (swap_into keeps the base): the
    row would time the Q4_K experts' float32 path under a name that says otherwise, so it is left out, said so."""
    env = {"SUITE_TIMED": S13D_TIMED + " decode-s22-all", "STUB_PYTEST_SECONDS": "0",
           "STUB_SWAP_REFUSE": "moe_experts@IQ1_S=triton_prefetch"}
    log, calls = _lanes(tmp_path, "frontier131k", "", extra_env=env)
    assert "decode131k-iq1s-now: left out (cuda-s22-all-iq1s.toml does not select moe_experts@IQ1_S" in log
    decodes = [c for c in calls if c.startswith("bench decode")]
    assert len(decodes) == 1 and "k48-q4_k_m.gguf" in decodes[0]


def test_the_next_sessions_plan_after_session_25(tmp_path):
    """The suite header's plan for the session after 25, on one GPU: `SUITE_SKIP="gpu-tests-f16-pdl"` and stages
    "rungs26 rungs25". The shared-first experts' proof and pair come first. The F16 PDL rung and the chain are left out
    (their proof skipped), the PDL short conv and the fused gates with PDL are timed, and session 23's step is
    diagnosed once for all three."""
    env = {"SUITE_TIMED": S23_TIMED, "STUB_PYTEST_SECONDS": "0", "SUITE_SKIP": "gpu-tests-f16-pdl",
           "STUB_PEROP": " ".join([_s26_record(tmp_path), _s25_records(tmp_path)]),
           "STUB_NO_WIN": "cuda-s26-exp-shared.toml cuda-s25-conv-pdl.toml cuda-s25-gates-pdl.toml"}
    log, calls = _lanes(tmp_path, "rungs26 rungs25", "", extra_env=env)
    machine = tmp_path / "machine"
    assert "unknown stage" not in log
    assert "decode-s25-f16pdl: left out" in log and "decode-s25-chain: left out" in log
    pairs = [c.split("--vs ")[1].split()[0] for c in calls if c.startswith("bench decode") and "--vs " in c]
    assert pairs == [str(machine / f"cuda-{n}.toml") for n in ("s26-exp-shared", "s25-conv-pdl", "s25-gates-pdl")]
    assert sum(c.startswith("diagnose") for c in calls) == 1
    assert log.index("] gpu-tests-exp-shared (limit") < log.index("] decode-s26-exp-shared (limit")


def _rung_timed_once(calls: list[str], machine: Path, name: str, pair: str, base: str, expect: str) -> str:
    """Rung decode-NAME's one pair: its swap made cuda-NAME.toml from PAIR, and one bench timed it over BASE with
    --expect EXPECT; that bench's command."""
    reg = machine / f"cuda-{name}.toml"
    assert any(c.startswith(f"swap {pair}") and f"{reg}.new" in c for c in calls), calls
    decodes = [c for c in calls if c.startswith("bench decode") and f"--vs {reg} " in c]
    assert len(decodes) == 1 and f"--registry {machine / base} " in decodes[0], decodes
    assert f"--expect {expect}" in decodes[0], decodes
    return decodes[0]


def test_the_next_sessions_plan_after_session_27(tmp_path):
    """Session 27's last call and the plan after it, on one GPU: "rungs28 probe_ncu_moe" times the Q8 hidden vector
    over session 23's step (the split down lost, the Q8 gate/up was none) after its proof, forecast from its record
    against cupy_rowwarp_pdl, and Nsight Compute then profiles one pass of the probe's 21 launches; then, with that
    rung named a winner, "frontier131k" times both 131072 rows under its registry."""
    _stubs_with_ncu(tmp_path)
    env = {"SUITE_TIMED": S23_TIMED, "STUB_PYTEST_SECONDS": "0",
           "STUB_PEROP": _records(tmp_path, expq8h={"cupy_rowwarp_pdl": 1300e-6, "cupy_rowwarp_pdl_q8": 1250e-6,
                                                    "cupy_rowwarp_pdl_q8_hidden": 1000e-6})}
    log, calls = _lanes(tmp_path, "rungs28 probe_ncu_moe", "", extra_env=env)
    machine = tmp_path / "machine"
    reg = machine / "cuda-s28-exp-q8h.toml"
    assert "unknown stage" not in log
    assert log.index("] gpu-tests-exp-q8h (limit") < log.index("] decode-s28-exp-q8h (limit") \
        < log.index("] probe-ncu-moe (limit")
    _rung_timed_once(calls, machine, "s28-exp-q8h", "moe_experts=cupy_rowwarp_pdl_q8_hidden", "cuda-s23-nones.toml",
                     "moe_experts=1.300")
    ncu = [c for c in calls if c.startswith("ncu ")]
    assert ncu and all("--launch-skip 31 --launch-count 31" in c and "moe_kernels.py" in c for c in ncu)
    # the plan after session 27: the same machine, decode-s28-exp-q8h now a winner, so frontier131k times the
    # 131072 rows (Q4_K, then IQ1_S over it) under its registry
    env = {**env, "SUITE_TIMED": S23_TIMED + " decode-s28-exp-q8h"}
    log, calls = _lanes(tmp_path, "frontier131k", "", extra_env=env)
    rows = [c for c in calls if c.startswith("bench decode") and "--depth 131072" in c]
    assert len(rows) == 2 and f"--registry {reg} " in rows[0], rows
    assert f"--registry {machine / 'cuda-s28-exp-q8h-iq1s.toml'} " in rows[1], rows


def test_a_suite_timed_naming_a_rung_that_lost_stops_the_call_before_anything_runs(tmp_path):
    """Session 27's second call named decode-s27-exp-split in SUITE_TIMED after it had lost in the first, on the same
    machine. The machine's ledger holds that pair's rows: the call stops at once, saying which rows and what to do,
    and runs nothing (no synthesis, no swap, no bench); the same export without the loser runs."""
    machine = tmp_path / "machine"
    (machine / "suite-bench").mkdir(parents=True)
    lost = {"id": "20261202-133154-31ded6", "date": "2026-12-02T13:31:54+00:00", "tier": "regression",
            "ratio": 0.937, "registry": "/tmp/cuda-s27-exp-split.toml (graph)",
            "figures": [{"label": "A", "registry": "/tmp/cuda-s23-nones.toml (graph)"},
                        {"label": "B", "registry": "/tmp/cuda-s27-exp-split.toml (graph)"}]}
    (machine / "suite-bench" / "ledger.jsonl").write_text(json.dumps(lost) + "\n")
    env = {"SUITE_TIMED": S23_TIMED + " decode-s27-exp-split"}
    log, calls = _lanes(tmp_path, "rungs27q", "", gpus=1, extra_env=env, ok=False)
    assert "SUITE_TIMED names decode-s27-exp-split" in log and "20261202-133154-31ded6 0.937 regression" in log
    assert "take decode-s27-exp-split out of it" in log
    assert not any(c.startswith(("synth", "swap", "bench")) for c in calls), calls
    log, _ = _lanes(tmp_path, "proofs27q", "", gpus=1, extra_env={"SUITE_TIMED": S23_TIMED})
    assert "] gpu-tests-exp-q8 (limit" in log and "decode-s27-exp-q8 (limit" not in log  # the proof alone


def _rung_over_the_q8_hidden_step(tmp_path: Path, stage: str, name: str, pair: str, expect: str, records: dict,
                                  before: tuple[str, ...] = (), no_win: str = "") -> None:
    """The plan after session 27's win: rungs28 makes the Q8 hidden step (then named a winner in SUITE_TIMED), each
    stage of BEFORE runs (STUB_NO_WIN: NO_WIN's registry times no win), then STAGE times rung decode-NAME (PAIR) over
    cuda-s28-exp-q8h.toml after its GPU tests and its registry's captured gate, with --expect EXPECT from RECORDS
    (stem -> columns, beside rungs28's own record) and --changes naming PAIR's op."""
    perops = [_records(tmp_path, expq8h={"cupy_rowwarp_pdl": 1300e-6, "cupy_rowwarp_pdl_q8_hidden": 1000e-6})]
    perops += [_records(tmp_path, **{stem: cols}) for stem, cols in records.items()]
    env = {"SUITE_TIMED": S23_TIMED, "STUB_PYTEST_SECONDS": "0", "STUB_PEROP": " ".join(perops)}
    _lanes(tmp_path, "rungs28", "", extra_env=env)
    env = {**env, "SUITE_TIMED": S23_TIMED + " decode-s28-exp-q8h", **({"STUB_NO_WIN": no_win} if no_win else {})}
    for other in before:
        _lanes(tmp_path, other, "", extra_env=env)
    log, calls = _lanes(tmp_path, stage, "", extra_env=env)
    assert "unknown stage" not in log
    tests = {"s29-linear-q8": "linear-q8", "s30-exp-q8p": "exp-q8p", "s31-exp-q8w": "exp-q8w",
             "s32-lmhead-x16": "x16"}[name]
    assert log.index(f"] gpu-tests-{tests} (limit") < log.index(f"] gate-captured-{name} (limit") \
        < log.index(f"] decode-{name} (limit")
    decode = _rung_timed_once(calls, tmp_path / "machine", name, pair, "cuda-s28-exp-q8h.toml", expect)
    assert f"--changes {pair.split('=')[0]}" in decode, decode


def test_rungs29_times_the_q8_gemv_over_the_q8_hidden_step_after_its_proof(tmp_path):
    """rungs29 times linear@Q4_K=cupy_rowwarp_pdl_q8 over the Q8 hidden step after gpu-tests-linear-q8, forecast from
    the record's PDL GEMV column against its Q8 one (1000 -> 800: x1.250), after its registry's captured gate."""
    _rung_over_the_q8_hidden_step(tmp_path, "rungs29", "s29-linear-q8", "linear@Q4_K=cupy_rowwarp_pdl_q8",
                                  "linear@Q4_K=1.250",
                                  {"rowq8": {"cupy_rowwarp_pdl": 1000e-6, "cupy_rowwarp_pdl_q8": 800e-6}})


def test_rungs30_times_the_pipelined_gate_up_over_the_q8_hidden_step_forecast_against_its_experts(tmp_path):
    """rungs30 times moe_experts=cupy_rowwarp_pdl_q8_pipe over the Q8 hidden step (the Q8 GEMV rung that lost is no
    base) after gpu-tests-exp-q8p, forecast from the record's Q8 hidden column (the step's experts) against its
    pipelined one (1000 -> 800: x1.250), not against cupy_rowwarp_pdl's (1300)."""
    _rung_over_the_q8_hidden_step(tmp_path, "rungs30", "s30-exp-q8p", "moe_experts=cupy_rowwarp_pdl_q8_pipe",
                                  "moe_experts=1.250",
                                  {"expq8p": {"cupy_rowwarp_pdl": 1300e-6, "cupy_rowwarp_pdl_q8_hidden": 1000e-6,
                                              "cupy_rowwarp_pdl_q8_pipe": 800e-6}})


def test_rungs31_times_the_pairs_gate_up_over_the_q8_hidden_step_not_over_the_pipe_that_lost(tmp_path):
    """rungs30's pipelined gate/up made and timed with no win first (the stub's tier "none" for its registry; it lost
    on the GPU), then rungs31 times moe_experts=cupy_rowwarp_pdl_q8_pairs over the Q8 hidden step, not over rungs30's
    registry, after gpu-tests-exp-q8w, forecast from its record's Q8 hidden column against its pairs column
    (1000 -> 900: x1.111)."""
    _rung_over_the_q8_hidden_step(tmp_path, "rungs31", "s31-exp-q8w", "moe_experts=cupy_rowwarp_pdl_q8_pairs",
                                  "moe_experts=1.111",
                                  {"expq8p": {"cupy_rowwarp_pdl_q8_hidden": 1000e-6,
                                              "cupy_rowwarp_pdl_q8_pipe": 1100e-6},
                                   "expq8w": {"cupy_rowwarp_pdl": 1300e-6, "cupy_rowwarp_pdl_q8_hidden": 1000e-6,
                                              "cupy_rowwarp_pdl_q8_pairs": 900e-6}},
                                  before=("rungs30",), no_win="cuda-s30-exp-q8p.toml")
    assert (tmp_path / "machine" / "cuda-s30-exp-q8p.toml").is_file()  # made: a base the suite passed over


def test_rungs32_times_the_x16_lm_head_over_the_q8_hidden_step_forecast_against_cupy_float(tmp_path):
    """rungs31's pairs form timed with no win first (session 29: 1.014, none), then rungs32 times
    linear@Q6_K=cupy_x16_pdl over the Q8 hidden step after gpu-tests-x16, forecast from its record's cupy_float column
    (the step's lm_head) against its x16 column (150 -> 100: x1.500), with --changes linear@Q6_K."""
    _rung_over_the_q8_hidden_step(tmp_path, "rungs32", "s32-lmhead-x16", "linear@Q6_K=cupy_x16_pdl",
                                  "linear@Q6_K=1.500",
                                  {"expq8w": {"cupy_rowwarp_pdl_q8_hidden": 1000e-6,
                                              "cupy_rowwarp_pdl_q8_pairs": 950e-6},
                                   "x16": {"cupy_float": 150e-6, "cupy_dp4a": 125e-6, "cupy_x16_pdl": 100e-6}},
                                  before=("rungs31",), no_win="cuda-s31-exp-q8w.toml")


def test_the_plan_after_session_29_times_131072_under_the_x16_step(tmp_path):
    """Session 29's plan: once decode-s32-lmhead-x16 is named a winner (SUITE_TIMED), it heads NOW_RUNGS over the
    pairs rung that tied, so frontier131k times both mixes at 131072 under its registry (the IQ1_S one with the IQ1_S
    experts' swap over it)."""
    records = {"x16": {"cupy_float": 150e-6, "cupy_x16_pdl": 100e-6}}
    _rung_over_the_q8_hidden_step(tmp_path, "rungs32", "s32-lmhead-x16", "linear@Q6_K=cupy_x16_pdl",
                                  "linear@Q6_K=1.500", records)
    env = {"SUITE_TIMED": S23_TIMED + " decode-s28-exp-q8h decode-s32-lmhead-x16", "STUB_PYTEST_SECONDS": "0"}
    log, calls = _lanes(tmp_path, "frontier131k", "", extra_env=env)
    step = tmp_path / "machine" / "cuda-s32-lmhead-x16.toml"
    assert "unknown stage" not in log and f"the step now: {step}" in log, log[-2000:]
    rows = [c for c in calls if c.startswith("bench decode") and "--depth 131072" in c]
    assert len(rows) == 2 and f"--registry {step} " in rows[0], rows
    assert f"--registry {step.with_name('cuda-s32-lmhead-x16-iq1s.toml')} " in rows[1], rows


#: session 29's records as the x16 step's rungs read them: the lm_head's (rungs32's forecast), the copy downs' chain
#: (the step's experts 1000 us a token, the copy down 900: x1.111; the pairs pair 950, with the copy down 850) and the
#: Q8 GEMVs' (the PDL GEMV 600, the Q8 one 500: x1.200)
_X16_STEP_RECORDS = {"x16": {"cupy_float": 150e-6, "cupy_x16_pdl": 100e-6},
                     "expq8c": {"cupy_rowwarp_pdl": 1300e-6, "cupy_rowwarp_pdl_q8_hidden": 1000e-6,
                                "cupy_rowwarp_pdl_q8_hidden_cp": 900e-6, "cupy_rowwarp_pdl_q8_pairs": 950e-6,
                                "cupy_rowwarp_pdl_q8_pairs_cp": 850e-6},
                     "rowq8": {"cupy_rowwarp_pdl": 600e-6, "cupy_rowwarp_pdl_q8": 500e-6},
                     "expq8l": {"cupy_rowwarp_pdl": 1300e-6, "cupy_rowwarp_pdl_q8_hidden": 1000e-6,
                                "cupy_rowwarp_pdl_q8_hidden_ld": 800e-6, "cupy_rowwarp_pdl_q8_pairs": 950e-6,
                                "cupy_rowwarp_pdl_q8_pairs_ld": 760e-6}}


def _from_snapshot(tmp_path: Path, key: str, build) -> Path:
    """A run directory holding what `build(run)` leaves in it, built once a worker for `key` and copied back before
    each use: the stages several tests run before their own (the x16 step's two calls took ~75% of each such test,
    session 37). It lives at a path fixed for the worker (tmp_path's parent, pytest's base temp: one a process, whose
    tests run one at a time), because the suite's files hold absolute paths: the copy must stand where it was made."""
    run, snap = tmp_path.parent / "dry-run", tmp_path.parent / f"dry-run-snapshot-{key}"
    if run.exists():
        shutil.rmtree(run)
    if snap.exists():
        shutil.copytree(snap, run, symlinks=True)
    else:
        run.mkdir()
        build(run)
        shutil.copytree(run, snap, symlinks=True)
    return run


#: rungs28's record (the Q8 hidden pair's proof), given to every call of the x16 step's plan
_EXPQ8H_RECORD = {"cupy_rowwarp_pdl": 1300e-6, "cupy_rowwarp_pdl_q8_hidden": 1000e-6}
#: the stems of the records the x16 step's two calls copy (rungs28's proof selects expq8h's side-by-side, rungs32's
#: x16's): the only records of a test that reach the machine they make (test_the_x16_step_copies_no_other_record)
_X16_STEP_STEMS = ("expq8h", "x16")


def _perops(where: Path, records: dict) -> str:
    """STUB_PEROP for the x16 step's plan: rungs28's record, then RECORDS (written under WHERE)."""
    return " ".join([_records(where, expq8h=_EXPQ8H_RECORD), _records(where, **records)])


def _x16_step(run: Path, records: dict) -> None:
    """rungs28, then rungs32 with rungs28's win named: the x16 step on RUN's machine, RECORDS given."""
    env = {"SUITE_TIMED": S23_TIMED, "STUB_PYTEST_SECONDS": "0", "STUB_PEROP": _perops(run, records)}
    _lanes(run, "rungs28", "", extra_env=env)
    _lanes(run, "rungs32", "", extra_env={**env, "SUITE_TIMED": S23_TIMED + " decode-s28-exp-q8h"})


def _over_the_x16_step(tmp_path: Path, stages: str, no_win: str = "", records: dict | None = None,
                       extra_env: dict[str, str] | None = None) -> tuple[str, list[str], Path]:
    """The plan after session 29's win: rungs28 and rungs32 make the x16 step (their wins named in SUITE_TIMED), then
    STAGES run in one call with _X16_STEP_RECORDS and RECORDS (STUB_NO_WIN: NO_WIN's registry times no win; EXTRA_ENV
    for that call alone): (log, calls, the stand-in machine). The first two calls come from a snapshot
    (_from_snapshot) made with the records of _X16_STEP_STEMS alone, the only ones they copy, and keyed on those (the
    tests' other records differ from test to test: a snapshot for all of them was made ~30 times a run); the machine is
    the snapshot's run directory's, not tmp_path's."""
    records = {**_X16_STEP_RECORDS, **(records or {})}
    own = {stem: records[stem] for stem in _X16_STEP_STEMS if stem in records}
    key = hashlib.sha256(json.dumps(own, sort_keys=True).encode()).hexdigest()[:12]
    run = _from_snapshot(tmp_path, f"x16-{key}", lambda run: _x16_step(run, own))
    env = {"SUITE_TIMED": S23_TIMED + " decode-s28-exp-q8h decode-s32-lmhead-x16", "STUB_PYTEST_SECONDS": "0",
           "STUB_PEROP": _perops(tmp_path, records), **({"STUB_NO_WIN": no_win} if no_win else {}),
           **(extra_env or {})}
    log, calls = _lanes(run, stages, "", extra_env=env)
    assert "unknown stage" not in log
    return log, calls, run / "machine"


def test_the_x16_step_copies_no_other_record(tmp_path):
    """_over_the_x16_step's snapshot holds the x16 step made with the records of _X16_STEP_STEMS alone: given a record
    for every stem the pytest stand-in knows, the step's two calls copy those stems' records and no other (none in
    the machine's directories, none in the results packed), and make the step."""
    writers = next(ast.literal_eval(n.value) for n in ast.parse(PEROP_WRITERS).body
                   if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "WRITERS")
    every = {stem: {"cupy_rowwarp_pdl": 1e-3, "cupy_float": 1e-3} for stem in writers if stem != "expq8h"}
    _x16_step(tmp_path, {**every, "x16": _X16_STEP_RECORDS["x16"]})
    assert (tmp_path / "machine" / "cuda-s32-lmhead-x16.toml").is_file()
    copies = [f.name for f in tmp_path.rglob("perop-*.json")]
    for archive in tmp_path.rglob("*.tgz"):
        listed = subprocess.run(["tar", "tzf", archive], capture_output=True, text=True, check=True).stdout
        copies += [Path(m).name for m in listed.split() if Path(m).name.startswith("perop-")]
    stems = {name.split("-")[1] for name in copies}
    assert stems == set(_X16_STEP_STEMS), sorted(copies)


def test_rungs33_times_the_copy_down_over_the_x16_step_forecast_against_its_experts(tmp_path):
    """rungs33 times moe_experts=cupy_rowwarp_pdl_q8_hidden_cp over the x16 step (cuda-s32-lmhead-x16.toml) after
    gpu-tests-exp-q8c (-k copy_down, which selects the side-by-side that writes its record) and its registry's
    captured gate, forecast from the record's Q8 hidden column (the step's experts) against its copy-down one
    (1000 -> 900: x1.111)."""
    log, calls, machine = _over_the_x16_step(tmp_path, "rungs33")
    assert "-k copy_down" in log
    assert log.index("] gpu-tests-exp-q8c (limit") < log.index("] gate-captured-s33-exp-q8c (limit") \
        < log.index("] decode-s33-exp-q8c (limit")
    decode = _rung_timed_once(calls, machine, "s33-exp-q8c", "moe_experts=cupy_rowwarp_pdl_q8_hidden_cp",
                              "cuda-s32-lmhead-x16.toml", "moe_experts=1.111")
    assert "--changes moe_experts " in decode, decode


def test_rungs34_stacks_the_pairs_copy_down_and_the_q8_gemvs_over_the_copy_down_that_won(tmp_path):
    """rungs33 then rungs34 in one call, the copy down winning (the stub's default): the stack is made over its
    registry with the pairs pair's copy-down form and the Q8 GEMVs in one swap, gated, and timed once with both
    forecasts: moe_experts from the copy downs' columns (900 -> 850: x1.059), linear@Q4_K from the Q8 GEMVs'
    record (600 -> 500: x1.200), after both proofs."""
    log, calls, machine = _over_the_x16_step(tmp_path, "rungs33 rungs34")
    assert "] gpu-tests-linear-q8 (limit" in log
    assert log.index("] decode-s33-exp-q8c (limit") < log.index("] gate-captured-s34-stack (limit") \
        < log.index("] decode-s34-stack (limit")
    decode = _rung_timed_once(calls, machine, "s34-stack",
                              "moe_experts=cupy_rowwarp_pdl_q8_pairs_cp linear@Q4_K=cupy_rowwarp_pdl_q8",
                              "cuda-s33-exp-q8c.toml", "moe_experts=1.059,linear@Q4_K=1.200")
    assert "--changes moe_experts,linear@Q4_K " in decode, decode


def test_rungs34_without_the_copy_down_stacks_the_pairs_gate_up_over_the_x16_step(tmp_path):
    """The copy down timed with no win (STUB_NO_WIN): rungs34 stacks cupy_rowwarp_pdl_q8_pairs (the warp down) and
    the Q8 GEMVs over the x16 step, its experts forecast from the Q8 hidden column against the pairs one
    (1000 -> 950: x1.053)."""
    _, calls, machine = _over_the_x16_step(tmp_path, "rungs33 rungs34", no_win="cuda-s33-exp-q8c.toml")
    _rung_timed_once(calls, machine, "s34-stack", "moe_experts=cupy_rowwarp_pdl_q8_pairs linear@Q4_K=cupy_rowwarp_pdl_q8",
                     "cuda-s32-lmhead-x16.toml", "moe_experts=1.053,linear@Q4_K=1.200")


def test_the_plan_after_session_30_times_the_stack_again_over_the_x16_step(tmp_path):
    """Session 30's stack won once (1.021) and then timed none (1.019): the checkout's ledger holds both, the newest
    none, so SUITE_TIMED naming decode-s34-stack is refused before anything runs (it lists winners only), and the
    plan's call, rungs34 without it, times the stack again over the x16 step."""
    env = {"SUITE_TIMED": S23_TIMED + " decode-s28-exp-q8h decode-s32-lmhead-x16 decode-s34-stack",
           "STUB_PYTEST_SECONDS": "0"}
    log, calls = _lanes(tmp_path, "frontier131k", "", extra_env=env, ok=False)
    assert "SUITE_TIMED names decode-s34-stack, but its newest rows on cuda-s34-stack.toml did not win" in log
    assert not any(c.startswith(("synth", "swap", "bench")) for c in calls), calls
    _, calls, machine = _over_the_x16_step(tmp_path, "rungs34")
    _rung_timed_once(calls, machine, "s34-stack", "moe_experts=cupy_rowwarp_pdl_q8_pairs linear@Q4_K=cupy_rowwarp_pdl_q8",
                     "cuda-s32-lmhead-x16.toml", "moe_experts=1.053,linear@Q4_K=1.200")


#: the Q8 GEMVs' record (rowq8) where the tall form wins (rungs39: the step's Q4_K GEMVs from then on)
_ROWQ8_TALL_RECORD = {"rowq8": {"cupy_rowwarp_pdl": 600e-6, "cupy_rowwarp_pdl_q8": 500e-6,
                                "cupy_rowwarp_pdl_q8_tall": 480e-6}}


def test_the_plan_after_session_34_probes_the_l2_then_times_the_shared_expert_over_the_q8_tall_step(tmp_path):
    """The header's first call on an H200: rungs39 (the Q8 tall GEMVs, a win in the stand-in's bench), the L2 probe,
    then rungs41 over the step rungs39 just made - the shared expert's rung is timed against cuda-s39-q8-tall.toml."""
    recs = _ROWQ8_TALL_RECORD
    log, calls, machine = _over_the_x16_step(tmp_path, "rungs39 probe_l2_hot rungs41", records=recs)
    assert log.index("] decode-s39-q8-tall (limit") < log.index("] probe-l2-hot (limit") \
        < log.index("] decode-s41-shared-side (limit")
    reg = machine / "cuda-s41-shared-side.toml"
    [decode] = [c for c in calls if c.startswith("bench decode") and f"--vs {reg} " in c]
    assert f"--registry {machine / 'cuda-s39-q8-tall.toml'} " in decode, decode


def test_the_plan_after_session_35_times_the_pdl_stack_then_gates_first(tmp_path):
    """The header's calls after session 35: rungs45 (the PDL stack, both proofs then the pair; a win in the
    stand-in's bench), then rungs42. A rung's base is the newest win older than it in NOW_RUNGS, never a newer rung's
    registry, so gates_first is timed against the x16 step even after the stack won, not over the stack."""
    log, calls, machine = _over_the_x16_step(tmp_path, "rungs45 rungs42",
                                             records={**_NORMWAIT_RECORD, **_ATTNPDL_RECORD, **_CONVKDA_RECORD})
    assert log.index("] gpu-tests-norm-wait (limit") < log.index("] decode-s45-pdl-stack (limit") \
        < log.index("] decode-s42-gates-conv (limit")
    stack = machine / "cuda-s45-pdl-stack.toml"
    [decode] = [c for c in calls if c.startswith("bench decode") and f"--vs {stack} " in c]
    assert "--expect add_rmsnorm=1.500,attention=1.250 " in decode, decode
    [decode] = [c for c in calls if c.startswith("bench decode") and f"--vs {machine / 'cuda-s42-gates-conv.toml'} " in c]
    assert f"--registry {machine / 'cuda-s32-lmhead-x16.toml'} " in decode and str(stack) not in decode, decode


def test_the_plan_after_session_36_times_the_pdl_stack_then_both_folds_over_it(tmp_path):
    """The header's calls after session 36: rungs45 (a win in the stand-in's bench), then rungs48, whose base is the
    newest win older than it in NOW_RUNGS: the stack's registry, so the folds are timed over the PDL stack, and their
    registry is made from it."""
    log, calls, machine = _over_the_x16_step(tmp_path, "rungs45 rungs48", records={
        **_NORMWAIT_RECORD, **_ATTNPDL_RECORD, **_MOENORM_RECORD, **_OPROJNORM_RECORD})
    assert log.index("] decode-s45-pdl-stack (limit") < log.index("] gpu-tests-moe-norm (limit") \
        < log.index("] decode-s48-norm-folds (limit")
    folds = machine / "cuda-s48-norm-folds.toml"
    [decode] = [c for c in calls if c.startswith("bench decode") and f"--vs {folds} " in c]
    assert f"--registry {machine / 'cuda-s45-pdl-stack.toml'} " in decode, decode
    assert Path(f"{folds}.base").read_text().strip() == str(machine / "cuda-s45-pdl-stack.toml")


def test_rungs36_times_the_fused_norm_and_router_over_the_step_now_with_the_engine_option(tmp_path):
    """Session 31's rung: after gpu-tests-norm-router (the fused kernel's and the engine option's GPU tests and the
    side-by-side that writes its record), add_rmsnorm_router=cupy_rowwarp_pdl swapped over the step now (the x16 step),
    [engine] fuse_router_norm set on that registry, its captured gate, then one pair forecast on moe_router from the
    record's chain column over the fused one (90 -> 80: x1.125), with --changes engine,add_rmsnorm_router."""
    log, calls, machine = _over_the_x16_step(
        tmp_path, "rungs36", records={"normrouter": {"chain": 90e-6, "cupy_rowwarp_pdl": 80e-6}})
    line = next(x for x in log.splitlines() if "] gpu-tests-norm-router (limit" in x)
    assert "tests/backends/test_cupy_add_rmsnorm_router.py tests/engine/test_router_norm_fusion.py" in line
    assert "test_cupy_timing.py::test_norm_router_fused_side_by_side" in line and "SPARKOPS_PEROP_DIR=" in line
    reg = machine / "cuda-s36-norm-router.toml"
    assert any(c.startswith("engine fuse_router_norm=on --registry") and f"{reg}.new" in c for c in calls), calls
    assert log.index("] gpu-tests-norm-router (limit") < log.index("] gate-captured-s36-norm-router (limit") \
        < log.index("] decode-s36-norm-router (limit")
    assert any(c.startswith("swap add_rmsnorm_router=cupy_rowwarp_pdl") and f"{reg}.swap.new" in c for c in calls)
    [decode] = [c for c in calls if c.startswith("bench decode") and f"--vs {reg} " in c]
    assert f"--registry {machine / 'cuda-s32-lmhead-x16.toml'} " in decode and "--expect moe_router=1.125 " in decode
    assert "--changes engine,add_rmsnorm_router " in decode, decode


def test_rungs35_times_the_down_loads_over_the_x16_step_when_the_stack_did_not_win(tmp_path):
    """The stack timed with no win (STUB_NO_WIN), then rungs35 times moe_experts=cupy_rowwarp_pdl_q8_hidden_ld over the
    x16 step after gpu-tests-exp-q8l (-k down_loads), forecast from its record's Q8 hidden column against its own
    (1000 -> 800: x1.250)."""
    log, calls, machine = _over_the_x16_step(tmp_path, "rungs34 rungs35", no_win="cuda-s34-stack.toml")
    assert "-k down_loads" in log
    assert log.index("] gpu-tests-exp-q8l (limit") < log.index("] decode-s35-exp-q8l (limit")
    _rung_timed_once(calls, machine, "s35-exp-q8l", "moe_experts=cupy_rowwarp_pdl_q8_hidden_ld",
                     "cuda-s32-lmhead-x16.toml", "moe_experts=1.250")


def test_rungs35_over_the_stack_that_won_changes_the_pairs_pairs_down(tmp_path):
    """The stack winning (the stub's default), rungs35 goes over its registry with the pairs pair's form of the down
    (cupy_rowwarp_pdl_q8_pairs_ld), forecast against the pairs column (950 -> 760: x1.250)."""
    _, calls, machine = _over_the_x16_step(tmp_path, "rungs34 rungs35", no_win="cuda-s33-exp-q8c.toml")
    _rung_timed_once(calls, machine, "s35-exp-q8l", "moe_experts=cupy_rowwarp_pdl_q8_pairs_ld", "cuda-s34-stack.toml",
                     "moe_experts=1.250")


def test_probe_timeline_now_replays_the_step_and_the_newer_rungs_registries(tmp_path):
    """The stack made and timed with no win (STUB_NO_WIN): the step now is still the x16 one, so probe_timeline_now
    replays it first and then the stack's registry (newer, made on this machine), not the older registries."""
    log, _, machine = _over_the_x16_step(tmp_path, "rungs34 probe_timeline_now", no_win="cuda-s34-stack.toml")
    line = next(ln for ln in log.splitlines() if "] probe-timeline-now (limit" in ln)
    step, stack = machine / "cuda-s32-lmhead-x16.toml", machine / "cuda-s34-stack.toml"
    assert f"--registry {step} --registry {stack} " in line, line
    assert "cuda-s28-exp-q8h.toml" not in line and "--depth 0 --replays 5" in line


def test_rungs34_is_left_out_without_the_q8_gemvs_record(tmp_path):
    """rungs34 forecasts both changes: with the Q8 GEMVs' proof failing (STUB_FAIL_MATCH on its -k), it says so and
    times nothing; the copy down's rung in the same call is timed all the same."""
    perops = " ".join([_records(tmp_path, expq8h={"cupy_rowwarp_pdl": 1300e-6, "cupy_rowwarp_pdl_q8_hidden": 1000e-6}),
                       _records(tmp_path, **_X16_STEP_RECORDS)])
    env = {"SUITE_TIMED": S23_TIMED + " decode-s28-exp-q8h decode-s32-lmhead-x16", "STUB_PYTEST_SECONDS": "0",
           "STUB_PEROP": perops, "STUB_FAIL_MATCH": "-k q8_gemv"}
    log, calls = _lanes(tmp_path, "rungs33 rungs34", "", extra_env=env)
    assert "decode-s34-stack: left out (its GPU tests failed, or their record gave no factor)" in log
    assert not any("cuda-s34-stack.toml" in c for c in calls), calls
    assert any(c.startswith("bench decode") and "cuda-s33-exp-q8c.toml" in c for c in calls)


def test_the_next_sessions_plan_after_session_28_proves_and_profiles_the_pairs_form_without_a_rung(tmp_path):
    """Session 28's plan for the next call: "proofs31 probe_ncu_moe" runs the pairs form's GPU tests (-k q8_pairs, its
    side-by-side with the padded x among them) and Nsight Compute's two passes over the probe's 21 launches, and
    times no rung: no swap, no synth, no bench."""
    _stubs_with_ncu(tmp_path)
    log, calls = _lanes(tmp_path, "proofs31 probe_ncu_moe", "", gpus=1,
                        extra_env={"SUITE_TIMED": S23_TIMED + " decode-s28-exp-q8h", "STUB_PYTEST_SECONDS": "0"})
    assert "unknown stage" not in log
    assert "] gpu-tests-exp-q8w (limit" in log and "-k q8_pairs" in log
    assert log.index("] gpu-tests-exp-q8w (limit") < log.index("] probe-ncu-moe (limit")
    ncu = [c for c in calls if c.startswith("ncu ")]
    assert len(ncu) == 2 and all("--launch-skip 31 --launch-count 31" in c for c in ncu), ncu  # the probe's launches now
    assert not any(c.startswith(("synth", "swap", "bench")) for c in calls), calls


def test_rungs27q_goes_over_a_split_down_that_won_with_the_q8_split_pair_forecast_against_the_split(tmp_path):
    """rungs27 then rungs27q: the split down wins (the stub's default), so the Q8 rung is timed over its registry with
    moe_experts=cupy_rowwarp_pdl_q8_split, forecast from the Q8 record's q8_split column against its split column
    (1100 -> 1000: x1.100), gate/up being all it changes."""
    records = " ".join([
        _records(tmp_path, expsplit={"cupy_rowwarp_pdl": 1300e-6, "cupy_rowwarp_pdl_split": 1100e-6}),
        _records(tmp_path, expq8={"cupy_rowwarp_pdl": 1300e-6, "cupy_rowwarp_pdl_q8": 1200e-6,
                                  "cupy_rowwarp_pdl_split": 1100e-6, "cupy_rowwarp_pdl_q8_split": 1000e-6})])
    env = {"SUITE_TIMED": S23_TIMED, "STUB_PYTEST_SECONDS": "0", "STUB_PEROP": records}
    log, calls = _lanes(tmp_path, "rungs27 rungs27q", "", extra_env=env)
    machine = tmp_path / "machine"
    reg = machine / "cuda-s27-exp-q8.toml"
    assert "unknown stage" not in log
    assert any(c.startswith("swap moe_experts=cupy_rowwarp_pdl_q8_split") and f"{reg}.new" in c for c in calls)
    decodes = [c for c in calls if c.startswith("bench decode") and f"--vs {reg} " in c]
    assert len(decodes) == 1 and f"--registry {machine / 'cuda-s27-exp-split.toml'} " in decodes[0], decodes
    assert "--expect moe_experts=1.100" in decodes[0] and "with the split down of the step" in decodes[0]


def test_a_fresh_machine_makes_the_step_now_by_its_swaps_before_a_rung_over_it(tmp_path):
    """Session 32's trap: a fresh machine made session 23's step but not the x16 step SUITE_TIMED named, and rungs34
    timed the stack over cuda-s23-nones.toml. Now rungs34 alone, first on the machine, makes the Q8 hidden registry
    over session 23's step and the x16 one over it (their swaps, no bench: both are SUITE_TIMED) and times the stack
    over the x16 step, its base and nothing older."""
    perops = " ".join([_records(tmp_path, expq8h={"cupy_rowwarp_pdl": 1300e-6, "cupy_rowwarp_pdl_q8_hidden": 1000e-6}),
                       _records(tmp_path, **_X16_STEP_RECORDS)])
    env = {"SUITE_TIMED": S23_TIMED + " decode-s28-exp-q8h decode-s32-lmhead-x16", "STUB_PYTEST_SECONDS": "0",
           "STUB_PEROP": perops}
    log, calls = _lanes(tmp_path, "rungs34", "", extra_env=env)
    machine = tmp_path / "machine"
    q8h, x16 = machine / "cuda-s28-exp-q8h.toml", machine / "cuda-s32-lmhead-x16.toml"
    assert "decode-s28-exp-q8h won in an earlier call; its registry made again over cuda-s23-nones.toml" in log
    assert "decode-s32-lmhead-x16 won in an earlier call; its registry made again over cuda-s28-exp-q8h.toml" in log
    swaps = [c for c in calls if c.startswith("swap ")]
    made_q8h = next(i for i, c in enumerate(swaps) if c.startswith("swap moe_experts=cupy_rowwarp_pdl_q8_hidden ")
                    and f"{q8h}.new" in c)
    made_x16 = next(i for i, c in enumerate(swaps) if c.startswith("swap linear@Q6_K=cupy_x16_pdl") and f"{x16}.new" in c)
    assert made_q8h < made_x16
    assert not any(c.startswith("bench decode") and (f"--vs {q8h} " in c or f"--vs {x16} " in c) for c in calls)
    _rung_timed_once(calls, machine, "s34-stack", "moe_experts=cupy_rowwarp_pdl_q8_pairs linear@Q4_K=cupy_rowwarp_pdl_q8",
                     "cuda-s32-lmhead-x16.toml", "moe_experts=1.053,linear@Q4_K=1.200")
    assert not any(c.startswith("bench decode") and "--registry " + str(machine / "cuda-s23-nones.toml") + " " in c
                   for c in calls), calls


def test_a_rung_is_refused_when_the_step_now_cannot_be_made_and_no_older_step_stands_in(tmp_path):
    """The x16 lm_head's swap refused on this machine (STUB_SWAP_REFUSE): rungs34 says the x16 step was not made and
    times nothing; no bench runs over the Q8 hidden step or session 23's in its place."""
    perops = " ".join([_records(tmp_path, expq8h={"cupy_rowwarp_pdl": 1300e-6, "cupy_rowwarp_pdl_q8_hidden": 1000e-6}),
                       _records(tmp_path, **_X16_STEP_RECORDS)])
    env = {"SUITE_TIMED": S23_TIMED + " decode-s28-exp-q8h decode-s32-lmhead-x16", "STUB_PYTEST_SECONDS": "0",
           "STUB_PEROP": perops, "STUB_SWAP_REFUSE": "linear@Q6_K=cupy_x16_pdl"}
    log, calls = _lanes(tmp_path, "rungs34", "", extra_env=env)
    assert "rungs34: decode-s32-lmhead-x16's registry was not made" in log
    assert not any(c.startswith("bench decode") for c in calls), calls
    assert not any("cuda-s34-stack.toml" in c for c in calls), calls


def test_now_pairs_names_each_rungs_own_swaps(tmp_path):
    """now_pairs, the recipe now_chain remakes a won rung's registry by, against the swaps each rung's own function
    made in the dry runs above: every rung of NOW_RUNGS after session 25's has one, session 24's and 25's have none."""
    script = (f"source <(sed -n '/^timed()/p; /^NOW_RUNGS=(/,/^)/p; /^now_pairs() {{/,/^}}/p' {SUITE}); "
              "for p in \"${NOW_RUNGS[@]}\"; do r=${p%%=*}; [ $r = decode-s23-nones ] && break; "
              "echo \"$r: $(now_pairs $r || echo NONE)\"; done")
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True,
                         env={**os.environ, "SUITE_TIMED": "decode-s34-stack", "DONE": str(tmp_path)}).stdout
    got = dict(line.split(": ", 1) for line in out.strip().splitlines())
    assert got["decode-s32-lmhead-x16"] == "linear@Q6_K=cupy_x16_pdl"
    assert got["decode-s34-stack"] == "moe_experts=cupy_rowwarp_pdl_q8_pairs linear@Q4_K=cupy_rowwarp_pdl_q8"
    assert got["decode-s35-exp-q8l"] == "moe_experts=cupy_rowwarp_pdl_q8_pairs_ld"  # the stack is timed here
    assert got["decode-s27-exp-q8"] == "moe_experts=cupy_rowwarp_pdl_q8"
    assert got["decode-s36-norm-router"] == "add_rmsnorm_router=cupy_rowwarp_pdl + fuse_router_norm=on"
    assert got["decode-s25-chain"] == got["decode-s24-gates"] == "NONE"
    assert got["decode-s37-router-sorted"] == "moe_router=cupy_rowwarp_pdl_sorted"
    assert got["decode-s40-conv-kda"] == "short_conv_kda_norm=triton_split_pdl + fuse_conv_kda=on"
    assert got["decode-s41-shared-side"] == "+ side_stream=on shared_expert_side=on"  # engine options alone
    assert got["decode-s42-gates-conv"] == \
        "short_conv_kda_norm=triton_split_pdl + side_stream=on gates_first=on fuse_conv_kda=on"
    assert got["decode-s43-norm-wait"] == "add_rmsnorm=triton_pdl_wait"
    assert got["decode-s44-attn-pdl"] == "attention=cupy_splitk_bf16_deep_pdl"
    assert got["decode-s45-pdl-stack"] == "add_rmsnorm=triton_pdl_wait attention=cupy_splitk_bf16_deep_pdl"
    assert got["decode-s46-moe-norm"] == "moe_experts_add_rmsnorm=cupy_rowwarp_pdl_q8_hidden_norm + fuse_moe_norm=on"
    assert got["decode-s47-oproj-norm"] == "linear_add_rmsnorm=cupy_rowwarp_pdl_norm + fuse_oproj_norm=on"
    assert got["decode-s48-norm-folds"] == ("moe_experts_add_rmsnorm=cupy_rowwarp_pdl_q8_hidden_norm linear_add_rmsnorm="
                                            "cupy_rowwarp_pdl_norm + fuse_moe_norm=on fuse_oproj_norm=on")
    # every rung after session 25's has one: a new rung of NOW_RUNGS needs its line in now_pairs
    assert [r for r, p in got.items() if p == "NONE" and not r.startswith(("decode-s24", "decode-s25"))] == []
    text = SUITE.read_text()
    head, rest = text.split("now_pairs() {", 1)
    elsewhere = head + rest.split("\n}\n", 1)[1]  # the suite without now_pairs itself
    for rung, pairs in got.items():  # each recipe's implementation is one its rung function swaps in too
        for pair in pairs.replace("+", " ").split():  # "+ OPTIONS" alone: a rung of [engine] options only
            if pair != "NONE" and not pair.endswith("=on"):
                assert pair.split("=", 1)[1] in elsewhere, (rung, pair)


def test_rungs37_times_the_sorted_router_over_the_x16_step_forecast_against_the_pdl_router(tmp_path):
    """Session 32's rung: after gpu-tests-router-sorted (-k sorted over the router's GPU tests and the side-by-side that
    writes its record), moe_router=cupy_rowwarp_pdl_sorted swapped over the step now (the x16 step), its captured gate,
    then one pair forecast from the record's cupy_rowwarp_pdl column over its own (180 -> 160: x1.125)."""
    log, calls, machine = _over_the_x16_step(
        tmp_path, "rungs37", records={"routersort": {"cupy_rowwarp_pdl": 180e-6, "cupy_rowwarp_pdl_sorted": 160e-6}})
    line = next(x for x in log.splitlines() if "] gpu-tests-router-sorted (limit" in x)
    assert "-k sorted tests/backends/test_cupy_moe_router.py tests/backends/test_cupy_timing.py" in line, line
    assert log.index("] gpu-tests-router-sorted (limit") < log.index("] gate-captured-s37-router-sorted (limit") \
        < log.index("] decode-s37-router-sorted (limit")
    decode = _rung_timed_once(calls, machine, "s37-router-sorted", "moe_router=cupy_rowwarp_pdl_sorted",
                              "cuda-s32-lmhead-x16.toml", "moe_router=1.125")
    assert "--changes moe_router " in decode, decode


def test_rungs38_is_left_out_over_a_step_without_the_q8_gemvs_and_times_over_the_stack_that_won(tmp_path):
    """rungs38 changes how the Q8 GEMVs' short shapes are launched, so its base must run them: over the x16 step
    (linear@Q4_K=cupy_rowwarp_pdl) it says so and times nothing; after rungs34's stack wins (the stub's default) it
    swaps linear@Q4_K=cupy_rowwarp_pdl_q8_shortplain over the stack, after gpu-tests-q8-shortplain, forecast from the
    record's PDL column over the plain one (240 -> 200: x1.200)."""
    recs = {"q8plain": {"cupy_rowwarp_pdl_q8": 240e-6, "cupy_rowwarp_pdl_q8_shortplain": 200e-6}}
    for sub in ("a", "b"):
        (tmp_path / sub).mkdir()
    log, calls, _ = _over_the_x16_step(tmp_path / "a", "rungs38", records=recs)
    assert "decode-s38-q8-shortplain: left out (the step now, cuda-s32-lmhead-x16.toml, does not run the Q8 GEMVs" in log
    assert not any("cuda-s38-q8-shortplain.toml" in c for c in calls), calls
    log, calls, machine = _over_the_x16_step(tmp_path / "b", "rungs34 rungs38", records=recs,
                                             no_win="cuda-s33-exp-q8c.toml")
    assert "-k shortplain tests/backends/test_cupy_pdl.py tests/backends/test_cupy_timing.py" in log
    decode = _rung_timed_once(calls, machine, "s38-q8-shortplain", "linear@Q4_K=cupy_rowwarp_pdl_q8_shortplain",
                              "cuda-s34-stack.toml", "linear@Q4_K=1.200")
    assert "--changes linear@Q4_K " in decode, decode


def test_rungs39_times_the_q8_tall_gemvs_over_the_x16_step_forecast_against_its_float_gemvs(tmp_path):
    """Session 32's rung from the timelines: linear@Q4_K=cupy_rowwarp_pdl_q8_tall over the x16 step (whose Q4_K GEMVs
    are cupy_rowwarp_pdl), after gpu-tests-q8-tall, forecast from the rowq8 record's cupy_rowwarp_pdl column over the
    new one (600 -> 480: x1.250); over the stack that won it is forecast against the stack's cupy_rowwarp_pdl_q8
    (500 -> 480: x1.042)."""
    recs = _ROWQ8_TALL_RECORD
    for sub in ("a", "b"):
        (tmp_path / sub).mkdir()
    log, calls, machine = _over_the_x16_step(tmp_path / "a", "rungs39", records=recs)
    assert '-k q8_tall or q8_gemv_side_by_side tests/backends/test_cupy_pdl.py' in log
    decode = _rung_timed_once(calls, machine, "s39-q8-tall", "linear@Q4_K=cupy_rowwarp_pdl_q8_tall",
                              "cuda-s32-lmhead-x16.toml", "linear@Q4_K=1.250")
    assert "--changes linear@Q4_K " in decode, decode
    _, calls, machine = _over_the_x16_step(tmp_path / "b", "rungs34 rungs39", records=recs,
                                           no_win="cuda-s33-exp-q8c.toml")
    _rung_timed_once(calls, machine, "s39-q8-tall", "linear@Q4_K=cupy_rowwarp_pdl_q8_tall", "cuda-s34-stack.toml",
                     "linear@Q4_K=1.042")


#: rungs40's record as its proof's side-by-side writes it: the step's chain (short_conv then kda_norm) 250 us a token,
#: the fused forms 210 (triton_split) and 200 (triton_split_pdl, the rung's): x1.250
_CONVKDA_RECORD = {"convkda": {"chain": 250e-6, "triton_split": 210e-6, "triton_split_pdl": 200e-6}}


def test_rungs40_times_the_fused_conv_and_recurrence_over_the_step_now_with_the_engine_option(tmp_path):
    """The fused conv rung: after gpu-tests-conv-kda (the fused op's and the engine option's GPU tests, the first
    writing perop-convkda), short_conv_kda_norm=triton_split_pdl swapped over the step now (the x16 step), [engine]
    fuse_conv_kda set on that registry, its captured gate, then one pair with --changes engine,short_conv_kda_norm,
    forecast from the record's chain column over the PDL fused one (250 -> 200: x1.250) on short_conv and kda_norm
    alike, the two ops the fused one replaces (bench's Amdahl then forecasts their sum by that factor)."""
    log, calls, machine = _over_the_x16_step(tmp_path, "rungs40", records=_CONVKDA_RECORD)
    line = next(x for x in log.splitlines() if "] gpu-tests-conv-kda (limit" in x)
    assert "tests/backends/test_triton_short_conv_kda_norm.py tests/engine/test_conv_kda_fusion.py" in line, line
    assert "SPARKOPS_PEROP_DIR=" in line and "-m gpu" in line and " -k " not in line, line
    assert (machine / "suite-diag" / "perop-convkda-bfloat16.json").exists()
    assert log.index("] gpu-tests-conv-kda (limit") < log.index("] diagnose-decode-s40-conv-kda (limit") \
        < log.index("] swap-s40-conv-kda (limit") < log.index("] gate-captured-s40-conv-kda (limit") \
        < log.index("] decode-s40-conv-kda (limit")
    reg, step = machine / "cuda-s40-conv-kda.toml", machine / "cuda-s32-lmhead-x16.toml"
    swap = next(i for i, c in enumerate(calls) if c.startswith("swap short_conv_kda_norm=triton_split_pdl ")
                and f"{reg}.swap.new" in c)
    engine = next(i for i, c in enumerate(calls) if c.startswith("engine fuse_conv_kda=on --registry")
                  and f"{reg}.new" in c)
    assert swap < engine, calls
    assert reg.is_file() and Path(f"{reg}.base").read_text().strip() == str(step)
    assert any(c.startswith("check --model") and f"--registry {reg} " in c and "--captured" in c for c in calls)
    diag = [c for c in calls if c.startswith("diagnose") and "diag-decode-s40-conv-kda.json" in c]
    assert len(diag) == 1 and f"--registry {step} " in diag[0], diag
    [decode] = [c for c in calls if c.startswith("bench decode") and f"--vs {reg} " in c]
    assert f"--registry {step} " in decode and "--changes engine,short_conv_kda_norm " in decode, decode
    assert "--expect short_conv=1.250,kda_norm=1.250 " in decode, decode
    assert f"--prediction {machine}/suite-diag/diag-decode-s40-conv-kda.json " in decode, decode
    assert "[engine] fuse_conv_kda with short_conv_kda_norm=triton_split_pdl" in decode
    # the stand-in step selects the record's chain (short_conv=triton, kda_norm=triton_split_pdl): no word on it
    assert "forecast's chain" not in log


def test_rungs40_says_when_the_step_runs_another_chain_than_the_record_s(tmp_path):
    """Over a step whose short conv is not the record's chain's (the x16 step made, then its short conv set to
    triton_pdl by the swap stand-in) the rung is still timed, and the log says its forecast rests on a chain the step
    does not run."""
    _, _, machine = _over_the_x16_step(tmp_path, "proofs40", records=_CONVKDA_RECORD)
    step = machine / "cuda-s32-lmhead-x16.toml"
    subprocess.run([sys.executable, str(machine.parent / "stubs" / "stub_swap.py"), "short_conv=triton_pdl",
                    "--registry", str(step)], check=True)
    env = {"SUITE_TIMED": S23_TIMED + " decode-s28-exp-q8h decode-s32-lmhead-x16", "STUB_PYTEST_SECONDS": "0"}
    log, calls = _lanes(machine.parent, "rungs40", "", extra_env=env)
    assert "gpu-tests-conv-kda: done earlier on this machine (rc=0), skipped" in log
    assert "decode-s40-conv-kda: the forecast's chain (short_conv=triton kda_norm=triton_split_pdl" in log
    reg = machine / "cuda-s40-conv-kda.toml"
    [decode] = [c for c in calls if c.startswith("bench decode") and f"--vs {reg} " in c]
    assert f"--registry {step} " in decode and "--expect short_conv=1.250,kda_norm=1.250 " in decode, decode


@pytest.mark.parametrize("why", ["no record", "failed"])
def test_rungs40_is_left_out_without_its_record_or_its_proof_and_nothing_of_it_is_made(tmp_path, why):
    """No perop-convkda record (the side-by-side did not write it), or the proof failing with its record written
    (STUB_FAIL_MATCH on the engine test's file): the rung says so and makes nothing - no diagnosis, swap, engine
    option, gate or bench of its own."""
    extra = {"STUB_FAIL_MATCH": "tests/engine/test_conv_kda_fusion.py"} if why == "failed" else {}
    perops = " ".join([_records(tmp_path, expq8h={"cupy_rowwarp_pdl": 1300e-6, "cupy_rowwarp_pdl_q8_hidden": 1000e-6}),
                       _records(tmp_path, **_X16_STEP_RECORDS)]
                      + ([_records(tmp_path, **_CONVKDA_RECORD)] if why == "failed" else []))
    env = {"SUITE_TIMED": S23_TIMED + " decode-s28-exp-q8h decode-s32-lmhead-x16", "STUB_PYTEST_SECONDS": "0",
           "STUB_PEROP": perops, **extra}
    log, calls = _lanes(tmp_path, "rungs40", "", extra_env=env)
    assert "unknown stage" not in log and "] gpu-tests-conv-kda (limit" in log
    assert "decode-s40-conv-kda: left out (its GPU tests failed, or their record gave no factor)" in log
    assert not any("short_conv_kda_norm" in c or "fuse_conv_kda" in c or "s40-conv-kda" in c for c in calls), calls
    assert not (tmp_path / "machine" / "cuda-s40-conv-kda.toml").exists()


def test_rungs41_times_the_shared_expert_on_the_side_stream_over_the_step_now(tmp_path):
    """Session 34's rung: after gpu-tests-shared-side (the engine option's GPU tests), the step now (the x16 step) with
    [engine] side_stream and shared_expert_side on - no swap: no new op - its captured gate, then one pair with
    --changes engine forecast as moe_experts x1.125 (9 experts' rows to 8)."""
    log, calls, machine = _over_the_x16_step(tmp_path, "rungs41")
    line = next(x for x in log.splitlines() if "] gpu-tests-shared-side (limit" in x)
    assert "tests/engine/test_shared_expert_side.py" in line and "-m gpu" in line, line
    assert log.index("] gpu-tests-shared-side (limit") < log.index("] diagnose-decode-s41-shared-side (limit") \
        < log.index("] gate-captured-s41-shared-side (limit") < log.index("] decode-s41-shared-side (limit")
    reg, step = machine / "cuda-s41-shared-side.toml", machine / "cuda-s32-lmhead-x16.toml"
    assert any(c.startswith("engine side_stream=on shared_expert_side=on --registry") and f"{reg}.new" in c
               for c in calls), calls
    assert not any(c.startswith("swap ") and "cuda-s41-shared-side" in c for c in calls), calls
    assert reg.is_file() and Path(f"{reg}.base").read_text().strip() == str(step)
    [decode] = [c for c in calls if c.startswith("bench decode") and f"--vs {reg} " in c]
    assert f"--registry {step} " in decode and "--changes engine " in decode, decode
    assert "--expect moe_experts=1.125 " in decode and "[engine] shared_expert_side" in decode, decode
    assert f"--prediction {machine}/suite-diag/diag-decode-s41-shared-side.json " in decode, decode
    forecast = machine / "suite-diag" / "forecast-s41-shared-side.json"  # critical_path.py on the committed timeline
    assert f"--forecast {forecast} " in decode, decode
    doc = json.loads(forecast.read_text())
    assert doc["depth"] == 0 and doc["all"]["ratio"] == pytest.approx(1.039, abs=0.001), doc["all"]


def test_rungs42_times_gates_first_with_the_fused_conv_forecast_on_the_critical_path(tmp_path):
    """Session 34's second rung: after gpu-tests-gates-first and gpu-tests-conv-kda (its record: the fused op x1.250),
    short_conv_kda_norm=triton_split_pdl swapped over the step now, [engine] side_stream, gates_first and fuse_conv_kda
    set, its captured gate, then one pair: --expect from the record on short_conv and kda_norm, --forecast from
    critical_path.py on the committed timeline (x1.027 at a fused tail of 7 us)."""
    log, calls, machine = _over_the_x16_step(tmp_path, "rungs42", records=_CONVKDA_RECORD)
    assert log.index("] gpu-tests-gates-first (limit") < log.index("] gpu-tests-conv-kda (limit") \
        < log.index("] swap-s42-gates-conv (limit") < log.index("] gate-captured-s42-gates-conv (limit") \
        < log.index("] decode-s42-gates-conv (limit")
    reg = machine / "cuda-s42-gates-conv.toml"
    assert any(c.startswith("engine side_stream=on gates_first=on fuse_conv_kda=on --registry") and f"{reg}.new" in c
               for c in calls), calls
    [decode] = [c for c in calls if c.startswith("bench decode") and f"--vs {reg} " in c]
    assert f"--registry {machine / 'cuda-s32-lmhead-x16.toml'} " in decode, decode
    assert "--changes engine,short_conv_kda_norm " in decode and "--expect short_conv=1.250,kda_norm=1.250 " in decode
    forecast = machine / "suite-diag" / "forecast-s42-gates-conv.json"
    assert f"--forecast {forecast} " in decode, decode
    assert json.loads(forecast.read_text())["all"]["ratio"] == pytest.approx(1.027, abs=0.001)


#: the o_proj-and-norm pair under the step's norm and the dependent one, and the GEMV alone: the norm's own time in
#: the chain 60 -> 40 us a token, x1.500
_NORMWAIT_RECORD = {"normwait": {"triton_pdl": 160e-6, "triton_pdl_wait": 140e-6, "no norm": 100e-6}}


def test_rungs43_times_the_dependent_norm_forecast_from_its_own_time_in_the_chain(tmp_path):
    """Session 35's rung: after gpu-tests-norm-wait (-k over the norm's bit tests and the side-by-side that writes its
    record), add_rmsnorm=triton_pdl_wait swapped over the step now, its captured gate, then one pair: --expect from
    the record less its GEMV-alone column (60 -> 40 us: x1.500, not the pairs' 160 -> 140), --forecast from
    critical_path.py with that factor on the norms' tails in the committed timeline (x1.024)."""
    log, calls, machine = _over_the_x16_step(tmp_path, "rungs43", records=_NORMWAIT_RECORD)
    line = next(x for x in log.splitlines() if "] gpu-tests-norm-wait (limit" in x)
    assert '-k dependent_form or norm_wait' in line and "test_triton_add_rmsnorm.py" in line, line
    assert log.index("] gpu-tests-norm-wait (limit") < log.index("] diagnose-decode-s43-norm-wait (limit") \
        < log.index("] swap-s43-norm-wait (limit") < log.index("] gate-captured-s43-norm-wait (limit") \
        < log.index("] decode-s43-norm-wait (limit")
    decode = _rung_timed_once(calls, machine, "s43-norm-wait", "add_rmsnorm=triton_pdl_wait",
                              "cuda-s32-lmhead-x16.toml", "add_rmsnorm=1.500")
    assert "--changes add_rmsnorm " in decode, decode
    forecast = machine / "suite-diag" / "forecast-s43-norm-wait.json"
    assert f"--forecast {forecast} " in decode, decode
    assert json.loads(forecast.read_text())["all"]["ratio"] == pytest.approx(1.024, abs=0.001)


def test_rungs43_is_left_out_without_its_record_and_nothing_of_it_is_made(tmp_path):
    """No perop-normwait record (the side-by-side did not run or failed): no factor, so the rung is said to be left out
    and neither swapped nor timed."""
    log, calls, machine = _over_the_x16_step(tmp_path, "rungs43")
    assert "decode-s43-norm-wait: left out (its GPU tests failed, or their record gave no factor)" in log
    assert not any("triton_pdl_wait" in c or "cuda-s43-norm-wait" in c for c in calls), calls


#: the MLA layer (cat, attention, o_proj) under the step's deep form and the PDL one, and without the attention: the
#: attention's own time in the chain 150 -> 120 us a token, x1.250
_ATTNPDL_RECORD = {"attnpdl": {"cupy_splitk_bf16_deep": 250e-6, "cupy_splitk_bf16_deep_pdl": 220e-6,
                               "no attention": 100e-6}}


def test_rungs44_times_the_pdl_attention_forecast_from_its_own_time_in_the_chain(tmp_path):
    """Session 35's second rung: after gpu-tests-attn-pdl (-k deep_pdl over the kernels' bit tests and the side-by-side
    that writes its record), attention=cupy_splitk_bf16_deep_pdl swapped over the step now, its captured gate, then one
    pair: --expect from the record less its no-attention column (150 -> 120 us: x1.250), --forecast from
    critical_path.py with that factor on the four MLA kernels' tails in the committed timeline."""
    log, calls, machine = _over_the_x16_step(tmp_path, "rungs44", records=_ATTNPDL_RECORD)
    line = next(x for x in log.splitlines() if "] gpu-tests-attn-pdl (limit" in x)
    assert "-k deep_pdl" in line and "test_cupy_kernels.py" in line, line
    assert log.index("] gpu-tests-attn-pdl (limit") < log.index("] diagnose-decode-s44-attn-pdl (limit") \
        < log.index("] swap-s44-attn-pdl (limit") < log.index("] gate-captured-s44-attn-pdl (limit") \
        < log.index("] decode-s44-attn-pdl (limit")
    decode = _rung_timed_once(calls, machine, "s44-attn-pdl", "attention=cupy_splitk_bf16_deep_pdl",
                              "cuda-s32-lmhead-x16.toml", "attention=1.250")
    assert "--changes attention " in decode, decode
    forecast = machine / "suite-diag" / "forecast-s44-attn-pdl.json"
    assert f"--forecast {forecast} " in decode, decode
    doc = json.loads(forecast.read_text())
    assert 1.01 < doc["all"]["ratio"] < 1.03, doc["all"]  # 7 MLA layers' four kernels x1.25 of ~27 us a layer


def test_rungs44_is_left_out_when_its_proof_fails_and_nothing_of_it_is_made(tmp_path):
    perops = " ".join([_records(tmp_path, expq8h={"cupy_rowwarp_pdl": 1300e-6, "cupy_rowwarp_pdl_q8_hidden": 1000e-6}),
                       _records(tmp_path, **_X16_STEP_RECORDS), _records(tmp_path, **_ATTNPDL_RECORD)])
    env = {"SUITE_TIMED": S23_TIMED + " decode-s28-exp-q8h decode-s32-lmhead-x16", "STUB_PYTEST_SECONDS": "0",
           "STUB_PEROP": perops, "STUB_FAIL_MATCH": "-k deep_pdl"}
    log, calls = _lanes(tmp_path, "rungs44", "", extra_env=env)
    assert "decode-s44-attn-pdl: left out (its GPU tests failed, or their record gave no factor)" in log
    assert not any("cupy_splitk_bf16_deep_pdl" in c or "cuda-s44-attn-pdl" in c for c in calls), calls


def test_rungs45_times_both_pdl_forms_in_one_pair(tmp_path):
    """The stacked rung: after both proofs (each writes its record), both pairs swapped at once over the step now, one
    captured gate, one pair with --changes add_rmsnorm,attention, --expect from both records (x1.500, x1.250) and a
    forecast with both factors, larger than either alone."""
    log, calls, machine = _over_the_x16_step(tmp_path, "rungs45", records={**_NORMWAIT_RECORD, **_ATTNPDL_RECORD})
    assert log.index("] gpu-tests-norm-wait (limit") < log.index("] gpu-tests-attn-pdl (limit") \
        < log.index("] swap-s45-pdl-stack (limit") < log.index("] gate-captured-s45-pdl-stack (limit") \
        < log.index("] decode-s45-pdl-stack (limit")
    decode = _rung_timed_once(calls, machine, "s45-pdl-stack",
                              "add_rmsnorm=triton_pdl_wait attention=cupy_splitk_bf16_deep_pdl",
                              "cuda-s32-lmhead-x16.toml", "add_rmsnorm=1.500,attention=1.250")
    assert "--changes add_rmsnorm,attention " in decode, decode
    both = json.loads((machine / "suite-diag" / "forecast-s45-pdl-stack.json").read_text())["all"]["ratio"]
    assert both > 1.024 + 0.01, both  # rungs43's forecast alone is x1.024 on the same record


_EXPQ8W_RECORD = {"expq8w": {"cupy_rowwarp_pdl_q8_hidden": 1000e-6, "cupy_rowwarp_pdl_q8_pairs": 800e-6}}


def test_rungs49_stacks_the_pdl_forms_with_the_pairs_gate_up_in_one_pair(tmp_path):
    """Session 37's rung: after rungs45's proofs and gpu-tests-exp-q8w (each writes its record), the three pairs
    swapped at once over the step now (the x16 step, whose experts are the Q8 hidden pair), one captured gate, one pair
    with --changes add_rmsnorm,attention,moe_experts and --expect from the three records (x1.500, x1.250, and the pairs
    gate/up 1000 -> 800: x1.250), its forecast scaling the experts' kernels too, above rungs45's on the same records."""
    records = {**_NORMWAIT_RECORD, **_ATTNPDL_RECORD, **_EXPQ8W_RECORD}
    log, calls, machine = _over_the_x16_step(tmp_path, "rungs49", records=records)
    assert log.index("] gpu-tests-norm-wait (limit") < log.index("] gpu-tests-attn-pdl (limit") \
        < log.index("] gpu-tests-exp-q8w (limit") < log.index("] swap-s49-nones (limit") \
        < log.index("] gate-captured-s49-nones (limit") < log.index("] decode-s49-nones (limit")
    decode = _rung_timed_once(calls, machine, "s49-nones", "add_rmsnorm=triton_pdl_wait attention="
                              "cupy_splitk_bf16_deep_pdl moe_experts=cupy_rowwarp_pdl_q8_pairs",
                              "cuda-s32-lmhead-x16.toml", "add_rmsnorm=1.500,attention=1.250,moe_experts=1.250")
    assert "--changes add_rmsnorm,attention,moe_experts " in decode, decode
    three = json.loads((machine / "suite-diag" / "forecast-s49-nones.json").read_text())["all"]
    assert "--scale moe_q4_k_gateup=1.25" in three["changes"] and "--scale moe_q4_k_down=1.25" in three["changes"]
    _, _, again = _over_the_x16_step(tmp_path, "rungs45", records=records)
    two = json.loads((again / "suite-diag" / "forecast-s45-pdl-stack.json").read_text())["all"]["ratio"]
    assert three["ratio"] > two + 0.01, (three["ratio"], two)


def test_rungs49_is_left_out_when_the_pairs_proof_failed(tmp_path):
    """The pairs gate/up's GPU tests failed: no swap, no gate, no pair for the stack (its other proofs passed)."""
    records = {**_NORMWAIT_RECORD, **_ATTNPDL_RECORD, **_EXPQ8W_RECORD}
    log, calls, machine = _over_the_x16_step(tmp_path, "rungs49", records=records,
                                             extra_env={"STUB_FAIL_MATCH": "q8_pairs"})
    assert "] gpu-tests-exp-q8w rc=1" in log and "decode-s49-nones: left out" in log, log
    assert not (machine / "cuda-s49-nones.toml").exists()
    assert not any(c.startswith("bench decode") and "cuda-s49-nones.toml" in c for c in calls), calls


_EXPQ8L_PAIRS_RECORD = {"expq8l": {"cupy_rowwarp_pdl_q8_pairs": 1000e-6, "cupy_rowwarp_pdl_q8_pairs_ld": 800e-6}}


def test_rungs50_times_the_ids_once_down_over_the_s49_step(tmp_path):
    """Session 38's rung: rungs49 wins on the machine, so its registry (the pairs pair's experts) is the step now;
    rungs50 swaps moe_experts=cupy_rowwarp_pdl_q8_pairs_ld over it after gpu-tests-exp-q8l, one captured gate, one
    pair with --expect from the record's pairs column against its ids-once one (1000 -> 800: x1.250)."""
    records = {**_NORMWAIT_RECORD, **_ATTNPDL_RECORD, **_EXPQ8W_RECORD, **_EXPQ8L_PAIRS_RECORD}
    log, calls, machine = _over_the_x16_step(tmp_path, "rungs49 rungs50", records=records)
    assert log.index("] decode-s49-nones (limit") < log.index("] gpu-tests-exp-q8l (limit") \
        < log.index("] swap-s50-pairs-ld (limit") < log.index("] gate-captured-s50-pairs-ld (limit") \
        < log.index("] decode-s50-pairs-ld (limit")
    decode = _rung_timed_once(calls, machine, "s50-pairs-ld", "moe_experts=cupy_rowwarp_pdl_q8_pairs_ld",
                              "cuda-s49-nones.toml", "moe_experts=1.250")
    assert "--changes moe_experts " in decode, decode


def test_rungs50_is_left_out_over_a_step_whose_experts_are_not_the_pairs_pair(tmp_path):
    """Over the x16 step (the Q8 hidden pair's experts) the swap would change gate/up too: no swap, no gate, no pair."""
    log, calls, machine = _over_the_x16_step(tmp_path, "rungs50", records=_EXPQ8L_PAIRS_RECORD)
    assert "decode-s50-pairs-ld: left out (the step now, cuda-s32-lmhead-x16.toml, does not select " \
        "moe_experts=cupy_rowwarp_pdl_q8_pairs)" in log, log
    assert not (machine / "cuda-s50-pairs-ld.toml").exists()
    assert not any("cuda-s50-pairs-ld" in c for c in calls), calls


_XPF_RECORDS = {"q8xpf": {"cupy_rowwarp_pdl_q8_tall": 1000e-6, "cupy_rowwarp_pdl_q8_tall_xpf": 800e-6},
                "expxpf": {"cupy_rowwarp_pdl": 1300e-6, "cupy_rowwarp_pdl_q8_pairs_xpf": 750e-6,
                           "cupy_rowwarp_pdl_q8_pairs": 1000e-6, "cupy_rowwarp_pdl_q8_pairs_ld": 950e-6}}


def test_rungs51_times_both_xpf_forms_over_the_step_that_runs_their_plain_forms(tmp_path):
    """Session 38's second rung: rungs39 (the Q8 tall GEMVs) and rungs49 (the pairs pair) win on the machine, so the
    s49 step runs both plain forms; rungs51 swaps both xpf forms over it after gpu-tests-xpf (-k xpf, which writes
    both records), one captured gate, one pair with --expect from the two records (1000 -> 800: x1.250; the pairs
    column 1000 -> 750: x1.333) and a forecast scaling the warp GEMVs and the downs."""
    recs = {**_ROWQ8_TALL_RECORD, **_NORMWAIT_RECORD, **_ATTNPDL_RECORD, **_EXPQ8W_RECORD, **_XPF_RECORDS}
    log, calls, machine = _over_the_x16_step(tmp_path, "rungs39 rungs49 rungs51", records=recs)
    assert log.index("] decode-s49-nones (limit") < log.index("] gpu-tests-xpf (limit") \
        < log.index("] swap-s51-xpf (limit") < log.index("] gate-captured-s51-xpf (limit") \
        < log.index("] decode-s51-xpf (limit")
    assert "-k xpf tests/backends/test_cupy_pdl.py tests/backends/test_cupy_timing.py" in log
    decode = _rung_timed_once(calls, machine, "s51-xpf", "linear@Q4_K=cupy_rowwarp_pdl_q8_tall_xpf "
                              "moe_experts=cupy_rowwarp_pdl_q8_pairs_xpf", "cuda-s49-nones.toml",
                              "linear@Q4_K=1.250,moe_experts=1.333")
    assert "--changes linear@Q4_K,moe_experts " in decode, decode
    scales = json.loads((machine / "suite-diag" / "forecast-s51-xpf.json").read_text())["all"]["changes"]
    assert "--scale linear_q4_k_rowwarppdl_bf16=1.25" in scales and "--scale moe_q4_k_downq8pdl=1.333" in scales


def test_rungs51_is_left_out_over_a_step_that_does_not_run_the_plain_forms(tmp_path):
    """Over the x16 step (the Q8 hidden pair's experts, the float GEMVs): no swap, no gate, no pair."""
    log, calls, machine = _over_the_x16_step(tmp_path, "rungs51", records=_XPF_RECORDS)
    assert "decode-s51-xpf: left out (the step now, cuda-s32-lmhead-x16.toml, does not select " \
        "linear@Q4_K=cupy_rowwarp_pdl_q8_tall and moe_experts=cupy_rowwarp_pdl_q8_pairs)" in log, log
    assert not (machine / "cuda-s51-xpf.toml").exists()
    assert not any("cuda-s51-xpf" in c for c in calls), calls


_XR_RECORD = {"q8xr": {"cupy_rowwarp_pdl_q8_tall": 1000e-6, "cupy_rowwarp_pdl_q8_tall_xr": 900e-6}}
#: the records that make the s52 step on the machine (rungs39, rungs49, rungs52 win)
_S52_STEP_RECORDS = {**_ROWQ8_TALL_RECORD, **_NORMWAIT_RECORD, **_ATTNPDL_RECORD, **_EXPQ8W_RECORD,
                     **_EXPQ8L_PAIRS_RECORD, **_XR_RECORD}


def test_rungs52_stacks_the_xr_gemv_with_the_ids_once_down_over_the_s49_step(tmp_path):
    """Session 39's rung: over the s49 step (rungs39's Q8 tall GEMVs and rungs49's pairs pair won on the machine),
    rungs52 runs both proofs (-k xregs, which writes perop-q8xr; -k down_loads, perop-expq8l), swaps the xr GEMV and
    the ids-once down in together, one captured gate, one pair with --expect from the two records (1000 -> 900:
    x1.111; the pairs column 1000 -> 800: x1.250) and a forecast scaling the warp GEMVs and the downs."""
    recs = _S52_STEP_RECORDS
    log, calls, machine = _over_the_x16_step(tmp_path, "rungs39 rungs49 rungs52", records=recs)
    assert log.index("] decode-s49-nones (limit") < log.index("] gpu-tests-xregs (limit") \
        < log.index("] gpu-tests-exp-q8l (limit") < log.index("] swap-s52-xr-ld (limit") \
        < log.index("] gate-captured-s52-xr-ld (limit") < log.index("] decode-s52-xr-ld (limit")
    assert "-k xregs tests/backends/test_cupy_pdl.py tests/backends/test_cupy_timing.py" in log
    decode = _rung_timed_once(calls, machine, "s52-xr-ld", "linear@Q4_K=cupy_rowwarp_pdl_q8_tall_xr "
                              "moe_experts=cupy_rowwarp_pdl_q8_pairs_ld", "cuda-s49-nones.toml",
                              "linear@Q4_K=1.111,moe_experts=1.250")
    assert "--changes linear@Q4_K,moe_experts " in decode, decode
    scales = json.loads((machine / "suite-diag" / "forecast-s52-xr-ld.json").read_text())["all"]["changes"]
    assert "--scale linear_q4_k_rowwarppdl_bf16=1.111" in scales and "--scale moe_q4_k_downq8pdl=1.25" in scales


def test_rungs52_is_left_out_when_the_xr_proof_failed(tmp_path):
    """The xr GEMV's GPU tests failed over the s49 step: no swap, no gate, no pair (the down's proof passed)."""
    recs = _S52_STEP_RECORDS
    log, calls, machine = _over_the_x16_step(tmp_path, "rungs39 rungs49 rungs52", records=recs,
                                             extra_env={"STUB_FAIL_MATCH": "xregs"})
    assert "] gpu-tests-xregs rc=1" in log and "decode-s52-xr-ld: left out" in log, log
    assert not (machine / "cuda-s52-xr-ld.toml").exists()
    assert not any("cuda-s52-xr-ld" in c for c in calls), calls


def test_rungs52_is_left_out_over_a_step_that_does_not_run_the_plain_forms(tmp_path):
    """Over the x16 step (the Q8 hidden pair's experts, the float GEMVs): no swap, no gate, no pair."""
    log, calls, machine = _over_the_x16_step(tmp_path, "rungs52", records={**_XR_RECORD, **_EXPQ8L_PAIRS_RECORD})
    assert "decode-s52-xr-ld: left out (the step now, cuda-s32-lmhead-x16.toml, does not select " \
        "linear@Q4_K=cupy_rowwarp_pdl_q8_tall and moe_experts=cupy_rowwarp_pdl_q8_pairs)" in log, log
    assert not (machine / "cuda-s52-xr-ld.toml").exists()
    assert not any("cuda-s52-xr-ld" in c for c in calls), calls


#: the ld down's forms staged over the s52 step (ld_down_rung): stage, rung name, implementation, proof's -k word,
#: its test step, its record (the step's ids-once column 800 us, the form's 720 or 640: x1.111, x1.250), its factor
_LD_DOWN_RUNGS = {
    "rungs53": ("s53-exp-hs", "cupy_rowwarp_pdl_q8_pairs_hs", "staged", "exp-hs",
                {"exphs": {"cupy_rowwarp_pdl": 1300e-6, "cupy_rowwarp_pdl_q8_pairs_hs": 720e-6,
                           "cupy_rowwarp_pdl_q8_pairs_ld": 800e-6}}, "1.111"),
    "rungs54": ("s54-exp-l2pf", "cupy_rowwarp_pdl_q8_pairs_l2pf", "l2pf", "exp-l2pf",
                {"expl2pf": {"cupy_rowwarp_pdl": 1300e-6, "cupy_rowwarp_pdl_q8_pairs_l2pf": 640e-6,
                             "cupy_rowwarp_pdl_q8_pairs_ld": 800e-6}}, "1.250"),
}


@pytest.mark.parametrize("stage", sorted(_LD_DOWN_RUNGS))
def test_the_ld_down_rungs_time_their_form_over_the_s52_step(tmp_path, stage):
    """Session 40's rungs (the staged down, rungs53; the L2-prefetching down, rungs54): over the s52 step, the form's
    proof (-k WORD, which writes its record), its swap, one captured gate, one pair with --expect from the record's
    ids-once column against the form's."""
    name, impl, word, tests, record, factor = _LD_DOWN_RUNGS[stage]
    log, calls, machine = _over_the_x16_step(tmp_path, f"rungs39 rungs49 rungs52 {stage}",
                                             records={**_S52_STEP_RECORDS, **record})
    assert log.index("] decode-s52-xr-ld (limit") < log.index(f"] gpu-tests-{tests} (limit") \
        < log.index(f"] swap-{name} (limit") < log.index(f"] gate-captured-{name} (limit") \
        < log.index(f"] decode-{name} (limit")
    assert f"-k {word} tests/backends/test_cupy_pdl.py tests/backends/test_cupy_timing.py" in log
    decode = _rung_timed_once(calls, machine, name, f"moe_experts={impl}", "cuda-s52-xr-ld.toml",
                              f"moe_experts={factor}")
    assert "--changes moe_experts " in decode, decode


@pytest.mark.parametrize("stage", sorted(_LD_DOWN_RUNGS))
def test_the_ld_down_rungs_are_left_out_when_their_proof_failed(tmp_path, stage):
    """The form's GPU tests failed over the s52 step: no swap, no gate, no pair."""
    name, _, word, tests, record, _ = _LD_DOWN_RUNGS[stage]
    log, calls, machine = _over_the_x16_step(tmp_path, f"rungs39 rungs49 rungs52 {stage}",
                                             records={**_S52_STEP_RECORDS, **record},
                                             extra_env={"STUB_FAIL_MATCH": word})
    assert f"] gpu-tests-{tests} rc=1" in log and f"decode-{name}: left out" in log, log
    assert not (machine / f"cuda-{name}.toml").exists()
    assert not any(f"cuda-{name}" in c for c in calls), calls


@pytest.mark.parametrize("stage", sorted(_LD_DOWN_RUNGS))
def test_the_ld_down_rungs_are_left_out_over_a_step_whose_experts_are_not_the_ids_once_pair(tmp_path, stage):
    """Over the s49 step (the pairs pair with its plain down) the swap would change the down's id reads too: no swap,
    no gate, no pair."""
    name, _, _, _, record, _ = _LD_DOWN_RUNGS[stage]
    recs = {**_NORMWAIT_RECORD, **_ATTNPDL_RECORD, **_EXPQ8W_RECORD, **record}
    log, calls, machine = _over_the_x16_step(tmp_path, f"rungs49 {stage}", records=recs)
    assert f"decode-{name}: left out (the step now, cuda-s49-nones.toml, does not select " \
        "moe_experts=cupy_rowwarp_pdl_q8_pairs_ld)" in log, log
    assert not (machine / f"cuda-{name}.toml").exists()
    assert not any(f"cuda-{name}" in c for c in calls), calls


#: rungs55's two records: the experts' ids-once column 800 -> 640 us (x1.250), the attention's own time before the
#: o_proj 120 -> 100 us a token (220 - 100 against 200 - 100: x1.200)
_STACK55_RECORDS = {"expl2pf": {"cupy_rowwarp_pdl": 1300e-6, "cupy_rowwarp_pdl_q8_pairs_l2pf": 640e-6,
                                "cupy_rowwarp_pdl_q8_pairs_ld": 800e-6},
                    "attnactpdl": {"cupy_splitk_bf16_deep_pdl": 220e-6, "cupy_splitk_bf16_deep_active_pdl": 200e-6,
                                   "no attention": 100e-6}}


def test_rungs55_stacks_the_l2pf_experts_with_the_active_pdl_attention_over_the_s52_step(tmp_path):
    """Session 41's rung: over the s52 step (the ids-once pairs pair, the PDL attention), rungs55 runs both proofs
    (-k l2pf, which writes perop-expl2pf; -k "deep_pdl or active_pdl" over the attention's kernel and timing tests,
    perop-attnactpdl), swaps both forms in together, one captured gate, one pair with --expect from the two records (the
    experts against the ids-once column; the attention's own time in its chain) and a forecast scaling the downs and
    the attention's split and combine."""
    log, calls, machine = _over_the_x16_step(tmp_path, "rungs39 rungs49 rungs52 rungs55",
                                             records={**_S52_STEP_RECORDS, **_STACK55_RECORDS})
    assert log.index("] decode-s52-xr-ld (limit") < log.index("] gpu-tests-exp-l2pf (limit") \
        < log.index("] gpu-tests-attn-act-pdl (limit") < log.index("] swap-s55-stack (limit") \
        < log.index("] gate-captured-s55-stack (limit") < log.index("] decode-s55-stack (limit")
    line = next(x for x in log.splitlines() if "] gpu-tests-attn-act-pdl (limit" in x)
    assert "-k deep_pdl or active_pdl tests/backends/test_cupy_kernels.py tests/backends/test_cupy_timing.py" in line, line
    decode = _rung_timed_once(calls, machine, "s55-stack", "moe_experts=cupy_rowwarp_pdl_q8_pairs_l2pf "
                              "attention=cupy_splitk_bf16_deep_active_pdl", "cuda-s52-xr-ld.toml",
                              "moe_experts=1.250,attention=1.200")
    assert "--changes moe_experts,attention " in decode, decode
    scales = json.loads((machine / "suite-diag" / "forecast-s55-stack.json").read_text())["all"]["changes"]
    assert "--scale moe_q4_k_downq8pdl=1.25" in scales and "--scale mla_split_mma=1.2" in scales \
        and "--scale mla_combine_deep=1.2" in scales, scales


def test_rungs55_is_left_out_when_the_attention_proof_failed(tmp_path):
    """The active PDL attention's GPU tests failed over the s52 step: no swap, no gate, no pair (the experts' proof
    passed)."""
    log, calls, machine = _over_the_x16_step(tmp_path, "rungs39 rungs49 rungs52 rungs55",
                                             records={**_S52_STEP_RECORDS, **_STACK55_RECORDS},
                                             extra_env={"STUB_FAIL_MATCH": "active_pdl"})
    assert "] gpu-tests-exp-l2pf rc=0" in log and "] gpu-tests-attn-act-pdl rc=1" in log, log
    assert "decode-s55-stack: left out" in log, log
    assert not (machine / "cuda-s55-stack.toml").exists()
    assert not any("cuda-s55-stack" in c for c in calls), calls


def test_rungs55_is_left_out_over_a_step_that_does_not_run_the_plain_forms(tmp_path):
    """Over the s49 step (the pairs pair with its plain down) the swap would change the down's id reads too: no swap,
    no gate, no pair."""
    recs = {**_NORMWAIT_RECORD, **_ATTNPDL_RECORD, **_EXPQ8W_RECORD, **_STACK55_RECORDS}
    log, calls, machine = _over_the_x16_step(tmp_path, "rungs49 rungs55", records=recs)
    assert "decode-s55-stack: left out (the step now, cuda-s49-nones.toml, does not select " \
        "moe_experts=cupy_rowwarp_pdl_q8_pairs_ld and attention=cupy_splitk_bf16_deep_pdl)" in log, log
    assert not (machine / "cuda-s55-stack.toml").exists()
    assert not any("cuda-s55-stack" in c for c in calls), calls


def test_frontier_now_makes_the_named_steps_by_their_swaps_and_times_the_newest_once(tmp_path):
    """An H200 whose frontier stands at an older step: frontier_now makes every rung SUITE_TIMED names by its swaps
    (each proven here), oldest first, then times the newest, the s55 step, at 0 and 32768 in one arm (no --vs, no
    --changes: its row is the step's figure against the frontier, not a rung's tier)."""
    named = " decode-s28-exp-q8h decode-s32-lmhead-x16 decode-s39-q8-tall decode-s49-nones decode-s52-xr-ld " \
        "decode-s55-stack"
    log, calls, machine = _over_the_x16_step(tmp_path, "frontier_now", extra_env={"SUITE_TIMED": S23_TIMED + named})
    step = machine / "cuda-s55-stack.toml"
    assert f"the step now: {step}" in log, log[-3000:]
    swaps = [c for c in calls if c.startswith("swap ")]
    order = [next(i for i, c in enumerate(swaps) if part in c) for part in
             ("cupy_rowwarp_pdl_q8_tall", "triton_pdl_wait", "cupy_rowwarp_pdl_q8_tall_xr", "_q8_pairs_l2pf")]
    assert order == sorted(order), swaps
    rows = [c for c in calls if c.startswith("bench decode") and "--vs" not in c]  # (the snapshot's rungs: pairs)
    assert len(rows) == 1, rows
    assert f"--registry {step} " in rows[0] and "--depth 0,32768 " in rows[0] and "--graph A " in rows[0], rows
    assert "--vs" not in rows[0] and "--changes" not in rows[0] and "--expect" not in rows[0], rows


def test_frontier_now_times_nothing_when_a_named_step_cannot_be_made(tmp_path):
    """A rung SUITE_TIMED names whose swap fails here: no older step stands in for it; nothing is timed."""
    named = " decode-s28-exp-q8h decode-s32-lmhead-x16 decode-s39-q8-tall decode-s49-nones decode-s52-xr-ld " \
        "decode-s55-stack"
    log, calls, _ = _over_the_x16_step(tmp_path, "frontier_now", extra_env={
        "SUITE_TIMED": S23_TIMED + named, "STUB_SWAP_REFUSE": "attention=cupy_splitk_bf16_deep_active_pdl"})
    assert not any(c.startswith("bench decode") and "--vs" not in c for c in calls), calls
    assert "frontier_now: decode-s55-stack's registry was not made" in log, log[-3000:]
    assert "the step now:" not in log, log[-3000:]


#: rungs56's record: the step's norm-and-router pair 180 us a token, the merged picks' 150 (x1.200)
_MERGE56_RECORD = {"routermerge": {"cupy_rowwarp_pdl": 180e-6, "cupy_rowwarp_pdl_merge": 150e-6}}
#: rungs57's record: the norm-router-experts chain under the l2pf pair 800 us a token, under the grouped one 640 (x1.25)
_GROUPED57_RECORD = {"expgrp": {"cupy_rowwarp_pdl": 1300e-6, "cupy_rowwarp_pdl_q8_pairs_l2pf": 800e-6,
                                "cupy_rowwarp_pdl_q8_pairs_l2pf_grouped": 640e-6}}
#: rungs58's record: under the l2pf pair 800 us a token, under the streamed one 740 (x1.081)
_STREAMED58_RECORD = {"expstr": {"cupy_rowwarp_pdl": 1300e-6, "cupy_rowwarp_pdl_q8_pairs_l2pf": 800e-6,
                                 "cupy_rowwarp_pdl_q8_pairs_l2pf_streamed": 740e-6}}


def _over_the_s55_step(tmp_path: Path, stages: str, extra_env: dict[str, str] | None = None):
    """The x16 step's machine, then rungs39, rungs49, rungs52 and rungs55 making the s55 step, then STAGES."""
    return _over_the_x16_step(tmp_path, f"rungs39 rungs49 rungs52 rungs55 {stages}",
                              records={**_S52_STEP_RECORDS, **_STACK55_RECORDS, **_MERGE56_RECORD, **_GROUPED57_RECORD,
                                       **_STREAMED58_RECORD},
                              extra_env=extra_env)


def test_rungs56_times_the_merged_router_picks_over_the_s55_step(tmp_path):
    """Session 42's rung: over the s55 step (its router cupy_rowwarp_pdl), gpu-tests-router-merge (-k merge over the
    router's GPU tests and the side-by-side that writes perop-routermerge), the swap, one captured gate, one pair with
    --expect from the record (180 -> 150: x1.200) and a forecast scaling the step's routers by it."""
    log, calls, machine = _over_the_s55_step(tmp_path, "rungs56")
    line = next(x for x in log.splitlines() if "] gpu-tests-router-merge (limit" in x)
    assert "-k merge tests/backends/test_cupy_moe_router.py tests/backends/test_cupy_timing.py" in line, line
    assert log.index("] decode-s55-stack (limit") < log.index("] gpu-tests-router-merge (limit") \
        < log.index("] swap-s56-router-merge (limit") < log.index("] gate-captured-s56-router-merge (limit") \
        < log.index("] decode-s56-router-merge (limit")
    decode = _rung_timed_once(calls, machine, "s56-router-merge", "moe_router=cupy_rowwarp_pdl_merge",
                              "cuda-s55-stack.toml", "moe_router=1.200")
    assert "--changes moe_router " in decode and "--forecast " in decode, decode
    forecast = json.loads((machine / "suite-diag" / "forecast-s56-router-merge.json").read_text())
    assert forecast["all"]["changes"] == ["--scale moe_router_rowwarp_pdl=1.2"], forecast
    # on the stand-in's H200: the s55 step's own replay on an H200 (session 43's)
    assert forecast["timeline"].endswith("2026-12-06-session43/call5/results-gpu0/probe-timeline-now.json") \
        and forecast["registry"] == "/tmp/cuda-s55-stack.toml", forecast


def test_rungs56_is_left_out_when_its_proof_failed(tmp_path):
    """The merged router's GPU tests failed: no swap, no gate, no pair."""
    log, calls, machine = _over_the_s55_step(tmp_path, "rungs56", extra_env={"STUB_FAIL_MATCH": "router-merge"})
    assert "] gpu-tests-router-merge rc=1" in log and "decode-s56-router-merge: left out" in log, log
    assert not (machine / "cuda-s56-router-merge.toml").exists()
    assert not any("cuda-s56-router-merge" in c for c in calls), calls


def test_rungs56_is_left_out_over_a_step_whose_router_is_not_the_pdl_one(tmp_path):
    """After rungs37's sorted router wins (the stand-in's pair is a win) the step's router is
    cupy_rowwarp_pdl_sorted, and the swap would replace that form, not the one the record timed against: no swap, no
    gate, no pair."""
    records = {"routersort": {"cupy_rowwarp_pdl": 180e-6, "cupy_rowwarp_pdl_sorted": 160e-6}, **_MERGE56_RECORD}
    log, calls, machine = _over_the_x16_step(tmp_path, "rungs37 rungs56", records=records)
    assert "decode-s56-router-merge: left out (the step now, cuda-s37-router-sorted.toml, does not select " \
        "moe_router=cupy_rowwarp_pdl)" in log, log
    assert not (machine / "cuda-s56-router-merge.toml").exists()
    assert not any("cuda-s56-router-merge" in c for c in calls), calls


@pytest.mark.parametrize("stage, form, factor", [("rungs57", "grouped", "1.250"), ("rungs58", "streamed", "1.081")])
def test_rungs57_and_58_time_their_gate_up_over_the_s55_step(tmp_path, stage, form, factor):
    """Sessions 43's and 46's rungs: over the s55 step (its experts the l2pf pair), gpu-tests-gu-FORM (-k FORM over
    the experts' PDL GPU tests and the side-by-side that writes its record), the swap, one captured gate, one pair
    with --expect from the record (800 -> 640: x1.25; 800 -> 740: x1.081) and a forecast scaling the step's gate/up
    kernels by it on the s55 step's own replay: on an H100 (STUB_GPU_NAME), session 42's H100 replay of it."""
    n = stage[-2:]
    log, calls, machine = _over_the_s55_step(tmp_path, stage, extra_env={"STUB_GPU_NAME": "NVIDIA H100 80GB HBM3"})
    line = next(x for x in log.splitlines() if f"] gpu-tests-gu-{form} (limit" in x)
    assert f"-k {form} tests/backends/test_cupy_pdl.py tests/backends/test_cupy_timing.py" in line, line
    assert log.index("] decode-s55-stack (limit") < log.index(f"] gpu-tests-gu-{form} (limit") \
        < log.index(f"] swap-s{n}-gu-{form} (limit") < log.index(f"] gate-captured-s{n}-gu-{form} (limit") \
        < log.index(f"] decode-s{n}-gu-{form} (limit")
    decode = _rung_timed_once(calls, machine, f"s{n}-gu-{form}", f"moe_experts=cupy_rowwarp_pdl_q8_pairs_l2pf_{form}",
                              "cuda-s55-stack.toml", f"moe_experts={factor}")
    assert "--changes moe_experts " in decode and "--forecast " in decode, decode
    forecast = json.loads((machine / "suite-diag" / f"forecast-s{n}-gu-{form}.json").read_text())
    assert forecast["all"]["changes"] == [f"--scale moe_q4_k_gateup={float(factor):g}"], forecast
    assert forecast["timeline"].endswith("2026-12-06-session42/call3/results-gpu0/probe-timeline-now.json") \
        and forecast["registry"] == "/tmp/cuda-s55-stack.toml", forecast


@pytest.mark.parametrize("stage, form", [("rungs57", "grouped"), ("rungs58", "streamed")])
def test_rungs57_and_58_are_left_out_when_their_proof_failed(tmp_path, stage, form):
    """The gate/up form's GPU tests failed: no swap, no gate, no pair."""
    n = stage[-2:]
    log, calls, machine = _over_the_s55_step(tmp_path, stage, extra_env={"STUB_FAIL_MATCH": f"gu-{form}"})
    assert f"] gpu-tests-gu-{form} rc=1" in log and f"decode-s{n}-gu-{form}: left out" in log, log
    assert not (machine / f"cuda-s{n}-gu-{form}.toml").exists()
    assert not any(f"cuda-s{n}-gu-{form}" in c for c in calls), calls


def test_rungs57_is_left_out_over_a_step_whose_experts_are_not_the_l2pf_pair(tmp_path):
    """Over the s52 step (its experts the ids-once pair) the swap would change the down too: no swap, no gate, no
    pair."""
    log, calls, machine = _over_the_x16_step(tmp_path, "rungs39 rungs49 rungs52 rungs57",
                                             records={**_S52_STEP_RECORDS, **_GROUPED57_RECORD})
    assert "decode-s57-gu-grouped: left out (the step now, cuda-s52-xr-ld.toml, does not select " \
        "moe_experts=cupy_rowwarp_pdl_q8_pairs_l2pf)" in log, log
    assert not (machine / "cuda-s57-gu-grouped.toml").exists()
    assert not any("cuda-s57-gu-grouped" in c for c in calls), calls


_MOENORM_RECORD = {"moenorm": {"chain": 1100e-6, "cupy_rowwarp_pdl_q8_hidden_norm": 1026e-6, "no closing norm": 1000e-6,
                               "no experts": 200e-6}}


def test_rungs46_times_the_experts_with_the_next_norm_over_the_step_now_with_the_engine_option(tmp_path):
    """Session 36's rung: after gpu-tests-moe-norm (the fused op's and the engine option's GPU tests and the
    side-by-side that writes its record), moe_experts_add_rmsnorm=cupy_rowwarp_pdl_q8_hidden_norm swapped over the step
    now (the x16 step, whose experts are the Q8 hidden pair), [engine] fuse_moe_norm set on that registry, its captured
    gate, then one pair: --expect moe_experts from the record less the chain cut after the router ((1100 - 200) / (1026
    - 200): x1.090), --changes engine,moe_experts_add_rmsnorm, and a forecast with the 26 norms after the down removed
    and the down's end later by the record's tail ((1026 - 1000) / 26 = 1 us a layer), which session 35's model put at
    x1.022."""
    log, calls, machine = _over_the_x16_step(tmp_path, "rungs46", records=_MOENORM_RECORD)
    line = next(x for x in log.splitlines() if "] gpu-tests-moe-norm (limit" in x)
    assert "tests/backends/test_cupy_moe_experts_add_rmsnorm.py tests/engine/test_moe_norm_fusion.py" in line
    assert "test_cupy_timing.py::test_experts_norm_fused_side_by_side" in line and "SPARKOPS_PEROP_DIR=" in line
    reg = machine / "cuda-s46-moe-norm.toml"
    assert any(c.startswith("swap moe_experts_add_rmsnorm=cupy_rowwarp_pdl_q8_hidden_norm") and f"{reg}.swap.new" in c
               for c in calls), calls
    assert any(c.startswith("engine fuse_moe_norm=on --registry") and f"{reg}.new" in c for c in calls), calls
    assert log.index("] gpu-tests-moe-norm (limit") < log.index("] gate-captured-s46-moe-norm (limit") \
        < log.index("] decode-s46-moe-norm (limit")
    [decode] = [c for c in calls if c.startswith("bench decode") and f"--vs {reg} " in c]
    assert f"--registry {machine / 'cuda-s32-lmhead-x16.toml'} " in decode and "--expect moe_experts=1.090 " in decode
    assert "--changes engine,moe_experts_add_rmsnorm " in decode, decode
    forecast = json.loads((machine / "suite-diag" / "forecast-s46-moe-norm.json").read_text())["all"]
    assert forecast["changes"] == ["--remove _add_rmsnorm_kernel<moe_q4_k_downq8pdl",
                                   "--shift moe_q4_k_downq8pdl=-1"]
    assert forecast["ratio"] == pytest.approx(1.022, abs=0.001)


def test_rungs46_is_left_out_when_its_forecast_is_a_loss(tmp_path):
    """GPU session 36's first record of the fold (H100): the fused op 1264.6 us a token against the chain's 877.4 and
    842.1 without the closing norm, a tail of 16 us a layer: the critical-path forecast is a loss, so the rung is left
    out after its gate and forecast, and no pair is timed."""
    record = {"moenorm": {"chain": 877.4e-6, "cupy_rowwarp_pdl_q8_hidden_norm": 1264.6e-6,
                          "no closing norm": 842.1e-6, "no experts": 195.4e-6}}
    log, calls, machine = _over_the_x16_step(tmp_path, "rungs46", records=record)
    assert "decode-s46-moe-norm: left out (its critical-path forecast is a loss: x0." in log, log
    assert not any(c.startswith("bench decode") and "cuda-s46-moe-norm" in c for c in calls), calls


def test_rungs46_is_left_out_without_a_tail_in_its_record(tmp_path):
    """A record whose fused column is less than the chain cut after the experts gives no tail: the rung says so and
    neither swaps nor times anything."""
    record = {"moenorm": {**_MOENORM_RECORD["moenorm"], "cupy_rowwarp_pdl_q8_hidden_norm": 990e-6}}
    log, calls, _ = _over_the_x16_step(tmp_path, "rungs46", records=record)
    assert "decode-s46-moe-norm: left out (the record gave no tail a layer)" in log
    assert not any("moe_experts_add_rmsnorm" in c or "cuda-s46-moe-norm" in c for c in calls), calls


_OPROJNORM_RECORD = {"oprojnorm": {"chain": 270e-6, "cupy_rowwarp_pdl_norm": 243e-6, "no norm": 216e-6}}


def test_rungs47_times_the_o_proj_with_the_ffn_norm_over_the_step_now_with_the_engine_option(tmp_path):
    """Session 36's second rung: after gpu-tests-oproj-norm, linear_add_rmsnorm=cupy_rowwarp_pdl_norm swapped over the
    step now, [engine] fuse_oproj_norm set, its captured gate, then one pair: --expect add_rmsnorm from the record (the
    norm's own time in the chain over the fold's: (270 - 216) / (243 - 216) = 2, on the 27 of 54 calls it folds:
    1 / (0.5 + 0.25) = x1.333), --changes engine,linear_add_rmsnorm, and a forecast with the norms after the o_proj
    removed and its end later by the record's tail ((243 - 216) / 27 = 1 us)."""
    log, calls, machine = _over_the_x16_step(tmp_path, "rungs47", records=_OPROJNORM_RECORD)
    line = next(x for x in log.splitlines() if "] gpu-tests-oproj-norm (limit" in x)
    assert "tests/backends/test_cupy_linear_add_rmsnorm.py tests/engine/test_oproj_norm_fusion.py" in line
    assert "test_cupy_timing.py::test_oproj_norm_fused_side_by_side" in line
    reg = machine / "cuda-s47-oproj-norm.toml"
    assert any(c.startswith("swap linear_add_rmsnorm=cupy_rowwarp_pdl_norm") and f"{reg}.swap.new" in c
               for c in calls), calls
    assert any(c.startswith("engine fuse_oproj_norm=on --registry") and f"{reg}.new" in c for c in calls), calls
    [decode] = [c for c in calls if c.startswith("bench decode") and f"--vs {reg} " in c]
    assert "--expect add_rmsnorm=1.333 " in decode and "--changes engine,linear_add_rmsnorm " in decode, decode
    forecast = json.loads((machine / "suite-diag" / "forecast-s47-oproj-norm.json").read_text())["all"]
    assert forecast["changes"] == ["--remove _add_rmsnorm_kernel<linear_q4_k_rowwarppdl",
                                   "--shift linear_q4_k_rowwarppdl_bf16>_add_rmsnorm_kernel=-1"]
    assert forecast["ratio"] == pytest.approx(1.023, abs=0.001)


def test_rungs48_times_both_folds_in_one_pair(tmp_path):
    """The stacked rung: after both proofs, both fused ops swapped at once over the step now and both options set, one
    captured gate, one pair with --expect from both records (add_rmsnorm x1.333, moe_experts x1.090) and a forecast
    with all four changes (x1.046 at 1 us each)."""
    log, calls, machine = _over_the_x16_step(tmp_path, "rungs48", records={**_MOENORM_RECORD, **_OPROJNORM_RECORD})
    assert log.index("] gpu-tests-moe-norm (limit") < log.index("] gpu-tests-oproj-norm (limit") \
        < log.index("] swap-s48-norm-folds (limit") < log.index("] gate-captured-s48-norm-folds (limit") \
        < log.index("] decode-s48-norm-folds (limit")
    reg = machine / "cuda-s48-norm-folds.toml"
    assert any(c.startswith("swap moe_experts_add_rmsnorm=cupy_rowwarp_pdl_q8_hidden_norm "
                            "linear_add_rmsnorm=cupy_rowwarp_pdl_norm") for c in calls), calls
    assert any(c.startswith("engine fuse_moe_norm=on fuse_oproj_norm=on --registry") for c in calls), calls
    [decode] = [c for c in calls if c.startswith("bench decode") and f"--vs {reg} " in c]
    assert "--expect add_rmsnorm=1.333,moe_experts=1.090 " in decode, decode
    assert "--changes engine,moe_experts_add_rmsnorm,linear_add_rmsnorm " in decode, decode
    both = json.loads((machine / "suite-diag" / "forecast-s48-norm-folds.json").read_text())["all"]["ratio"]
    assert both == pytest.approx(1.046, abs=0.001)


def test_rungs45_takes_the_pair_s_factor_where_the_chain_without_the_norm_is_not_below_both(tmp_path):
    """GPU session 36's H100 record of the PDL norm: the o_proj alone ("no norm", 411.8 us a token) slower than the
    pair with the dependent norm (387.9), so the norm's own time in the chain is negative and --minus refuses it; the
    stack's rung then takes the pair's factor (414.7 / 387.9 = x1.069) for add_rmsnorm, says so, and is timed."""
    record = {"normwait": {"triton_pdl": 414.7e-6, "triton_pdl_wait": 387.9e-6, "no norm": 411.8e-6}}
    log, calls, machine = _over_the_x16_step(tmp_path, "rungs45", records={**record, **_ATTNPDL_RECORD})
    assert "decode-s45-pdl-stack: perop-normwait's \"no norm\" is not below both columns" in log, log
    [decode] = [c for c in calls if c.startswith("bench decode") and "cuda-s45-pdl-stack" in c]
    assert "--expect add_rmsnorm=1.069,attention=1.250 " in decode, decode


def test_rungs42_is_left_out_when_gates_first_s_tests_fail(tmp_path):
    perops = " ".join([_records(tmp_path, expq8h={"cupy_rowwarp_pdl": 1300e-6, "cupy_rowwarp_pdl_q8_hidden": 1000e-6}),
                       _records(tmp_path, **_X16_STEP_RECORDS), _records(tmp_path, **_CONVKDA_RECORD)])
    env = {"SUITE_TIMED": S23_TIMED + " decode-s28-exp-q8h decode-s32-lmhead-x16", "STUB_PYTEST_SECONDS": "0",
           "STUB_PEROP": perops, "STUB_FAIL_MATCH": "tests/engine/test_gates_first.py"}
    log, calls = _lanes(tmp_path, "rungs42", "", extra_env=env)
    assert "decode-s42-gates-conv: left out (gates_first's GPU tests failed)" in log
    assert not any("gates_first" in c or "cuda-s42-gates-conv" in c for c in calls), calls


def test_a_won_rung_of_engine_options_alone_is_made_again_by_now_chain(tmp_path):
    """decode-s41-shared-side named a win (SUITE_TIMED) on a machine without its registry: now_chain makes it again as
    the step below it with its options on (now_pairs' "+ OPTIONS", no swap). The recipe is what is tested: session 35's
    H200 rows record that rung as lost (0.990), so the ledger check is the stand-in's (STUB_TIMED_OK)."""
    _, _, machine = _over_the_x16_step(tmp_path, "rungs41")
    reg = machine / "cuda-s41-shared-side.toml"
    reg.unlink()
    Path(f"{reg}.base").unlink()
    env = {"SUITE_TIMED": S23_TIMED + " decode-s28-exp-q8h decode-s32-lmhead-x16 decode-s41-shared-side",
           "STUB_PYTEST_SECONDS": "0", "STUB_PEROP": _records(tmp_path, **_CONVKDA_RECORD), "STUB_TIMED_OK": "1"}
    log, calls = _lanes(machine.parent, "rungs40", "", extra_env=env)
    assert "decode-s41-shared-side won in an earlier call; its registry made again over cuda-s32-lmhead-x16.toml" in log
    assert any(c.startswith("engine side_stream=on shared_expert_side=on --registry") and f"{reg}.new" in c
               for c in calls), calls
    assert reg.is_file() and Path(f"{reg}.base").read_text().strip() == str(machine / "cuda-s32-lmhead-x16.toml")


def test_rungs41_is_left_out_when_its_proof_fails_and_nothing_of_it_is_made(tmp_path):
    perops = " ".join([_records(tmp_path, expq8h={"cupy_rowwarp_pdl": 1300e-6, "cupy_rowwarp_pdl_q8_hidden": 1000e-6}),
                       _records(tmp_path, **_X16_STEP_RECORDS)])
    env = {"SUITE_TIMED": S23_TIMED + " decode-s28-exp-q8h decode-s32-lmhead-x16", "STUB_PYTEST_SECONDS": "0",
           "STUB_PEROP": perops, "STUB_FAIL_MATCH": "tests/engine/test_shared_expert_side.py"}
    log, calls = _lanes(tmp_path, "rungs41", "", extra_env=env)
    assert "decode-s41-shared-side: left out (its GPU tests failed, or their record gave no factor)" in log
    assert not any("shared_expert_side" in c or "s41-shared-side" in c for c in calls), calls
    assert not (tmp_path / "machine" / "cuda-s41-shared-side.toml").exists()


def test_rungs40_is_left_out_when_its_registry_does_not_select_the_fused_op(tmp_path):
    """The fused op's swap refused on this machine (STUB_SWAP_REFUSE): the registry made keeps the base's selection
    (swap_into goes on without the pair), so it does not select short_conv_kda_norm=triton_split_pdl and the rung says
    so and neither gates nor times it."""
    perops = " ".join([_records(tmp_path, expq8h={"cupy_rowwarp_pdl": 1300e-6, "cupy_rowwarp_pdl_q8_hidden": 1000e-6}),
                       _records(tmp_path, **_X16_STEP_RECORDS), _records(tmp_path, **_CONVKDA_RECORD)])
    env = {"SUITE_TIMED": S23_TIMED + " decode-s28-exp-q8h decode-s32-lmhead-x16", "STUB_PYTEST_SECONDS": "0",
           "STUB_PEROP": perops, "STUB_SWAP_REFUSE": "short_conv_kda_norm=triton_split_pdl"}
    log, calls = _lanes(tmp_path, "rungs40", "", extra_env=env)
    assert "decode-s40-conv-kda: left out (its registry does not select short_conv_kda_norm=triton_split_pdl)" in log
    assert "] gate-captured-s40-conv-kda (limit" not in log and "] decode-s40-conv-kda (limit" not in log
    assert not any(c.startswith(("check", "bench decode")) and "cuda-s40-conv-kda.toml" in c for c in calls), calls


def test_proofs40_runs_the_proof_alone_and_writes_its_record(tmp_path):
    """proofs40, the lane beside rungs40: gpu-tests-conv-kda and its record, and nothing else (no synth, swap,
    diagnosis, engine option or bench)."""
    env = {"STUB_PYTEST_SECONDS": "0", "STUB_PEROP": _records(tmp_path, **_CONVKDA_RECORD)}
    log, calls = _suite(tmp_path, "proofs40", extra_env=env)
    assert "] gpu-tests-conv-kda (limit" in log and "unknown stage" not in log
    assert (tmp_path / "machine" / "suite-diag" / "perop-convkda-bfloat16.json").exists()
    assert not any(c.startswith(("synth", "swap", "bench", "diagnose", "engine")) for c in calls), calls


def test_a_fresh_machine_makes_the_fused_conv_step_by_its_swap_and_engine_option(tmp_path):
    """decode-s40-conv-kda named a winner (SUITE_TIMED) on a machine without its registry: now_chain makes it again
    over the x16 step by its recipe (the swap, then [engine] fuse_conv_kda on the copy) and nothing times it; rungs37,
    an older rung, is still timed over the x16 step below it. The rung lost in session 33 (0.943), so the checkout's
    ledger refuses it in SUITE_TIMED; the stand-in's timed_check passes here (STUB_TIMED_OK), the recipe being what
    this tests."""
    perops = " ".join([_records(tmp_path, expq8h={"cupy_rowwarp_pdl": 1300e-6, "cupy_rowwarp_pdl_q8_hidden": 1000e-6}),
                       _records(tmp_path, **_X16_STEP_RECORDS),
                       _records(tmp_path, routersort={"cupy_rowwarp_pdl": 180e-6, "cupy_rowwarp_pdl_sorted": 160e-6})])
    env = {"SUITE_TIMED": S23_TIMED + " decode-s28-exp-q8h decode-s32-lmhead-x16 decode-s40-conv-kda",
           "STUB_PYTEST_SECONDS": "0", "STUB_PEROP": perops, "STUB_TIMED_OK": "1"}
    log, calls = _lanes(tmp_path, "rungs37", "", extra_env=env)
    machine = tmp_path / "machine"
    reg = machine / "cuda-s40-conv-kda.toml"
    assert ("decode-s40-conv-kda won in an earlier call; its registry made again over cuda-s32-lmhead-x16.toml: "
            "short_conv_kda_norm=triton_split_pdl + fuse_conv_kda=on") in log, log[-3000:]
    assert any(c.startswith("engine fuse_conv_kda=on --registry") and f"{reg}.new" in c for c in calls), calls
    assert reg.is_file() and not any(c.startswith("bench decode") and f"--vs {reg} " in c for c in calls)
    _rung_timed_once(calls, machine, "s37-router-sorted", "moe_router=cupy_rowwarp_pdl_sorted",
                     "cuda-s32-lmhead-x16.toml", "moe_router=1.125")


def _iq1s_probe_on_machine(tmp_path, experts_us: float) -> None:
    """probe_iq1s's GPU tests passed and its figures kept on the stand-in machine: the GEMVs x1.5 per op (12 -> 8 us)
    in the global-grid form, x2 (6 us) in the shared-grid one, x1.2 (10 us) for the short form's shared grid, which
    missed its claim here; the experts' Q8-hidden form at experts_us against triton_prefetch's."""
    import json

    (tmp_path / "machine" / "suite-done").mkdir(parents=True)
    (tmp_path / "machine" / "suite-done" / "gpu-tests-iq1s").write_text("0\n")
    (tmp_path / "machine" / "suite-diag").mkdir(parents=True)
    row = {"us": 1.0, "ok": True}
    probe = {"now": {"linear": "triton_lastblock", "moe_experts": "triton_prefetch"},
             "kernels": {"kda_qkv": {"name": "kda_qkv", "op": "linear", "calls": 20},
                         "experts": {"name": "experts", "op": "moe_experts", "calls": 26}},
             "timed": {"kda_qkv": {"triton_lastblock": {**row, "us": 12.0},
                                   "cupy_rowwarp_pdl_q8_iq1s": {**row, "us": 8.0},
                                   "cupy_rowwarp_pdl_q8_iq1s_sg": {**row, "us": 6.0},
                                   "cupy_rowwarp_pdl_q8_iq1s_sg_short": {"us": 1.0, "ok": False}},
                       "experts": {"triton_prefetch": {**row, "us": 50.0},
                                   "cupy_rowwarp_pdl_q8h_iq1s": {**row, "us": experts_us}}}}
    (tmp_path / "machine" / "suite-diag" / "probe-iq1s.json").write_text(json.dumps(probe))


def test_rungs_iq1s_leaves_out_a_rung_its_probe_has_slower_per_op(tmp_path):
    _iq1s_probe_on_machine(tmp_path, experts_us=60.0)
    env = {"SUITE_TIMED": S13D_TIMED + " decode-s22-all", "STUB_PYTEST_SECONDS": "0"}
    log, calls = _suite(tmp_path, "rungs_iq1s", extra_env=env)
    bench = [c for c in calls if c.startswith("bench decode")]
    assert len(bench) == 1 and "--expect linear@IQ1_S=2.0000" in bench[0]
    assert "decode131k-iq1s-experts: left out (no per-op factor above 1 from probe_iq1s)" in log
    assert not any("moe_experts@IQ1_S=cupy_rowwarp_pdl_q8h_iq1s" in c for c in calls)


def test_rungs_iq1s_takes_a_pinned_gemv_form_over_the_probes_fastest(tmp_path):
    """SUITE_IQ1S_LINEAR: the form a rung already won with stays the experts' base, whatever the probe ranks first."""
    _iq1s_probe_on_machine(tmp_path, experts_us=25.0)
    env = {"SUITE_TIMED": S13D_TIMED + " decode-s22-all", "STUB_PYTEST_SECONDS": "0",
           "SUITE_IQ1S_LINEAR": "cupy_rowwarp_pdl_q8_iq1s"}
    log, calls = _suite(tmp_path, "rungs_iq1s", extra_env=env)
    assert "rungs_iq1s: linear@IQ1_S=cupy_rowwarp_pdl_q8_iq1s, pinned by SUITE_IQ1S_LINEAR (linear@IQ1_S=1.5000)" in log
    bench = [c for c in calls if c.startswith("bench decode")]
    q8i = tmp_path / "machine" / "cuda-s22-all-iq1s-q8_iq1s.toml"
    assert "--expect linear@IQ1_S=1.5000" in bench[0] and f"--vs {q8i} " in bench[0], bench[0]
    assert f"--registry {q8i} " in bench[1], bench[1]
    # then the GEMVs again over the experts' step: the shared-grid form is x8/6 over the pinned one per op
    q8e = tmp_path / "machine" / "cuda-s22-all-iq1s-q8_iq1s-q8h_iq1s.toml"
    q8l = tmp_path / "machine" / "cuda-s22-all-iq1s-q8_iq1s-q8h_iq1s-q8_iq1s_sg.toml"
    assert "rungs_iq1s: linear@IQ1_S=cupy_rowwarp_pdl_q8_iq1s_sg over cupy_rowwarp_pdl_q8_iq1s" in log
    assert len(bench) == 3 and f"--registry {q8e} --vs {q8l} --graph A,B " in bench[2], bench[2]
    assert "--changes linear@IQ1_S " in bench[2] and "--expect linear@IQ1_S=1.3333" in bench[2], bench[2]
    assert any(c.startswith("diagnose") and f"--registry {q8e} " in c for c in calls)


def test_rungs_iq1s_goes_to_its_third_row_when_the_first_two_are_left_out(tmp_path):
    """Session 53's plan: the GEMV and experts rows timed (SUITE_SKIP names their diagnoses and pairs), the registries
    still made (or kept), and only the GEMVs' second row diagnosed and timed, over the experts' step."""
    _iq1s_probe_on_machine(tmp_path, experts_us=25.0)
    env = {"SUITE_TIMED": S13D_TIMED + " decode-s22-all", "STUB_PYTEST_SECONDS": "0",
           "SUITE_IQ1S_LINEAR": "cupy_rowwarp_pdl_q8_iq1s",
           "SUITE_SKIP": "diagnose-iq1s-131k decode131k-iq1s-gemv diagnose-iq1s-gemv-131k decode131k-iq1s-experts"}
    log, calls = _suite(tmp_path, "rungs_iq1s", extra_env=env)
    machine = tmp_path / "machine"
    q8e = machine / "cuda-s22-all-iq1s-q8_iq1s-q8h_iq1s.toml"
    q8l = machine / "cuda-s22-all-iq1s-q8_iq1s-q8h_iq1s-q8_iq1s_sg.toml"
    bench = [c for c in calls if c.startswith("bench decode")]
    assert len(bench) == 1 and f"--registry {q8e} --vs {q8l} --graph A,B " in bench[0], bench
    diagnoses = [c for c in calls if c.startswith("diagnose")]
    assert len(diagnoses) == 1 and f"--registry {q8e} " in diagnoses[0], diagnoses
    for name in ("diagnose-iq1s-131k", "diagnose-iq1s-gemv-131k"):  # and so their pairs, which need them
        assert f"{name}: left out (SUITE_SKIP)" in log


def test_rungs_iq1s_waits_for_the_probe_s_tests_and_figures(tmp_path):
    log, calls = _suite(tmp_path, "rungs_iq1s")
    assert "decode131k-iq1s-gemv: left out (probe_iq1s's GPU tests and figures first" in log
    assert not any("bench decode" in c for c in calls)


def test_rungs_iq1s_times_the_fastest_q8_gemvs_against_the_iq1s_step_at_131072(tmp_path):
    _iq1s_probe_on_machine(tmp_path, experts_us=25.0)
    env = {"SUITE_TIMED": S13D_TIMED + " decode-s22-all", "STUB_PYTEST_SECONDS": "0"}
    log, calls = _suite(tmp_path, "rungs_iq1s", extra_env=env)
    assert "left out (probe_iq1s's" not in log and "no per-op factor" not in log
    assert "rungs_iq1s: linear@IQ1_S=cupy_rowwarp_pdl_q8_iq1s_sg, the fastest Q8 form per op" in log
    machine = tmp_path / "machine"
    iq1s, q8i = machine / "cuda-s22-all-iq1s.toml", machine / "cuda-s22-all-iq1s-q8_iq1s_sg.toml"
    swaps = [c for c in calls if c.startswith("swap") and "linear@IQ1_S=cupy_rowwarp_pdl_q8_iq1s_sg" in c]
    assert swaps and not any(c.startswith("swap") and "linear@IQ1_S=cupy_rowwarp_pdl_q8_iq1s " in c for c in calls)
    bench = [c for c in calls if c.startswith("bench decode")]
    assert len(bench) == 2 and all("--depth 131072" in c for c in bench)
    assert "--expect linear@IQ1_S=2.0000" in bench[0] and "--expect moe_experts@IQ1_S=2.0000" in bench[1]
    assert f"--registry {iq1s} --vs {q8i} --graph A,B " in bench[0] and "--changes linear@IQ1_S " in bench[0], bench[0]
    q8e = machine / "cuda-s22-all-iq1s-q8_iq1s_sg-q8h_iq1s.toml"
    assert f"--registry {q8i} --vs {q8e} --graph A,B " in bench[1], bench[1]
    assert "--changes moe_experts@IQ1_S " in bench[1], bench[1]
    assert "decode131k-iq1s-gemv2: left out (no GEMV form faster per op than cupy_rowwarp_pdl_q8_iq1s_sg)" in log
    assert all(f"--model {machine / 'k48-iq1_s.gguf'} " in c for c in bench)
    for base in (iq1s, q8i):
        assert any(c.startswith("diagnose") and "--depth 131072" in c and f"--registry {base} " in c for c in calls)


def test_rungs_fp8_times_the_fp8_cache_at_131072_over_the_step_now(tmp_path):
    """The fp8 attention's GPU tests, the swap over the step now, the base diagnosed at 131072, then one pair there
    predicted by bytes (--expect attention=1.68); the IQ1_S row waits for an IQ1_S step on the machine."""
    env = {"SUITE_TIMED": S13D_TIMED + " decode-s22-all", "STUB_PYTEST_SECONDS": "0"}
    log, calls = _suite(tmp_path, "rungs_fp8", extra_env=env)
    machine = tmp_path / "machine"
    base, fp8 = machine / "cuda-s22-all.toml", machine / "cuda-s22-all-fp8.toml"
    assert any(c.startswith("swap") and "attention=cupy_splitk_fp8_deep_active_pdl" in c for c in calls)
    assert any(c.startswith("diagnose") and "--depth 131072" in c and f"--registry {base} " in c for c in calls)
    bench = [c for c in calls if c.startswith("bench decode")]
    assert len(bench) == 1 and "--depth 131072" in bench[0] and f"--registry {base} --vs {fp8} " in bench[0]
    assert "--changes attention " in bench[0] and "--expect attention=1.68" in bench[0], bench[0]
    assert "decode131k-iq1s-fp8: left out (no IQ1_S step on this machine)" in log


def test_rungs_fp8_takes_its_forecast_from_the_side_by_side_record(tmp_path):
    """With the GPU tests' record on the machine (perop-attnfp8-bfloat16.json), the pair's --expect is its factor, and
    the log says where it came from."""
    diag = tmp_path / "machine" / "suite-diag"
    diag.mkdir(parents=True)
    (diag / "perop-attnfp8-bfloat16.json").write_text(json.dumps(
        {"title": "t", "per_token_seconds": {"cupy_splitk_bf16_deep_active_pdl": 6e-4,
                                             "cupy_splitk_fp8_deep_active_pdl": 4e-4}}))
    env = {"SUITE_TIMED": S13D_TIMED + " decode-s22-all", "STUB_PYTEST_SECONDS": "0"}
    log, calls = _suite(tmp_path, "rungs_fp8", extra_env=env)
    assert "rungs_fp8: attention=1.500 from perop-attnfp8-bfloat16.json" in log
    assert any(c.startswith("bench decode") and "--expect attention=1.500" in c for c in calls)


def test_rungs_fp8_takes_the_iq1s_row_over_the_newest_iq1s_step(tmp_path):
    env = {"SUITE_TIMED": S13D_TIMED + " decode-s22-all", "STUB_PYTEST_SECONDS": "0", "SUITE_FP8_EXPECT": "1.5"}
    machine = tmp_path / "machine"
    machine.mkdir()
    (machine / "k48-iq1_s.gguf").write_text("")
    # the step's IQ1_S registry as rungs_iq1s leaves it (made by a swap on the stub: a copy of the repo's registry)
    iq1s = machine / "cuda-s22-all-iq1s-q8_iq1s_sg_short.toml"
    iq1s.write_text((REPO / "registry.toml").read_text())
    log, calls = _suite(tmp_path, "rungs_fp8", extra_env=env)
    bench = [c for c in calls if c.startswith("bench decode")]
    fp8 = machine / "cuda-s22-all-iq1s-q8_iq1s_sg_short-fp8.toml"
    assert len(bench) == 2 and f"--registry {iq1s} --vs {fp8} " in bench[1], bench
    assert f"--model {machine / 'k48-iq1_s.gguf'} " in bench[1] and "--expect attention=1.5" in bench[1]
    assert "--changes attention " in bench[1]


def test_rungs_twin_needs_its_side_by_side_record_for_a_forecast(tmp_path):
    """The twin split changes no byte, so there is no forecast by bytes: without the GPU tests' record both rows are
    left out, said, and nothing is swapped or timed."""
    env = {"SUITE_TIMED": S13D_TIMED + " decode-s22-all", "STUB_PYTEST_SECONDS": "0"}
    log, calls = _suite(tmp_path, "rungs_twin", extra_env=env)
    assert "rungs_twin: left out (no side-by-side record, so no forecast)" in log
    assert not any(c.startswith(("bench decode", "swap")) and "twin" in c for c in calls)
    assert re.search(r"gpu-tests-twin \(limit \d+s\): .*-k twin tests/backends/test_cupy_attention_twin.py", log)
    assert "probe-ncu-twin: no ncu on this machine; nothing profiled" in log


def test_rungs_twin_times_both_mixes_from_the_record_over_the_named_iq1s_step(tmp_path):
    """With the record (perop-attntwin-bfloat16.json), the Q4_K pair over the step now and the IQ1_S pair over the
    step SUITE_TWIN_IQ1S_BASE names (not the newest IQ1_S registry on the machine), each --expect the record's factor
    and each base diagnosed at 131072 first."""
    machine = tmp_path / "machine"
    diag = machine / "suite-diag"
    diag.mkdir(parents=True)
    (diag / "perop-attntwin-bfloat16.json").write_text(json.dumps(
        {"title": "t", "per_token_seconds": {"cupy_splitk_bf16_deep_active_pdl": 5e-4,
                                             "cupy_splitk_bf16_twin_active_pdl": 4e-4}}))
    (machine / "k48-iq1_s.gguf").write_text("")
    named = machine / "cuda-s22-all-iq1s-q8_iq1s_sg_short-q8h_iq1s_t2.toml"
    newer = machine / "cuda-s22-all-iq1s-q8_iq1s_sg_short-q8h_iq1s_t2-q8_iq1s_t2.toml"
    for f in (named, newer):
        f.write_text((REPO / "registry.toml").read_text())
    env = {"SUITE_TIMED": S13D_TIMED + " decode-s22-all", "STUB_PYTEST_SECONDS": "0",
           "SUITE_TWIN_IQ1S_BASE": str(named)}
    log, calls = _suite(tmp_path, "rungs_twin", extra_env=env)
    assert "rungs_twin: attention=1.250 from perop-attntwin-bfloat16.json" in log
    bench = [c for c in calls if c.startswith("bench decode")]
    base, twin = machine / "cuda-s22-all.toml", machine / "cuda-s22-all-twin.toml"
    assert len(bench) == 2 and f"--registry {base} --vs {twin} " in bench[0], bench
    iq1s_twin = machine / "cuda-s22-all-iq1s-q8_iq1s_sg_short-q8h_iq1s_t2-twin.toml"
    assert f"--registry {named} --vs {iq1s_twin} " in bench[1] and f"--model {machine / 'k48-iq1_s.gguf'} " in bench[1]
    assert all("--expect attention=1.250" in c and "--changes attention " in c for c in bench)
    for reg in (base, named):
        assert any(c.startswith("diagnose") and "--depth 131072" in c and f"--registry {reg} " in c for c in calls)


def test_rungs_bulk_times_the_bulk_split_from_its_record(tmp_path):
    """The bulk split's GPU tests (its file and its PDL chain case, -k bulk), then from its record the Q4_K pair over
    the step now; the IQ1_S row waits for an IQ1_S step (none here, and no twin or fp8 registry taken for one)."""
    machine = tmp_path / "machine"
    diag = machine / "suite-diag"
    diag.mkdir(parents=True)
    (diag / "perop-attnbulk-bfloat16.json").write_text(json.dumps(
        {"title": "t", "per_token_seconds": {"cupy_splitk_bf16_deep_active_pdl": 5e-4,
                                             "cupy_splitk_bf16_bulk_active_pdl": 2.5e-4}}))
    env = {"SUITE_TIMED": S13D_TIMED + " decode-s22-all", "STUB_PYTEST_SECONDS": "0"}
    log, calls = _suite(tmp_path, "rungs_bulk", extra_env=env)
    assert re.search(r"gpu-tests-bulk \(limit \d+s\): .*-k bulk tests/backends/test_cupy_attention_bulk.py "
                     r"tests/backends/test_cupy_kernels.py", log)
    assert "rungs_bulk: attention=2.000 from perop-attnbulk-bfloat16.json" in log
    bench = [c for c in calls if c.startswith("bench decode")]
    base, bulk = machine / "cuda-s22-all.toml", machine / "cuda-s22-all-bulk.toml"
    assert len(bench) == 1 and f"--registry {base} --vs {bulk} " in bench[0] and "--expect attention=2.000" in bench[0]
    assert any(c.startswith("swap") and "attention=cupy_splitk_bf16_bulk_active_pdl" in c for c in calls)
    assert "decode131k-iq1s-bulk: left out (no IQ1_S step on this machine)" in log


def test_rungs_qreg_times_the_qreg_split_from_its_record(tmp_path):
    """The queries-in-registers split's GPU tests (its file and its PDL chain case, -k qreg), then from its record the
    Q4_K pair over the step now; no IQ1_S step here, so its row is left out, said."""
    machine = tmp_path / "machine"
    diag = machine / "suite-diag"
    diag.mkdir(parents=True)
    (diag / "perop-attnqreg-bfloat16.json").write_text(json.dumps(
        {"title": "t", "per_token_seconds": {"cupy_splitk_bf16_deep_active_pdl": 5e-4,
                                             "cupy_splitk_bf16_qreg_active_pdl": 4e-4}}))
    env = {"SUITE_TIMED": S13D_TIMED + " decode-s22-all", "STUB_PYTEST_SECONDS": "0"}
    log, calls = _suite(tmp_path, "rungs_qreg", extra_env=env)
    assert re.search(r"gpu-tests-qreg \(limit \d+s\): .*-k qreg tests/backends/test_cupy_attention_qreg.py "
                     r"tests/backends/test_cupy_kernels.py", log)
    assert "rungs_qreg: attention=1.250 from perop-attnqreg-bfloat16.json" in log
    bench = [c for c in calls if c.startswith("bench decode")]
    base, qreg = machine / "cuda-s22-all.toml", machine / "cuda-s22-all-qreg.toml"
    assert len(bench) == 1 and f"--registry {base} --vs {qreg} " in bench[0] and "--expect attention=1.250" in bench[0]
    assert any(c.startswith("swap") and "attention=cupy_splitk_bf16_qreg_active_pdl" in c for c in calls)
    assert "decode131k-iq1s-qreg: left out (no IQ1_S step on this machine)" in log


def _split_records(machine, qreg: float | None, bulk: float | None, fp8_qreg: float | None = None,
                   ring: float | None = None, passed=("qreg", "bulk", "fp8_qreg", "ring")) -> None:
    """The proofs' side-by-side records on the machine (the split at 1 / FACTOR of the one-group's 5e-4 s a token) and
    their tests' markers (passed: exit 0; the others 1)."""
    diag, done = machine / "suite-diag", machine / "suite-done"
    diag.mkdir(parents=True, exist_ok=True)
    done.mkdir(parents=True, exist_ok=True)
    names = {"qreg": "cupy_splitk_bf16_qreg_active_pdl", "bulk": "cupy_splitk_bf16_bulk_active_pdl",
             "fp8_qreg": "cupy_splitk_fp8_qreg_active_pdl", "ring": "cupy_splitk_bf16_ring_active_pdl"}
    for tag, factor in (("qreg", qreg), ("bulk", bulk), ("fp8_qreg", fp8_qreg), ("ring", ring)):
        (done / f"gpu-tests-{tag}").write_text("0\n" if tag in passed else "1\n")
        if factor is not None:
            (diag / f"perop-attn{tag}-bfloat16.json").write_text(json.dumps(
                {"title": "t",
                 "per_token_seconds": {"cupy_splitk_bf16_deep_active_pdl": 5e-4, names[tag]: 5e-4 / factor}}))


def test_rungs_split_times_the_faster_split_per_op_over_the_named_iq1s_step(tmp_path):
    """Both splits' tests passed here: the bulk split's x1.6 beats the qreg split's x1.25, so its rows run, the IQ1_S
    48B made first for the IQ1_S pair over SUITE_SPLIT_IQ1S_BASE; the qreg split is neither swapped nor timed."""
    machine = tmp_path / "machine"
    _split_records(machine, 1.25, 1.6)
    named = machine / "cuda-s22-all-iq1s-q8_iq1s_t2.toml"
    named.write_text((REPO / "registry.toml").read_text())
    env = {"SUITE_TIMED": S13D_TIMED + " decode-s22-all", "STUB_PYTEST_SECONDS": "0",
           "SUITE_SPLIT_IQ1S_BASE": str(named)}
    log, calls = _suite(tmp_path, "rungs_split", extra_env=env)
    assert "rungs_split: qreg x1.250 per op" in log and "rungs_split: the bulk split (x1.600 per op)" in log
    assert any(c.startswith("synth") and "--quant iq1_s" in c for c in calls)
    bench = [c for c in calls if c.startswith("bench decode")]
    assert len(bench) == 2 and all("--expect attention=1.600" in c for c in bench), bench
    assert f"--registry {named} --vs {machine / 'cuda-s22-all-iq1s-q8_iq1s_t2-bulk.toml'} " in bench[1]
    assert not any("qreg" in c for c in calls if not c.startswith("ledger perop")), calls  # (records are imported)


def test_rungs_split_takes_the_fp8_qreg_split_by_its_own_name(tmp_path):
    """The fp8 qreg split's x1.5 over the bf16 step's attention beats the bf16 splits: its pair swaps in
    attention=cupy_splitk_fp8_qreg_active_pdl (a registry named -fp8_qreg)."""
    machine = tmp_path / "machine"
    _split_records(machine, 1.1, 1.2, 1.5)
    env = {"SUITE_TIMED": S13D_TIMED + " decode-s22-all", "STUB_PYTEST_SECONDS": "0"}
    log, calls = _suite(tmp_path, "rungs_split", extra_env=env)
    assert "rungs_split: the fp8_qreg split (x1.500 per op)" in log
    assert any(c.startswith("swap") and "attention=cupy_splitk_fp8_qreg_active_pdl" in c for c in calls)
    bench = [c for c in calls if c.startswith("bench decode")]
    assert len(bench) == 1 and f"--vs {machine / 'cuda-s22-all-fp8_qreg.toml'} " in bench[0], bench


def test_rungs_split_takes_the_ring_split_over_a_slower_fp8_one(tmp_path):
    """The ring split's x1.3 beats the fp8 qreg split's x1.2 (the bf16 cache kept where it is faster)."""
    machine = tmp_path / "machine"
    _split_records(machine, 1.0, 1.0, 1.2, 1.3)
    env = {"SUITE_TIMED": S13D_TIMED + " decode-s22-all", "STUB_PYTEST_SECONDS": "0"}
    log, calls = _suite(tmp_path, "rungs_split", extra_env=env)
    assert "rungs_split: the ring split (x1.300 per op)" in log and "rungs_split: l2pf x? " in log
    assert any(c.startswith("swap") and "attention=cupy_splitk_bf16_ring_active_pdl" in c for c in calls)


def test_rungs_split_takes_no_split_under_the_minimum_or_untested(tmp_path):
    """The qreg split's x1.30 is the fastest but its tests failed; the bulk split's x1.03 is under x1.05: no rung,
    said, nothing made or timed."""
    machine = tmp_path / "machine"
    _split_records(machine, 1.30, 1.03, passed=("bulk",))  # no fp8 qreg record: "x?"
    env = {"SUITE_TIMED": S13D_TIMED + " decode-s22-all", "STUB_PYTEST_SECONDS": "0"}
    log, calls = _suite(tmp_path, "rungs_split", extra_env=env)
    assert "rungs_split: qreg x? (no passed tests or no record) per op" in log
    assert "rungs_split: bulk x1.030 per op" in log and "rungs_split: no split reaches x1.05 per op: no rung" in log
    assert not any(c.startswith(("bench", "swap", "synth", "diagnose")) for c in calls), calls


def test_session_55_s_plan_runs_the_splits_tests_and_the_probe_and_nothing_else(tmp_path):
    """The next call's plan: the fp8 qreg, L2-prefetching, ring and bulk splits' GPU tests (each file with its PDL
    chain case), probe_split on the L2-prefetching, ring and qreg splits (SUITE_SPLIT_KERNELS), no model, registry or
    pair."""
    env = {"STUB_PYTEST_SECONDS": "0", "SUITE_SKIP": "probe-ncu-mla_split_mma_pdl probe-ncu-mla_split_bulk_pdl",
           "SUITE_SPLIT_KERNELS": "mla_split_l2pf mla_split_ring mla_split_qreg"}
    log, calls = _suite(tmp_path, "proofs_fp8_qreg", "proofs_l2pf", "proofs_ring", "proofs_bulk", "probe_split",
                        extra_env=env)
    for tag in ("fp8_qreg", "l2pf", "ring", "bulk"):
        assert re.search(rf"gpu-tests-{tag} \(limit \d+s\): .*-k {tag} tests/backends/test_cupy_attention_{tag}.py",
                         log)
    assert re.search(r"split_anatomy.py --out \S+probe-split-anatomy.json --kernels mla_split_l2pf mla_split_ring "
                     r"mla_split_qreg", log)
    assert not any(c.startswith(("bench", "swap", "diagnose", "synth")) for c in calls), calls


def test_rungs_fp8_leaves_its_rows_out_when_its_gpu_tests_fail(tmp_path):
    env = {"SUITE_TIMED": S13D_TIMED + " decode-s22-all", "STUB_PYTEST_SECONDS": "0",
           "STUB_FAIL_MATCH": "test_cupy_attention_fp8"}
    log, calls = _suite(tmp_path, "rungs_fp8", extra_env=env)
    assert "decode131k-fp8: left out (its GPU tests failed)" in log
    assert not any(c.startswith(("bench decode", "swap")) and "fp8" in c for c in calls)
