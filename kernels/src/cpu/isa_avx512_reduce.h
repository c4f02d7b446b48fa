// Transposed reductions of 16 AVX-512 vectors, for the files compiled with
// -mavx512f (isa_avx512.cpp, isa_avx512_vnni.cpp) only: including this in any
// other file would build AVX-512 code into it.
#pragma once

#include <immintrin.h>

namespace octet::kernels::cpu::avx512 {

// The reductions of 16 vectors at once: lane p of the result reduces
// v[kPackOrder[p]] (= v[4 (p % 4) + p / 4]; the order is its own inverse) in
// four rounds of pairing 256-, 128-, 64- and 32-bit halves. With an add, each
// lane's sum pairs the lanes as _mm512_reduce_add_ps does (j + j+8, then +4,
// +2, +1), so it is that function's result bit for bit, for 16 vectors in 45
// shuffles and adds instead of 16 x 8.
template <class Op>
inline __attribute__((always_inline)) __m512 TransposeReduce16(const __m512* v, Op op) {
  __m512 l1[8], l2[4], l3[2];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    l1[i] = op(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
               _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  }
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    l2[i] = op(_mm512_shuffle_f32x4(l1[2 * i], l1[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
               _mm512_shuffle_f32x4(l1[2 * i], l1[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  }
#pragma GCC unroll 2
  for (int i = 0; i < 2; ++i) {
    l3[i] = op(_mm512_shuffle_ps(l2[2 * i], l2[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
               _mm512_shuffle_ps(l2[2 * i], l2[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  }
  return op(_mm512_shuffle_ps(l3[0], l3[1], _MM_SHUFFLE(2, 0, 2, 0)),
            _mm512_shuffle_ps(l3[0], l3[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

// Which vector goes into v[i] so that lane p of TransposeReduce16 is vector p.
inline constexpr int kPackOrder[16] = {0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15};

}  // namespace octet::kernels::cpu::avx512
