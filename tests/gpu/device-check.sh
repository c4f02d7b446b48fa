#!/usr/bin/env bash
# Builds and runs the CUDA checks on a machine with an NVIDIA GPU:
# test_format_decode (CPU), the gpu-labelled tests through ctest
# (test_cuda_kernels: every CUDA kernel against the scalar CPU backend;
# test_cuda_backend: every op of the CUDA KernelBackend; test_cuda_engine:
# the fixture models on --backend cuda against their references),
# bench_cuda (copy bandwidth and the decode matmuls of 4096..16384 x 4096 at
# 1/4/8 rows), bench_gemv --backends cuda (BF16 and NVFP4, an 8B-class step
# at 1/4/8 rows, through the backend interface), octet_bench_engine --backend
# cuda (Qwen3-0.6B BF16 and NVFP4, Llama-3.2-1B BF16: prefill, decode,
# batched decode), optionally test_cuda_kernels' small shapes under
# compute-sanitizer memcheck. Writes logs, the benches' JSON and
# summary.json to $OUT (default ./device-check-out) and prints a short
# summary. Meant to finish in under 8 minutes on an H200 (16 cores): one
# architecture, only these targets; each step's timeout is cut to what is
# left of BUDGET. The fixtures come from FIXTURES_DIR (default
# ../shared/fixtures beside the checkout, else shared/fixtures inside it);
# without them test_cuda_engine skips (exit 77), which the summary shows.
#
#   tests/gpu/device-check.sh            # from anywhere; OUT=/path to choose the output
#   BUILD_DIR=/tmp/b SANITIZER=0 JOBS=4 BUDGET=600 tests/gpu/device-check.sh
#
# What it needs. The project configures as a whole (CMakeLists.txt), and
# cmake/OctetDependencies.cmake requires these even for the CUDA targets:
#   cmake >= 3.25, ninja, a C++20 compiler, nvcc (CUDA 12.8+/13 for sm_121;
#   /usr/local/cuda/bin is searched), nvidia-smi and a driver;
#   Qt 6 Core + Test (qt6-base-dev), nlohmann-json3-dev, libyaml-cpp-dev,
#   libsqlite3-dev, libpcre2-dev, libicu-dev, libcpp-httplib-dev,
#   libgrpc++-dev + protobuf-compiler-grpc (gRPC, Protobuf, grpc_cpp_plugin),
#   libssl-dev (OpenSSL, app/).
# The GUI (Qt Widgets/Charts), NCCL and RDMA verbs are switched off here. On
# a machine with no package registry a missing one cannot be installed: the
# script then stops after the configure step and names what CMake did not
# find (also in $OUT/configure.log and summary.json).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${OUT:-./device-check-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
BUILD=${BUILD_DIR:-$ROOT/build/device-check}
SANITIZER=${SANITIZER:-1}
START=$(date +%s)
# Seconds the whole check may take; each step's timeout is cut to what is left.
BUDGET=${BUDGET:-470}
FIXTURES_DIR=${FIXTURES_DIR:-}
if [[ -z "$FIXTURES_DIR" ]]; then
  for d in "$ROOT/../shared/fixtures" "$ROOT/shared/fixtures"; do
    if [[ -f "$d/README.md" ]]; then FIXTURES_DIR=$(cd "$d" && pwd); break; fi
  done
fi
# timeout for a step: its own cap, or what is left of the budget minus a reserve.
step_timeout() {
  local left=$(( BUDGET - ($(date +%s) - START) - $2 ))
  (( left < $1 )) && echo $(( left > 10 ? left : 10 )) || echo "$1"
}

# ---- summary.json (written on every exit path) ------------------------------
json_escape() { printf '%s' "$1" | sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' | tr -d '\n\r'; }
GPU_NAME=""; DRIVER=""; COMPUTE_CAP=""; ARCH=""; STAGE="start"; PROBLEM=""
FORMAT_RC=""; GPU_RC=""; SAN_RC=""; BENCH_RC=""; GEMV_RC=""; ENGINE_RC=""; GPU_TESTS=""
json_or_null() { if [[ -s "$1" ]] && head -c 1 "$1" | grep -q '[{[]'; then cat "$1"; else echo null; fi; }
write_summary() {
  local bench; bench=$(json_or_null "$OUT/bench_cuda.json")
  local result="passed"
  if [[ -n "$PROBLEM" ]]; then result="failed"; fi
  cat > "$OUT/summary.json" <<EOF
{
  "gpu": "$(json_escape "$GPU_NAME")",
  "driver": "$(json_escape "$DRIVER")",
  "compute_capability": "$(json_escape "$COMPUTE_CAP")",
  "cuda_architectures": "$(json_escape "$ARCH")",
  "stage_reached": "$STAGE",
  "result": "$result",
  "problem": "$(json_escape "$PROBLEM")",
  "test_format_decode_exit": ${FORMAT_RC:-null},
  "ctest_gpu_exit": ${GPU_RC:-null},
  "gpu_tests": "$(json_escape "$GPU_TESTS")",
  "fixtures_dir": "$(json_escape "$FIXTURES_DIR")",
  "sanitizer_memcheck_exit": ${SAN_RC:-null},
  "bench_cuda_exit": ${BENCH_RC:-null},
  "bench_gemv_exit": ${GEMV_RC:-null},
  "bench_engine_exit": ${ENGINE_RC:-null},
  "seconds": $(( $(date +%s) - START )),
  "bench": $bench,
  "bench_gemv_bf16": $(json_or_null "$OUT/bench_gemv_bf16.json"),
  "bench_gemv_nvfp4": $(json_or_null "$OUT/bench_gemv_nvfp4.json"),
  "bench_engine": $(json_or_null "$OUT/bench_engine.json")
}
EOF
}
fail() {
  PROBLEM="$1"
  echo "device-check: $1" >&2
  write_summary
  echo "device-check: summary in $OUT/summary.json" >&2
  exit "${2:-1}"
}

# ---- tools ------------------------------------------------------------------
export PATH="$PATH:/usr/local/cuda/bin"
for tool in cmake ninja c++; do
  command -v "$tool" >/dev/null || fail "missing $tool (needed to build)" 2
done
NVCC=${CUDACXX:-$(command -v nvcc || true)}
[[ -n "$NVCC" ]] || fail "missing nvcc (the CUDA toolkit; looked in PATH and /usr/local/cuda/bin)" 2
command -v nvidia-smi >/dev/null || fail "missing nvidia-smi (no NVIDIA driver installed?)" 2
if command -v pkg-config >/dev/null && ! pkg-config --exists Qt6Test Qt6Core; then
  echo "device-check: warning: pkg-config finds no Qt6Test/Qt6Core; the configure may fail" >&2
fi

# ---- the GPU ----------------------------------------------------------------
STAGE="gpu"
# compute_cap is a query field from driver 510 on; without it CMake detects
# the architecture itself ("native").
if ! GPU_LINE=$(nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader \
    2>/dev/null | head -n 1) || [[ -z "$GPU_LINE" ]]; then
  GPU_LINE=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -n 1) ||
    fail "nvidia-smi failed: $GPU_LINE" 2
fi
IFS=',' read -r GPU_NAME DRIVER COMPUTE_CAP <<<"$GPU_LINE"
GPU_NAME=$(echo "$GPU_NAME" | xargs); DRIVER=$(echo "$DRIVER" | xargs); COMPUTE_CAP=$(echo "$COMPUTE_CAP" | xargs)
if [[ "$COMPUTE_CAP" =~ ^[0-9]+\.[0-9]+$ ]]; then
  ARCH=${COMPUTE_CAP/./}  # 9.0 -> 90, 12.1 -> 121
else
  ARCH=native             # an older nvidia-smi without compute_cap: let CMake detect it
fi
echo "device-check: $GPU_NAME, driver $DRIVER, compute capability $COMPUTE_CAP -> architectures $ARCH"
echo "device-check: nvcc $("$NVCC" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')"

# ---- configure and build ----------------------------------------------------
STAGE="configure"
if ! cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CUDA_COMPILER="$NVCC" -DOCTET_WITH_CUDA=ON -DOCTET_CUDA_ARCHITECTURES="$ARCH" \
    -DOCTET_WITH_GUI=OFF -DOCTET_WITH_NCCL=OFF -DOCTET_WITH_VERBS=OFF \
    ${FIXTURES_DIR:+-DOCTET_FIXTURES_DIR="$FIXTURES_DIR"} >"$OUT/configure.log" 2>&1; then
  missing=$(grep -iE "could not find|not found|required" "$OUT/configure.log" | grep -v '^--' | head -n 5 | tr '\n' ' ')
  tail -n 25 "$OUT/configure.log" >&2
  fail "configure failed (a missing package?): ${missing:-see $OUT/configure.log}" 3
fi
STAGE="build"
if ! ninja -C "$BUILD" -j"${JOBS:-$(nproc)}" test_format_decode test_cuda_kernels \
    test_cuda_backend test_cuda_engine bench_cuda bench_gemv octet_bench_engine \
    >"$OUT/build.log" 2>&1; then
  grep -E "error|Error" "$OUT/build.log" | head -n 20 >&2 || true
  fail "build failed (see $OUT/build.log)" 4
fi
echo "device-check: built in $(( $(date +%s) - START )) s"

# ---- tests ------------------------------------------------------------------
STAGE="tests"
FORMAT_RC=0
timeout 60 "$BUILD/tests/test_format_decode" >"$OUT/test_format_decode.log" 2>&1 || FORMAT_RC=$?
GPU_RC=0
# Every gpu-labelled test through ctest (the environment octet_add_test
# gives them; a skip, exit 77, shows as "Not Run" / skipped, never a pass).
timeout "$(step_timeout 300 150)" ctest --test-dir "$BUILD" -L gpu --output-on-failure \
  --timeout 240 -V >"$OUT/ctest_gpu.log" 2>&1 || GPU_RC=$?
GPU_TESTS=$(grep -E "^ *[0-9]+/[0-9]+ Test +#[0-9]+:" "$OUT/ctest_gpu.log" | sed 's/  */ /g' | tr '\n' ';' || true)
echo "device-check: test_format_decode exit $FORMAT_RC, ctest -L gpu exit $GPU_RC"
grep -E "^ *[0-9]+/[0-9]+ Test +#[0-9]+:|tests passed|Totals" "$OUT/ctest_gpu.log" || true
if [[ $GPU_RC -ne 0 ]]; then grep -E "FAIL!|Loc:" "$OUT/ctest_gpu.log" | head -n 30 || true; fi

SANITIZER_BIN=$(command -v compute-sanitizer || true)
# Out-of-bounds reads and misaligned accesses that happen to give right
# answers: the small shapes under memcheck, if the tool is there and there is
# time (exit 124: it ran out of time, which is not a finding).
if [[ "$SANITIZER" == 1 && -n "$SANITIZER_BIN" && $GPU_RC -eq 0 ]] &&
   (( $(step_timeout 120 280) > 30 )); then
  SAN_RC=0
  OCTET_CUDA_TEST_QUICK=1 timeout "$(step_timeout 120 280)" "$SANITIZER_BIN" --tool memcheck \
    --error-exitcode 9 "$BUILD/tests/test_cuda_kernels" >"$OUT/memcheck.log" 2>&1 || SAN_RC=$?
  echo "device-check: compute-sanitizer memcheck (small shapes) exit $SAN_RC" \
       "$([[ $SAN_RC -eq 124 ]] && echo '(timed out: not a finding)')"
  grep -E "^=========.*(Invalid|Error|error)" "$OUT/memcheck.log" | head -n 10 || true
elif [[ "$SANITIZER" == 1 ]]; then
  echo "device-check: compute-sanitizer not run (not found, the test failed, or no time left)"
fi

# ---- benchmark --------------------------------------------------------------
STAGE="bench"
BENCH_RC=0
timeout "$(step_timeout 90 120)" "$BUILD/bin/bench_cuda" --json "$OUT/bench_cuda.json" >"$OUT/bench_cuda.txt" 2>&1 ||
  BENCH_RC=$?
cat "$OUT/bench_cuda.txt"
# The decode matmuls through the backend interface (PrepareWeight'd copies).
GEMV_RC=0
for fmt in bf16 nvfp4; do
  rc=0
  timeout "$(step_timeout 45 90)" "$BUILD/bin/bench_gemv" --backends cuda --format "$fmt" \
    --shape 8b --rows 1,4,8 --rounds 3 >"$OUT/bench_gemv_$fmt.json" 2>"$OUT/bench_gemv_$fmt.txt" || rc=$?
  echo "device-check: bench_gemv cuda $fmt exit $rc"; cat "$OUT/bench_gemv_$fmt.txt"
  (( rc != 0 )) && GEMV_RC=$rc
done
# The engine on random-weight checkpoints of real shapes (written to the
# build dir the first time: a few GB).
ENGINE_RC=0
timeout "$(step_timeout 150 10)" "$BUILD/bin/octet_bench_engine" --backend cuda \
  --dir "$BUILD/bench-models" --models qwen3-0.6b-bf16,qwen3-0.6b-nvfp4,llama3.2-1b-bf16 \
  --prompt 512 --decode 64 --concurrency 1,4,8 --stream-mib 1024 \
  >"$OUT/bench_engine.json" 2>"$OUT/bench_engine.txt" || ENGINE_RC=$?
echo "device-check: octet_bench_engine --backend cuda exit $ENGINE_RC"; tail -n 20 "$OUT/bench_engine.txt"

STAGE="done"
SAN_FAILED=0
if [[ -n "$SAN_RC" && "$SAN_RC" != 0 && "$SAN_RC" != 124 ]]; then SAN_FAILED=1; fi
if [[ $FORMAT_RC -ne 0 || $GPU_RC -ne 0 || $SAN_FAILED -ne 0 || $BENCH_RC -ne 0 ||
      $GEMV_RC -ne 0 || $ENGINE_RC -ne 0 ]]; then
  fail "format test $FORMAT_RC, ctest gpu $GPU_RC, memcheck ${SAN_RC:-not run}, bench_cuda $BENCH_RC, bench_gemv $GEMV_RC, bench_engine $ENGINE_RC" 1
fi
write_summary
echo "device-check: all passed in $(( $(date +%s) - START )) s; summary in $OUT/summary.json"
