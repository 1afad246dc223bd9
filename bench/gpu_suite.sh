#!/usr/bin/env bash
# The GPU session in as few device calls as possible: install sparkops on the GPU machine, run every
# GPU test, the gate on CUDA, the per-op benchmarks and the 48B ladder; logs and JSON go under $OUT.
#
#   bench/gpu_suite.sh STAGE [STAGE ...]
#     install   wheels from .whl/ (gguf, tomlkit: not on the image) + sparkops, editable, offline
#     tests     every test marked gpu (torch, triton, cupy, gate, scoreboard)
#     gate      sparkops check --all --device cuda, and a CUDA registry proven by swap
#     synth     the 48B q4_k_m GGUF, once per machine, in /tmp
#     generate  text from the 48B on the proven CUDA registry
#     opbench   per-op benchmarks, cupy / triton / torch side by side
#     ladder    decode at 0 and 4096 + prefill 32768 (one call); ladder131k: decode at 32768 and 131072
#
# One call (10 min max) fits: install tests gate | install synth generate opbench | install ladder | ...
# The device tool carries .whl (name it in `carry`); prepare it here with:
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux2014_x86_64 -d .whl gguf==0.19.0 tomlkit==0.15.2
set -uo pipefail
OUT=${OUT:-/tmp/sparkops-out}
mkdir -p "$OUT/bench"
export PYTHONUNBUFFERED=1 SPARKOPS_CACHE=/tmp/sparkops-cache COLUMNS=160
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
M=/tmp/k48-q4_k_m.gguf
CUDA_REG=/tmp/cuda-torch.toml
log() { echo "== $(date +%T) $*" | tee -a "$OUT/suite.log"; }
run() { local name=$1; shift; log "$name: $*"; "$@" > "$OUT/$name.log" 2>&1; local rc=$?
        log "$name rc=$rc"; tail -n 30 "$OUT/$name.log"; }

for stage in "$@"; do case $stage in
install)
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { log "wheel install failed"; exit 1; }
  export PYTHONPATH=/tmp/site
  python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 \
    || { log "sparkops install failed"; cat "$OUT/install.log"; exit 1; }
  nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,memory.used,memory.total --format=csv | tee -a "$OUT/suite.log"
  python3 -c "import torch, triton, cupy; print(torch.__version__, triton.__version__, cupy.__version__)" | tee -a "$OUT/suite.log"
  sparkops plugins > "$OUT/plugins.txt" 2>&1
  ;;
tests)    run gpu-tests python3 -m pytest -q -m gpu -p no:cacheprovider tests --junitxml="$OUT/gpu-tests.xml" ;;
gate)
  run gate-all sparkops check --all --device cuda --json-out "$OUT/gate-all.json"
  cp registry.toml $CUDA_REG
  run swap-cuda sparkops swap embedding=torch rmsnorm=torch add_rmsnorm=torch linear=torch quantize_act=torch \
      rmsnorm_quantize=torch short_conv=torch kda=torch gated_rmsnorm=torch attention=torch moe_router=torch \
      moe_experts=torch swiglu=torch sample=torch --device cuda --registry $CUDA_REG
  cp $CUDA_REG "$OUT/cuda-torch.toml"
  run reference-verify sparkops reference verify
  run gate-captured sparkops check --model k3-nano --registry $CUDA_REG --device cuda --captured
  ;;
synth)    [ -f $M ] || run synth48 sparkops synth --preset kimi-linear-48b-a3b --quant q4_k_m -o $M ;;
generate) run generate48 sparkops generate --model $M --device cuda -n 16 --registry $CUDA_REG
          run generate48-graph sparkops generate --model $M --device cuda -n 64 --registry $CUDA_REG --graph ;;
opbench)  run opbench python3 -m pytest -q -p no:cacheprovider bench --benchmark-only \
            --benchmark-group-by=group --benchmark-json="$OUT/opbench.json" ;;
ladder|ladder131k)
  [ -f bench/ledger.jsonl ] && cp bench/ledger.jsonl bench/frontier.toml "$OUT/bench/"
  G="--registry $CUDA_REG --gate-depths 1,64,4096 --gate-golden $CUDA_REG --bench-dir $OUT/bench --device cuda"
  if [ $stage = ladder ]; then
    run decode-0-4096 sparkops bench decode --model $M --depth 0,4096 --tokens 64 --repeats 7 $G \
        --change "torch baseline on CUDA"
    run prefill-32k sparkops bench prefill --model $M --tokens 32768 --chunk 2048 --repeats 3 $G
  else
    run decode-32k sparkops bench decode --model $M --depth 32768 --tokens 64 --repeats 7 --chunk 2048 $G
    run decode-131k sparkops bench decode --model $M --depth 131072 --tokens 32 --repeats 5 --chunk 1024 $G
  fi
  run diagnose sparkops diagnose --model $M --device cuda --depth 131072 --registry $CUDA_REG --out "$OUT/diag"
  ;;
*) log "unknown stage $stage" ;;
esac; done
log done
