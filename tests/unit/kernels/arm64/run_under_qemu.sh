#!/usr/bin/env bash
# Runs the NEON kernels and the engine fixtures on aarch64 from an x86-64 host:
# cross-compiles two plain (Qt-free) programs statically and runs them under
# qemu-user. Needs: apt-get install g++-aarch64-linux-gnu qemu-user
#   tests/unit/kernels/arm64/run_under_qemu.sh [FIXTURES_DIR]
# Prints "N passed, 0 failed" / one line per model; exits non-zero on a failure.
set -euo pipefail
root="$(cd "$(dirname "$0")/../../../.." && pwd)"
fixtures="${1:-$root/../shared/fixtures}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
mkdir -p "$out/inc" && ln -s /usr/include/nlohmann "$out/inc/nlohmann"
cxx="aarch64-linux-gnu-g++ -O2 -std=c++20 -static -I$root/kernels/include -I$root/kernels/src \
  -I$root/base/include -I$root/engine/include -isystem $out/inc"
kernels="$root/kernels/src/backend.cpp $root/kernels/src/thread_pool.cpp $root/kernels/src/weight.cpp \
  $root/kernels/src/cpu/cpu_backend.cpp $root/kernels/src/cpu/isa_scalar.cpp \
  $root/kernels/src/cpu/isa_neon.cpp"
base="$root/base/src/status.cpp $root/base/src/file_util.cpp $root/base/src/npy.cpp $root/base/src/log.cpp \
  $root/base/src/huge_page_arena.cpp \
  $root/base/src/args.cpp"
$cxx "$(dirname "$0")/kernel_parity_main.cpp" $kernels $base -lpthread -o "$out/kernel_parity"
$cxx "$(dirname "$0")/engine_fixtures_main.cpp" $root/engine/src/*.cpp $kernels $base -lpthread \
  -o "$out/engine_fixtures"
qemu-aarch64 "$out/kernel_parity"
qemu-aarch64 "$out/engine_fixtures" "$fixtures"
