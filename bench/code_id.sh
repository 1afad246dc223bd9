#!/usr/bin/env bash
# code_id.sh: a hash of the sources and tests a GPU call carries (gpu_suite.sh's SUITE_CODE_ID: a step that failed is
# run again under other code). One place for the expression: gpu_lanes.sh computes it once and exports it to its lanes.
find src plugins tests bench -type f \( -name '*.py' -o -name '*.cu' -o -name '*.cuh' -o -name '*.sh' -o -name '*.toml' \) \
  -not -path '*/__pycache__/*' -not -path 'bench/gpu-runs/*' -print0 2>/dev/null \
  | sort -z | xargs -0 sha256sum 2>/dev/null | sha256sum | cut -c1-16
