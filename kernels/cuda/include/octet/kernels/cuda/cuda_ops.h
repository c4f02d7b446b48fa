// CUDA kernels of the engine's decode step, as host launchers. The first
// slice of the CUDA backend: each op has the semantics of the KernelBackend op
// of the same name (backend.h) and is checked against the scalar CPU backend
// by tests/gpu/test_cuda_kernels; CudaBackend (cuda_backend.h) is the
// KernelBackend around them and the kernels of src/.
//
// Conventions: every pointer is DEVICE memory (cudaMalloc), including the
// data and scales of a WeightMatrix, ids and positions; activations are
// float32, row-major, row strides in elements, as in backend.h. A launcher
// checks its arguments (InvalidArgument / Unimplemented before anything is
// queued), queues the work on `stream` (nullptr: the legacy default stream)
// and returns without waiting; a launch failure is returned with the kernel's
// name, a fault while running surfaces at the stream's next synchronisation.
// Sizes are int64_t as in backend.h but each must fit in 31 bits.
#pragma once

#include <cstddef>
#include <cstdint>

#include "octet/base/status.h"
#include "octet/kernels/backend.h"
#include "octet/kernels/moe_route.h"
#include "octet/kernels/weight.h"

struct CUstream_st;

namespace octet::kernels::cuda {

// ---- matrix-vector products (decode) ----------------------------------------

// Activation rows one Gemv call takes (a decode batch).
inline constexpr int64_t kGemvMaxRows = 8;

// y[m, n] = x[m, k] · W[n, k]ᵀ for m in 1..kGemvMaxRows (m = 0 or n = 0: nothing
// to do); with `accumulate` the product is added to y. W is BF16 or NVFP4
// (other formats: Unimplemented), dequantized in registers; any k, any row
// stride (rows whose start is 16-byte aligned take the vectorised path, others
// a per-element one), NVFP4 with any scale row stride. BF16 data must be
// 2-byte aligned. x rows `ldx` apart, y rows `ldy` apart; y must not overlap x.
Status LaunchGemv(CUstream_st* stream, const float* x, int64_t m, int64_t ldx,
                  const WeightMatrix& w, float* y, int64_t ldy, bool accumulate);

// What the GEMV does to x as it stages it (GemvProduct::staging).
enum class GemvStaging : uint8_t {
  kPlain,    // x as it is
  kRmsNorm,  // RmsNorm(x) with the scale `aux` (may be null) and norm_eps
             // over each row's w.cols values: every block reduces the rows
             // itself with the arithmetic of LaunchRmsNorm's kernel (the same
             // block size, loop and reduction), so y is bit for bit
             // LaunchRmsNorm then LaunchGemv
  kSiluMul,  // silu(x) * aux (aux rows ldx apart, as x's): SiluMul's
             // arithmetic, so y is bit for bit LaunchSiluMul then LaunchGemv
};

// One product of LaunchGemvGrouped: y[m, w.rows] (+)= x'[m, w.cols] · wᵀ,
// x' = x as `staging` makes it. The products of one call share a staging.
struct GemvProduct {
  const float* x;
  int64_t ldx;
  const WeightMatrix* w;
  float* y;
  int64_t ldy;
  GemvStaging staging = GemvStaging::kPlain;
  const float* aux = nullptr;  // kRmsNorm: the norm's scale; kSiluMul: up
  float norm_eps = 0.0f;
  bool accumulate = false;
};
// Every product, each of m rows (1..kGemvMaxRows) and all of one format (BF16
// or NVFP4), in one launch per 32 products (a mixture of experts' chosen
// experts at a decode step): each y is what LaunchGemv gives for its product
// (with its accumulate) bit for bit, the same code running each block. Products
// are checked as LaunchGemv checks them, all before anything is queued; no y
// may overlap another product's x or y.
Status LaunchGemvGrouped(CUstream_st* stream, int64_t m, const GemvProduct* products,
                         int n_products);

// ---- mixture-of-experts decode with the routing on the device --------------
//
// A decode step's routed experts without a host round trip (CudaBackend::
// MoeDecode, on with OCTET_CUDA_MOE_ROUTING=device): LaunchMoeRoute chooses
// each token's experts from the router's logits (the engine's own
// MoeRouteToken, moe_route.h), LaunchGemvRouted runs the chosen experts'
// matrices, one (token, expert) slot per grid row, finding each expert in a
// device table, and LaunchMoeCombine adds the slots' outputs, router-weighted,
// into the tokens' rows.

// A matrix as the routed GEMV reads it from device memory.
struct DeviceGemvMatrix {
  const uint8_t* data;
  int64_t row_stride;
  const uint8_t* scales;  // NVFP4
  int64_t scale_row_stride;
  float global_scale;  // NVFP4
  int32_t rows;
  int32_t cols;
  int32_t vector_rows;  // every row starts 16-byte aligned
  int32_t nvfp4;        // 1: NVFP4, 0: BF16
};
// One expert's three matrices: gate and up [width, hidden], down [hidden, width].
struct DeviceExpert {
  DeviceGemvMatrix gate, up, down;
};
// w (BF16 or NVFP4, on the device) as the routed GEMV reads it, after
// LaunchGemv's checks.
Result<DeviceGemvMatrix> MakeDeviceGemvMatrix(const WeightMatrix& w);

// For each slot s < n_slots and matrix z < n_mats (1 or 2): y[z][s, :] =
// M · x[s / x_div, :], M the `which[z]` matrix (0 gate, 1 up, 2 down) of
// expert chosen[s] in `experts` (device memory, num_experts of them, every
// matrix `which[z]` at most `rows` x cols, BF16 or NVFP4 each as its entry
// says). Each slot's result is
// what LaunchGemv gives for one row of it, bit for bit (the same per-block
// code). A chosen id outside [0, num_experts) leaves its slot's rows
// unwritten (LaunchMoeRoute writes none).
struct GemvRoutedArgs {
  const DeviceExpert* experts;
  int32_t num_experts;
  const int32_t* chosen;
  int64_t n_slots;
  int n_mats;
  int which[2];
  int64_t rows;
  const float* x;
  int64_t ldx;
  int64_t x_div;
  float* y[2];
  int64_t ldy;
};
Status LaunchGemvRouted(CUstream_st* stream, const GemvRoutedArgs& args);

// Token t < tokens routed by MoeRouteToken (moe_route.h) from logits[t, :]
// (num_experts floats), `bias` its correction bias on the device or null:
// its experts_per_token (expert, weight) pairs into chosen / weight at t * k,
// in increasing expert order (the order in which the engine's per-expert
// calls add them).
Status LaunchMoeRoute(CUstream_st* stream, const float* logits, int64_t tokens,
                      const MoeRouteSpec& spec, const float* bias, int32_t* chosen, float* weight);

// out[t, :] += weight[t * k + j] * y[t * k + j, :] for j < k in order, for t <
// tokens (rows of n, y rows n apart, out rows ldo apart): ScatterAddRows's
// expression, so the same sums as the per-expert path's in the same order.
Status LaunchMoeCombine(CUstream_st* stream, const float* y, const float* weight, int64_t tokens,
                        int64_t k, int64_t n, float* out, int64_t ldo);

// The same product for NVFP4 in integers (gemv_int.cu; the arithmetic in
// octet/kernels/nvfp4_int.h): the activations are packed once into integer
// parts, then LaunchGemvNvfp4Int multiplies them by any number of matrices
// with that k. It takes NVFP4 weights with k a multiple of 32 and 16-byte
// aligned code rows (base and stride; GemvNvfp4IntSupports);
// results match LaunchGemv's within float rounding of the activations (each
// is rounded to 23 bits of its 16-column block's largest magnitude).
bool GemvNvfp4IntSupports(const WeightMatrix& w);
// Device bytes the packing of m rows of k columns takes.
int64_t Nvfp4IntPackedBytes(int64_t m, int64_t k);
// x[m, k] (rows ldx apart; m 1..kGemvMaxRows, k a multiple of 32) into
// `packed`: 16-byte aligned, at least Nvfp4IntPackedBytes(m, k).
Status LaunchPackNvfp4Int(CUstream_st* stream, const float* x, int64_t m, int64_t ldx, int64_t k,
                          void* packed, int64_t packed_bytes);
// y[m, n] (+)= packed x · W[n, k]ᵀ, `packed` from LaunchPackNvfp4Int with the
// same m and k = w.cols.
Status LaunchGemvNvfp4Int(CUstream_st* stream, const void* packed, int64_t m, const WeightMatrix& w,
                          float* y, int64_t ldy, bool accumulate);

// ---- row-wise and element-wise ops ------------------------------------------

// out[r] = x[r] * rsqrt(mean(x[r]^2) + eps) * weight (weight may be null).
// Rows `stride` floats apart in x and out; out may equal x.
Status LaunchRmsNorm(CUstream_st* stream, const float* x, const float* weight, float eps,
                     int64_t rows, int64_t dim, int64_t stride, float* out);

// LaunchRope of the first rotary_dim features of each of n_heads heads lying
// head_stride floats apart, exactly as KernelBackend::RopeHeads (partial
// rotary); rotary_dim even, at most 1024, at most head_stride.
Status LaunchRopeHeads(CUstream_st* stream, float* x, int64_t rows, int64_t row_stride,
                       int64_t n_heads, int64_t head_stride, int64_t rotary_dim,
                       const int32_t* positions, const float* inv_freq);

// Rotary embedding, half-split, in place, exactly as KernelBackend::Rope:
// x [rows, n_heads, head_dim] with rows `row_stride` apart, positions[rows]
// (int32), inv_freq[head_dim / 2]. head_dim even, at most 1024.
Status LaunchRope(CUstream_st* stream, float* x, int64_t rows, int64_t row_stride, int64_t n_heads,
                  int64_t head_dim, const int32_t* positions, const float* inv_freq);

// out = silu(gate) * up for `rows` rows of n, all rows `stride` apart; out may
// alias gate or up.
Status LaunchSiluMul(CUstream_st* stream, const float* gate, const float* up, int64_t rows,
                     int64_t n, int64_t stride, float* out);

// out[i] = a[i] + b[i]; out may alias a or b.
Status LaunchAdd(CUstream_st* stream, const float* a, const float* b, int64_t n, float* out);

// out[i, :] = table[ids[i], :] as float, out rows table.cols apart; any table
// format (bit-identical to the scalar backend's decode). An id outside
// [0, table.rows) gives a row of NaN rather than a read out of bounds (the
// engine validates ids first; this keeps a bad one from faulting the context).
Status LaunchEmbedding(CUstream_st* stream, const WeightMatrix& table, const int32_t* ids,
                       int64_t n, float* out);

// *index = the index of the largest of x[0..n) (the first on ties; NaN never
// wins; 0 when every element is NaN), written to device memory. n >= 1.
Status LaunchArgmax(CUstream_st* stream, const float* x, int64_t n, int64_t* index);

// ---- decode attention -------------------------------------------------------

// One query row per sequence against its KV cache (a decode step), grouped-
// query: query head h reads KV head h / (n_heads / n_kv_heads). Each sequence
// s attends to its keys 0..positions[s] inclusive.
struct DecodeAttentionArgs {
  const float* q = nullptr;  // [n_seqs, n_heads * head_dim], rows `q_row_stride` apart
  int64_t q_row_stride = 0;
  float* out = nullptr;  // [n_seqs, n_heads * head_dim], rows `out_row_stride` apart
  int64_t out_row_stride = 0;
  // Head-major caches: element c of position p of KV head g of sequence s is
  // at s * seq_stride + (g * capacity + p) * head_dim + c, in elements of
  // kv_dtype (float, or uint16_t IEEE half). Both 16-byte aligned;
  // seq_stride a multiple of 16 bytes' worth of elements.
  const void* k_cache = nullptr;
  const void* v_cache = nullptr;
  KvDtype kv_dtype = KvDtype::kF32;
  int64_t capacity = 0;    // positions per KV head
  int64_t seq_stride = 0;  // elements between sequences' caches (unused for one sequence)
  const int32_t* positions = nullptr;  // [n_seqs], each in [0, capacity)
  int64_t n_seqs = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;  // a multiple of 4 (f32) / 8 (f16), at most 256
  float scale = 1.0f;    // multiplies q·k
};

// Flash-decoding: each sequence's keys are cut into splits of keys_per_split;
// one block per (split, KV head, sequence) writes its maximum score, sum of
// exponentials and unnormalised output for the KV head's query heads to the
// workspace, and a combine kernel merges the splits. The plan fixes the split
// on the host (the positions are on the device): it must cover every
// sequence's keys, i.e. splits * keys_per_split >= positions[s] + 1; a
// sequence it does not cover, or with a position outside [0, capacity), gets
// NaN outputs instead of a partial answer.
struct DecodeAttentionPlan {
  int64_t keys_per_split = 0;  // 1..kMaxKeysPerSplit
  int64_t splits = 0;
  size_t workspace_bytes = 0;  // device memory LaunchDecodeAttention needs
};
inline constexpr int64_t kMaxKeysPerSplit = 512;

// A plan for keys 0..max_keys-1 that gives the device (sm_count
// multiprocessors) about two blocks per multiprocessor when the context is
// long enough. keys_per_split > 0 forces that split length (tests).
DecodeAttentionPlan PlanDecodeAttention(const DecodeAttentionArgs& args, int64_t max_keys,
                                        int sm_count, int64_t keys_per_split = 0);

// `workspace`: at least plan.workspace_bytes of device memory, 4-byte aligned,
// not used by anything else until the work is done.
Status LaunchDecodeAttention(CUstream_st* stream, const DecodeAttentionArgs& args,
                             const DecodeAttentionPlan& plan, void* workspace,
                             size_t workspace_bytes);

}  // namespace octet::kernels::cuda
