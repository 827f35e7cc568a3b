#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The full suite on a machine with a GPU: build (CUDA on), ctest, the CUDA
# tests again under compute-sanitizer, pytest on every installed framework,
# the "CUDA build, no visible GPU" path, the demo, the host-overhead script
# and the benchmark.
# Logs and the benchmark JSON go to $1 (default ./gpu-suite-out).
#
#   bash tests/run_gpu_suite.sh [outdir]
# Environment: BUILD_DIR (build-gpu), CUDAARCHS (80;90a), BENCH_FILTER, BENCH_MIN_TIME,
#   SKIP_BENCH=1, SKIP_SANITIZER=1, QG_BUILD_BENCH=OFF
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-gpu-suite-out}
mkdir -p "$OUT"
BUILD_DIR=${BUILD_DIR:-build-gpu}
PY=${PYTHON:-python3}
status=0
step() {  # step NAME COMMAND...: run, log to $OUT/NAME.log, remember failures
  local name=$1; shift
  echo "== $name"
  local t0=$SECONDS
  "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  echo "   rc=$rc ($((SECONDS - t0)) s); last lines:"
  tail -n 4 "$OUT/$name.log" | sed 's/^/   | /'
  [ $rc -eq 0 ] || status=1
  return $rc
}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/device.txt" 2>&1
git rev-parse --short HEAD >> "$OUT/device.txt" 2>/dev/null
cat "$OUT/device.txt"

step configure cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DQG_CUDA=ON \
  -DQG_BUILD_TESTS=ON -DQG_BUILD_BENCH="${QG_BUILD_BENCH:-ON}"
step build cmake --build "$BUILD_DIR" -j "$(nproc)"
step ctest ctest --test-dir "$BUILD_DIR" --output-on-failure
if [ "${SKIP_SANITIZER:-0}" != 1 ] && command -v compute-sanitizer >/dev/null; then
  for tool in memcheck racecheck initcheck synccheck; do
    step "sanitizer_$tool" compute-sanitizer --tool "$tool" --error-exitcode 1 \
      "$BUILD_DIR/tests/cpp/qg_tests" --gtest_filter='*Cuda*:*CUDA*'
  done
fi
step pip_install "$PY" -m pip install --no-build-isolation -v .
step pytest "$PY" -m pytest tests/python -q -rs
step no_visible_gpu env CUDA_VISIBLE_DEVICES= "$PY" -c \
  "import numpy as np, qg; print(qg.cuda_available(), qg.cuda_unavailable_reason()); \
   x = np.ones((4, 64), np.float32); print(qg.dequantize_q4_0(qg.quantize_q4_0(x))[0, :4])"
step info "$PY" -m qg info
step host_overhead "$PY" bench/host_overhead.py --json "$OUT/host_overhead.json"
step int8_kn "$PY" bench/int8_kn.py --device cuda
step demo "$PY" -m qg demo
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  step bench "$BUILD_DIR/bench_gemm" --benchmark_filter="${BENCH_FILTER:-.}" \
    --benchmark_min_time="${BENCH_MIN_TIME:-0.05s}" \
    --benchmark_out="$OUT/bench.json" --benchmark_out_format=json
fi
exit $status
