#!/usr/bin/env bash
# Builds the GPU check programs HERE (where nvcc compiles but no GPU runs) and
# packs them, with the shared libraries they need and the model fixtures, into
# one archive that tests/gpu/device-check.sh runs on a GPU machine without
# configuring or building anything there:
#
#   tests/gpu/make-device-bundle.sh                 # -> .device-bundle/octet-gpu.tar.xz
#   PREBUILT=.device-bundle/octet-gpu.tar.xz tests/gpu/device-check.sh   # on the GPU machine
#
# Why: a lent GPU machine has the CUDA toolkit, CMake and ninja but none of
# the distribution's development packages the project configures against (Qt,
# gRPC, yaml-cpp, ...), no package registry, and minutes of time in all.
# Building there would fail at the configure step, and even where it works
# it spends most of the time compiling.
#
# The archive holds:
#   bin/       test_format_decode, test_cuda_kernels, test_cuda_backend,
#              test_cuda_engine, test_cuda_tp, bench_cuda, bench_gemv, octet_bench_engine
#              (stripped; CUDA runtime linked statically; cuBLAS is dlopen'ed
#              from the GPU machine's toolkit)
#   lib/       every shared library they load that is not part of glibc or
#              the NVIDIA driver (Qt 6 Core/Test and ICU for the Qt Test
#              programs, PCRE2, ...), found with ldd
#   lib/compat libstdc++ and libgcc_s of this machine, used there only when
#              the system's libstdc++ is older than the one the programs need
#   fixtures/  the model fixtures test_cuda_engine checks against
#   MANIFEST   what was built, from which commit, for which architectures
#
# Environment: ARCH (CUDA architectures, default 90: the lent machine is an
# H200; "90;121" adds GB10), BUILD_DIR (default build/device-bundle),
# FIXTURES_DIR (default ../shared/fixtures), OUT_FILE (default
# .device-bundle/octet-gpu.tar.xz; .device-bundle/ is ignored by git and named in the
# device tool's `carry`).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
ARCH=${ARCH:-90}
BUILD=${BUILD_DIR:-$ROOT/build/device-bundle}
FIXTURES_DIR=${FIXTURES_DIR:-$ROOT/../shared/fixtures}
OUT_FILE=${OUT_FILE:-$ROOT/.device-bundle/octet-gpu.tar.xz}
NVCC=${CUDACXX:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
PROGRAMS=(test_format_decode test_cuda_kernels test_cuda_backend test_cuda_engine test_cuda_tp
          bench_cuda bench_gemv octet_bench_engine)
# The fixtures test_cuda_engine and test_cuda_tp read (kModels there) and what marks the folder.
FIXTURE_MODELS=(llama3-tiny qwen2-tiny qwen3-tiny qwen3-tiny-nvfp4 llama3-tiny-sharded
                qwen3-moe-tiny glm4-moe-tiny glm4-moe-tiny-nvfp4 minicpm-tiny)

die() { echo "make-device-bundle: $*" >&2; exit 1; }
[[ -x "$NVCC" ]] || die "no nvcc (looked at CUDACXX, PATH and /usr/local/cuda/bin)"
[[ -f "$FIXTURES_DIR/README.md" ]] || die "no fixtures at $FIXTURES_DIR (set FIXTURES_DIR)"

if [[ ! -f "$BUILD/CMakeCache.txt" ]]; then
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CUDA_COMPILER="$NVCC" -DOCTET_WITH_CUDA=ON -DOCTET_CUDA_ARCHITECTURES="$ARCH" \
    -DOCTET_WITH_GUI=OFF -DOCTET_WITH_NCCL=OFF -DOCTET_WITH_VERBS=OFF >/dev/null
fi
built_arch=$(sed -n 's/^OCTET_CUDA_ARCHITECTURES:STRING=//p' "$BUILD/CMakeCache.txt")
[[ "$built_arch" == "$ARCH" ]] ||
  die "$BUILD is configured for architectures '$built_arch', not '$ARCH' (remove it or set BUILD_DIR)"
ninja -C "$BUILD" "${PROGRAMS[@]}"

STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
B="$STAGE/octet-gpu"
mkdir -p "$B/bin" "$B/lib/compat" "$B/fixtures"

for p in "${PROGRAMS[@]}"; do
  f=$(find "$BUILD" -type f -name "$p" -perm -u+x | head -n 1)
  [[ -n "$f" ]] || die "built $p but cannot find it under $BUILD"
  cp "$f" "$B/bin/$p"
  strip --strip-debug "$B/bin/$p"
done

# Shared libraries: everything ldd resolves except glibc's own, the dynamic
# loader and the NVIDIA driver (which must come from the GPU machine).
is_system_lib() {
  case "$1" in
    linux-vdso*|ld-linux*|libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|\
    libresolv.so*|libutil.so*|libcuda.so*|libnvidia*) return 0 ;;
  esac
  return 1
}
for p in "$B"/bin/*; do
  if ldd "$p" | grep -q "not found"; then die "$(basename "$p"): $(ldd "$p" | grep 'not found')"; fi
  ldd "$p" | awk '/=> \// { print $1, $3 }' | while read -r name path; do
    is_system_lib "$name" && continue
    case "$name" in
      libstdc++.so*|libgcc_s.so*) dest="$B/lib/compat" ;;
      *) dest="$B/lib" ;;
    esac
    [[ -e "$dest/$name" ]] || cp -L "$path" "$dest/$name"
  done
done

for m in "${FIXTURE_MODELS[@]}"; do
  [[ -d "$FIXTURES_DIR/$m" ]] || die "fixture $m missing in $FIXTURES_DIR"
  cp -r "$FIXTURES_DIR/$m" "$B/fixtures/"
done
cp "$FIXTURES_DIR/README.md" "$B/fixtures/"

# The newest GLIBCXX symbol version the programs need, for the run side's
# choice of libstdc++.
glibcxx=$(for p in "$B"/bin/* "$B"/lib/*.so*; do objdump -T "$p" 2>/dev/null; done |
  grep -o 'GLIBCXX_[0-9.]*' | sort -uV | tail -n 1)
glibc=$(for p in "$B"/bin/* "$B"/lib/*.so* "$B"/lib/compat/*.so*; do objdump -T "$p" 2>/dev/null; done |
  grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -n 1)
{
  echo "commit $(git -C "$ROOT" rev-parse HEAD)$(git -C "$ROOT" diff --quiet HEAD -- . ':!.device-bundle' || echo ' (with local changes)')"
  echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release && echo "$PRETTY_NAME"), $(uname -m)"
  echo "cuda_architectures $ARCH"
  echo "nvcc $("$NVCC" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
  echo "needs_glibc $glibc"
  echo "needs_glibcxx $glibcxx"
  echo "needs_cublas libcublas.so.$(sed -n 's/^#define CUBLAS_VER_MAJOR \([0-9]*\).*/\1/p' "$(dirname "$NVCC")/../include/cublas_api.h")"
  echo "programs ${PROGRAMS[*]}"
} >"$B/MANIFEST"

mkdir -p "$(dirname "$OUT_FILE")"
# Every program links the same kernels (a fatbin of ~12 MB each at sm_90):
# with a dictionary larger than the archive xz stores them about once
# (155 MB unpacked: 55 MB at -6's 8 MiB dictionary, 23 MB at 192 MiB),
# well inside the 64 MiB a device run carries. Unpacking takes ~200 MiB.
tar -C "$STAGE" -cf - octet-gpu | xz -T0 --lzma2=preset=6,dict=192MiB >"$OUT_FILE.tmp"
mv "$OUT_FILE.tmp" "$OUT_FILE"
echo "make-device-bundle: $OUT_FILE ($(du -h "$OUT_FILE" | cut -f1); unpacked $(du -sh "$B" | cut -f1))"
cat "$B/MANIFEST"
