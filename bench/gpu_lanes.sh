#!/usr/bin/env bash
# A machine of 2 GPUs in one call: stages of bench/gpu_suite.sh that need both GPUs first, then two lanes at
# once, one per GPU (each its own process, logs and $OUT/results-gpuN.tgz), all stopping by TOTAL_SECONDS.
#
#   bench/gpu_lanes.sh TOTAL_SECONDS "GPU0 STAGES" "GPU1 STAGES" ["STAGES ON BOTH GPUS, FIRST"]
#
# Steps already done on this machine are skipped (gpu_suite.sh's $DONE), so each call names what it wants.
# A lane that times decode shares the host with the other lane: each figure's A/B pair is still interleaved
# in one process (ABAB), and the write-up says which lanes ran side by side.
set -u
T0=$(date +%s)
[ $# -ge 3 ] || { echo "usage: $0 TOTAL_SECONDS 'GPU0 STAGES' 'GPU1 STAGES' ['BOTH-GPU STAGES']"; exit 2; }
export SUITE_DEADLINE=$((T0 + $1))
export SUITE_CODE_ID=${SUITE_CODE_ID:-$(bash bench/code_id.sh)}  # the lanes share the checkout: hashed once
bash bench/gpu_suite.sh install || exit 1
GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
if [ "$GPUS" -lt 2 ]; then  # a machine of one GPU: one lane, GPU 0's stages then GPU 1's; nothing needing two
  echo "== $GPUS GPU(s) here: the two lanes run one after the other; skipped (needs two GPUs): ${4:-nothing}" \
    | tee -a "${OUT:-${SUITE_TMP:-/tmp}/sparkops-out}/suite.log"
  # shellcheck disable=SC2086 # the stage lists are word lists
  SUITE_LANE=gpu0 bash bench/gpu_suite.sh $2 $3
else
  # shellcheck disable=SC2086
  [ -n "${4:-}" ] && SUITE_LANE=both bash bench/gpu_suite.sh $4
  # Each lane's CPU libraries (NumPy's BLAS, torch's CPU ops, OpenMP) get half the host's cores: session 16 ran the
  # two test shards side by side and both slowed ~1.35x (tests1of2 415 s against 315 s in session 15; tests2of2 did
  # not finish in 533 s). The suspect, not measured apart: both lanes' NumPy references threading over every core.
  HALF=$(( $(nproc) / 2 )); [ "$HALF" -ge 1 ] || HALF=1
  export OMP_NUM_THREADS=$HALF OPENBLAS_NUM_THREADS=$HALF MKL_NUM_THREADS=$HALF
  # shellcheck disable=SC2086
  SUITE_LANE=gpu0 CUDA_VISIBLE_DEVICES=0 bash bench/gpu_suite.sh $2 &
  # shellcheck disable=SC2086
  SUITE_LANE=gpu1 CUDA_VISIBLE_DEVICES=1 bash bench/gpu_suite.sh $3 &
  wait
fi
SUITE_LANE=final bash bench/gpu_suite.sh  # no stage: packs the scoreboard as the lanes left it
