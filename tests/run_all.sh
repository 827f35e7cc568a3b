#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# One command, from a fresh clone: install what the tests need, build the C++
# core with its tests and bench, run ctest, install the Python package, run pytest.
#
#   bash tests/run_all.sh
#
# Environment:
#   QG_TEST_FRAMEWORKS=0   skip installing PyTorch and JAX (their tests then skip)
#   QG_CUDA=AUTO|ON|OFF    build the CUDA backend (default AUTO: when nvcc is found)
#   CUDAARCHS=90a          CUDA architectures to build (default: 80;90a)
#   BUILD_DIR=build        where the C++ build goes
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}

have_py() { "$PY" -c "import $1" >/dev/null 2>&1; }
log() { printf '\n== %s\n' "$*"; }

log "system packages (GoogleTest, Google Benchmark, CMake, Ninja)"
need_apt=()
[ -f /usr/include/gtest/gtest.h ] || need_apt+=(libgtest-dev libgmock-dev)
[ -f /usr/include/benchmark/benchmark.h ] || need_apt+=(libbenchmark-dev)
command -v cmake >/dev/null || need_apt+=(cmake)
command -v ninja >/dev/null || need_apt+=(ninja-build)
if [ ${#need_apt[@]} -gt 0 ]; then
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
  else
    echo "missing ${need_apt[*]}: CMake will download GoogleTest/Google Benchmark sources instead"
  fi
fi

log "Python packages"
"$PY" -m pip install -q numpy pytest gguf ml_dtypes "scikit-build-core>=0.10" "nanobind>=2.10.1"
if [ "${QG_TEST_FRAMEWORKS:-1}" != 0 ]; then
  have_py torch || "$PY" -m pip install -q "torch==2.13.0" || "$PY" -m pip install -q torch ||
    echo "PyTorch could not be installed: its tests will skip"
  have_py jax || "$PY" -m pip install -q jax jaxlib || echo "JAX could not be installed: its tests will skip"
fi

log "C++ build ($BUILD_DIR) and ctest"
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
cmake -S . -B "$BUILD_DIR" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DQG_BUILD_TESTS=ON -DQG_BUILD_BENCH=ON \
  -DQG_CUDA="${QG_CUDA:-AUTO}"
cmake --build "$BUILD_DIR" -j "$JOBS"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$JOBS"

if [ -d "$BUILD_DIR/CMakeFiles/qg_core.dir/cuda" ]; then  # the main build has the CUDA backend
  log "C++ build without CUDA ($BUILD_DIR-nocuda): the stub backend and its messages"
  cmake -S . -B "$BUILD_DIR-nocuda" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DQG_BUILD_TESTS=ON \
    -DQG_BUILD_BENCH=OFF -DQG_CUDA=OFF
  cmake --build "$BUILD_DIR-nocuda" -j "$JOBS"
  ctest --test-dir "$BUILD_DIR-nocuda" --output-on-failure -j "$JOBS"
fi

log "Python package and pytest"
"$PY" -m pip install -q --no-build-isolation .
"$PY" -m pytest tests/python -q -rs
