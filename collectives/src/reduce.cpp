#include "reduce.h"

#include <algorithm>
#include <cstring>

namespace octet::collectives {

namespace {

// Elements per tile: the f32 accumulator (4 KiB) stays in L1. Within a tile
// every source is read before dst is written, which is what lets dst alias a
// source. Full tiles have a constant trip count, so the loops vectorise even
// at -O2.
constexpr size_t kTile = 1024;

template <typename T, float (*Load)(T), T (*Store)(float)>
inline __attribute__((always_inline)) void SumTile(T* dst, const void* const* srcs, int n,
                                                   size_t base, size_t m) {
  float acc[kTile];
  const T* s0 = static_cast<const T*>(srcs[0]) + base;
  for (size_t i = 0; i < m; ++i) acc[i] = Load(s0[i]);
  for (int k = 1; k < n; ++k) {
    const T* s = static_cast<const T*>(srcs[k]) + base;
    for (size_t i = 0; i < m; ++i) acc[i] += Load(s[i]);
  }
  T* d = dst + base;
  for (size_t i = 0; i < m; ++i) d[i] = Store(acc[i]);
}

inline float LoadF32(float x) { return x; }
inline float StoreF32(float x) { return x; }

template <typename T, float (*Load)(T), T (*Store)(float)>
inline __attribute__((always_inline)) void Sum(void* dst, const void* const* srcs, int n,
                                               size_t count) {
  T* d = static_cast<T*>(dst);
  size_t base = 0;
  for (; base + kTile <= count; base += kTile) SumTile<T, Load, Store>(d, srcs, n, base, kTile);
  if (base < count) SumTile<T, Load, Store>(d, srcs, n, base, count - base);
}

// On x86-64 each sum also gets an AVX2 clone, picked at load time on CPUs
// that have it (the x86-64 baseline is SSE2); aarch64 uses NEON as is. Not
// under ThreadSanitizer: the clones' ifunc resolver runs while the dynamic
// loader relocates, before TSan's runtime is set up, and its instrumented
// entry crashes the program (the tsan preset builds the default clone only).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_THREAD__)
#define OCTET_SUM_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define OCTET_SUM_CLONES
#endif

OCTET_SUM_CLONES void SumF32(void* dst, const void* const* srcs, int n, size_t count) {
  Sum<float, LoadF32, StoreF32>(dst, srcs, n, count);
}
OCTET_SUM_CLONES void SumBf16(void* dst, const void* const* srcs, int n, size_t count) {
  Sum<uint16_t, Bf16ToF32, F32ToBf16>(dst, srcs, n, count);
}
OCTET_SUM_CLONES void SumF16(void* dst, const void* const* srcs, int n, size_t count) {
  Sum<uint16_t, F16ToF32, F32ToF16>(dst, srcs, n, count);
}

}  // namespace

void ReduceSum(DType dtype, void* dst, const void* const* srcs, int n, size_t count) {
  if (count == 0 || n <= 0) return;
  if (n == 1) {
    if (dst != srcs[0]) std::memmove(dst, srcs[0], count * DTypeSize(dtype));
    return;
  }
  switch (dtype) {
    case DType::kF32:
      SumF32(dst, srcs, n, count);
      return;
    case DType::kBF16:
      SumBf16(dst, srcs, n, count);
      return;
    case DType::kF16:
      SumF16(dst, srcs, n, count);
      return;
  }
}

}  // namespace octet::collectives
