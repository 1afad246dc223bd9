#!/usr/bin/env bash
# The GPU session in as few device calls as possible: install sparkops on the GPU machine, prove the CUDA
# registries, synthesize the 48B, time the ladder, run every GPU test and the per-op benchmarks.
#
#   bench/gpu_suite.sh STAGE [STAGE ...]
#     install     wheels from .whl/ (gguf, tomlkit: not on the image) + sparkops, editable, offline
#     registries  prove and select the CUDA registries by swap: all-torch (the baseline), triton (the best
#                 registry: every op that has a Triton kernel, attention=triton_splitk), cupy (the decode kernels)
#     synth       the 48B q4_k_m GGUF, once per machine, in /tmp
#     generate    text from the 48B: torch eager, triton through the captured CUDA graph
#     gate        check every CUDA implementation the registries stage did not select; the captured-step
#                 model gate on k3-nano for the torch and triton registries
#     ladder      48B decode at 0, 4096, 32768: torch vs triton (eager), triton eager vs graph; prefill 32768;
#                 diagnose at 0, 4096, 32768
#     ladder131k  48B decode at 131072: the same two pairs; diagnose at 131072
#     tests       every test marked gpu
#     opbench     per-op benchmarks, cupy / triton / torch side by side
#
# Budget: the script stops starting work at SUITE_BUDGET seconds (default 560) after it began, and gives
# each command only the time left, so a call of 600 s always returns its results. Everything a call
# produced comes back in three files: $OUT/suite.log, $OUT/results.tgz (logs, JSON, registries, PNGs)
# and $OUT/bench.tgz (the machine's scoreboard: ledger.jsonl, frontier.toml, LADDER.md).
# Import the ledger here with `sparkops ledger import FILE`.
#
# The device tool carries .whl (name it in `carry`); prepare it here with:
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux2014_x86_64 -d .whl gguf==0.19.0 tomlkit==0.15.2
set -uo pipefail
T0=$(date +%s)
BUDGET=${SUITE_BUDGET:-560}
OUT=${OUT:-/tmp/sparkops-out}
R=/tmp/suite-results/$T0        # this call's logs (the machine's /tmp lives as long as it is held)
B=/tmp/suite-bench              # the machine's scoreboard, kept across calls
mkdir -p "$OUT" "$R" "$B"
export PYTHONUNBUFFERED=1 SPARKOPS_CACHE=/tmp/sparkops-cache COLUMNS=160 PYTHONPATH=/tmp/site SPARKOPS_BENCH_DIR=$B
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
M=/tmp/k48-q4_k_m.gguf
TORCH_REG=/tmp/cuda-torch.toml TRITON_REG=/tmp/cuda-triton.toml CUPY_REG=/tmp/cuda-cupy.toml

log() { echo "== $(( $(date +%s) - T0 ))s $*" | tee -a "$OUT/suite.log"; }
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
# run NAME MIN_SECONDS CMD...: run CMD if at least MIN_SECONDS are left, never past the budget
run() {
  local name=$1 need=$2; shift 2
  local l; l=$(left)
  if (( l < need )); then log "SKIP $name: ${l}s left, it needs ~${need}s"; return 1; fi
  log "$name (limit ${l}s): $*"
  timeout --kill-after=5 "$l" "$@" > "$R/$name.log" 2>&1
  local rc=$?
  log "$name rc=$rc$( ((rc == 124 || rc == 137)) && echo ' (stopped at the budget)')"
  tail -n 12 "$R/$name.log" | cut -c1-200
  return $rc
}
pack() {
  cp -f /tmp/cuda-*.toml "$R/" 2>/dev/null
  tar czf "$OUT/results.tgz" -C "$R" . 2>/dev/null
  tar czf "$OUT/bench.tgz" -C "$B" . 2>/dev/null
  log "packed: $(du -sh "$R" | cut -f1) of results, scoreboard $(wc -l < "$B/ledger.jsonl" 2>/dev/null || echo 0) rows"
}
trap pack EXIT

ALL_TORCH="embedding=torch rmsnorm=torch add_rmsnorm=torch linear=torch quantize_act=torch rmsnorm_quantize=torch
short_conv=torch kda=torch gated_rmsnorm=torch attention=torch moe_router=torch moe_experts=torch swiglu=torch sample=torch"
# swap_into REGISTRY BASE OP=IMPL...: BASE's selections plus the named ones, proven here; all at once, else one by
# one (an op whose kernel fails its gate keeps BASE's selection, and the log says which)
swap_into() {
  local reg=$1 base=$2; shift 2
  cp "$base" "$reg.new"
  if ! sparkops swap "$@" --device cuda --registry "$reg.new"; then
    echo "-- not all at once; one by one:"
    local pair
    for pair in "$@"; do sparkops swap "$pair" --device cuda --registry "$reg.new" || echo "-- KEPT BASE FOR $pair"; done
  fi
  mv "$reg.new" "$reg"
}
export -f swap_into
GATE="--gate-depths 1,64,4096 --gate-golden $TORCH_REG --bench-dir $B --device cuda"

for stage in "$@"; do case $stage in
install)
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { log "wheel install failed"; exit 1; }
  python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . > "$R/install.log" 2>&1 \
    || { log "sparkops install failed"; cat "$R/install.log"; exit 1; }
  nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,memory.used,memory.total --format=csv | tee -a "$OUT/suite.log"
  python3 -c "import torch, triton, cupy; print(torch.__version__, triton.__version__, cupy.__version__)" | tee -a "$OUT/suite.log"
  git log --oneline -1 | tee -a "$OUT/suite.log"
  [ -f "$B/ledger.jsonl" ] || cp bench/ledger.jsonl bench/frontier.toml "$B/"
  sparkops plugins > "$R/plugins.txt" 2>&1
  ;;
registries)
  [ -f $TORCH_REG ] || run swap-torch 60 bash -c 'set -e; cp registry.toml $0.new
      sparkops swap $1 --device cuda --registry $0.new; mv $0.new $0' $TORCH_REG "$ALL_TORCH"
  [ -f $TRITON_REG ] || run swap-triton 60 bash -c 'swap_into "$@"' _ $TRITON_REG $TORCH_REG embedding=triton rmsnorm=triton add_rmsnorm=triton \
      linear=triton short_conv=triton kda=triton gated_rmsnorm=triton attention=triton_splitk moe_router=triton \
      moe_experts=triton sample=triton
  [ -f $CUPY_REG ] || run swap-cupy 60 bash -c 'swap_into "$@"' _ $CUPY_REG $TORCH_REG rmsnorm=cupy linear=cupy_dp4a quantize_act=cupy \
      rmsnorm_quantize=cupy kda=cupy_recurrent attention=cupy_splitk moe_experts=cupy_dp4a
  ;;
synth)    [ -f $M ] || run synth48 150 sparkops synth --preset kimi-linear-48b-a3b --quant q4_k_m -o $M ;;
generate)
  run generate48-torch 60 sparkops generate --model $M --device cuda -n 16 --registry $TORCH_REG
  run generate48-triton-graph 60 sparkops generate --model $M --device cuda -n 64 --registry $TRITON_REG --graph
  ;;
gate)
  # what the registries stage did not prove already: every other CUDA implementation
  run gate-others 60 sparkops check linear=torch_bf16 linear=triton_fp32 kda=torch_recurrent kda=torch_chunked \
      kda=triton_chunked attention=torch_bf16 attention=triton attention=cupy_splitk_bf16 rmsnorm_quantize=cupy_unfused \
      moe_experts=torch_bf16 moe_experts=triton_fp32 --device cuda --json-out "$R/gate-others.json"
  run gate-captured-torch 30 sparkops check --model k3-nano --registry $TORCH_REG --device cuda --captured
  run gate-captured-triton 30 sparkops check --model k3-nano --registry $TRITON_REG --device cuda --captured
  run reference-verify 10 sparkops reference verify
  ;;
ladder)
  run decode-torch-vs-triton 150 sparkops bench decode --model $M --depth 0,4096,32768 --tokens 32 --repeats 5 \
      --registry $TORCH_REG --vs $TRITON_REG $GATE --change "Triton kernels for every op that has one (eager)"
  run decode-triton-graph 120 sparkops bench decode --model $M --depth 0,4096,32768 --tokens 64 --repeats 5 \
      --registry $TRITON_REG --vs $TRITON_REG --graph B $GATE --change "the whole decode step as one CUDA graph (triton)"
  run prefill-32k 150 sparkops bench prefill --model $M --tokens 32768 --chunk 4096 --repeats 2 \
      --registry $TORCH_REG --vs $TRITON_REG $GATE --change "Triton kernels for every op that has one (prefill)"
  run diagnose 90 sparkops diagnose --model $M --device cuda --depth 0,4096,32768 --registry $TRITON_REG --out "$R/diag"
  ;;
ladder131k)
  run decode131k-torch-vs-triton 200 sparkops bench decode --model $M --depth 131072 --tokens 16 --repeats 3 --chunk 1024 \
      --registry $TORCH_REG --vs $TRITON_REG $GATE --change "Triton kernels for every op that has one (eager)"
  run decode131k-triton-graph 120 sparkops bench decode --model $M --depth 131072 --tokens 64 --repeats 5 --chunk 2048 \
      --registry $TRITON_REG --vs $TRITON_REG --graph B $GATE --change "the whole decode step as one CUDA graph (triton)"
  run diagnose131k 60 sparkops diagnose --model $M --device cuda --depth 131072 --registry $TRITON_REG --out "$R/diag"
  ;;
tests)    run gpu-tests 60 python3 -m pytest -q -m gpu -p no:cacheprovider tests --junitxml="$R/gpu-tests.xml" ;;
opbench)  run opbench 60 python3 -m pytest -q -p no:cacheprovider bench --benchmark-only \
            --benchmark-group-by=group --benchmark-json="$R/opbench.json" ;;
*) log "unknown stage $stage" ;;
esac; done
log "done"
