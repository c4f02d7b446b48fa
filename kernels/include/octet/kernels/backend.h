// The compute kernels of the engine and the trainer, behind one interface.
//
// A KernelBackend is one implementation of every op (the CPU backends here:
// "scalar" — the reference —, "avx2" (AVX2+FMA+F16C, x86-64), "avx512" (the
// AVX2 kernels with AVX-512 NVFP4 and batched-decode matmuls), "avx512-amx"
// (that, with batched decode of BF16 weights on AMX tiles), "avx512-rows"
// (avx512 tuned on AMD Zen 4: single-row decode as one memory stream a core,
// batched decode with the activations in registers, F32 in 512-bit lanes),
// "neon",
// "neon-dotprod" and "neon-bf16" (aarch64); the CUDA backend, kernels/cuda/,
// implements the same class). CPU backends are chosen at run time:
// `ProbeBackends()` lists the ones this machine can run, `CreateBackend("auto")`
// picks the fastest; `CreateAnyBackend` (backends.h) adds "cuda". Every op is checked against the
// scalar backend by tests/unit/kernels/test_kernel_conformance.
//
// Memory: a backend owns the memory its ops work on (buffer.h). Every pointer
// an op takes — activations, index arrays, norm weights, biases, the KV cache,
// weight data — is in the backend's memory (memory_kind(): host memory for the
// CPU backends, device memory for a GPU backend); callers get such memory from
// Allocate, move bytes in and out with CopyToDevice / CopyToHost, and have
// weights brought in by PrepareWeight. A caller never dereferences a pointer
// into device memory. Activations are float32, row-major, with the row stride
// in elements given where a matrix may be a strided view.
//
// Ordering: ops run in the order they are issued. A device backend may run
// them asynchronously; CopyToHost and Synchronize wait for what came before.
// The CPU backends run every op to completion before returning (and may use
// their thread pool). A backend object is not thread-safe: one caller at a
// time (the engine owns one per model instance).
//
// Coverage: supports(op, format) says which ops a backend runs, per weight
// format where the op takes weights. The engine checks at load that the
// backend runs every op its forward pass needs and refuses the model, naming
// the op, where it does not.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "octet/base/mem_info.h"
#include "octet/base/status.h"
#include "octet/kernels/buffer.h"
#include "octet/kernels/moe_route.h"
#include "octet/kernels/weight.h"

namespace octet::kernels {

class ThreadPool;

// Element type of a KV cache. F16 (IEEE half) halves the cache's memory and
// the bytes decode attention reads per key; the keys and values are rounded
// once when stored (relative error 2^-11; beyond +-65504 they saturate), and
// attention widens them to float exactly. On the fixture models that moves the
// logits by up to ~6e-3 (tests/unit/engine/test_engine_fixtures, kvCacheF16).
enum class KvDtype : uint8_t { kF32, kF16 };

std::string_view KvDtypeName(KvDtype dtype);  // "f32", "f16"
int64_t KvDtypeBytes(KvDtype dtype);          // 4, 2
// "f32" / "float32" / "f16" / "float16"; anything else is an error naming the choices.
Result<KvDtype> ParseKvDtype(std::string_view name);

// One sequence's part of a batched attention call.
struct AttentionSequence {
  int64_t first_token = 0;  // rows [first_token, first_token + n_tokens) of q and out
  int64_t n_tokens = 0;
  // This sequence's keys and values, elements of `kv_dtype` (float or uint16_t
  // half), head_dim contiguous per (position, KV head); they must already hold
  // every position a query attends to.
  const void* k_cache = nullptr;
  const void* v_cache = nullptr;
  const int32_t* positions = nullptr;  // per query token; it attends to keys 0..positions[i]
  KvDtype kv_dtype = KvDtype::kF32;
  // Elements between consecutive positions of one KV head, and between KV
  // heads. Both 0: position-major [capacity, n_kv_heads, head_dim]. The
  // engine's cache is head-major ([n_kv_heads, capacity, head_dim]: position
  // stride head_dim), so one head's keys are one contiguous stream; position-
  // major rows of one head sit n_kv_heads * head_dim apart, a page apart for
  // 8 heads of 128 floats, which the hardware prefetchers do not follow.
  int64_t position_stride = 0;
  int64_t head_stride = 0;
  // More than the largest of `positions` (0: not given; the engine gives
  // start + n_tokens). A device backend may size a long prefill's work by it
  // (the CUDA backend's GEMM attention); a query whose position is not below
  // it then gets NaN, as one whose position is negative does.
  int64_t n_keys = 0;
};

struct AttentionArgs {
  const float* q = nullptr;  // [tokens, n_heads, head_dim], rows `q_row_stride` apart
  int64_t q_row_stride = 0;
  float* out = nullptr;  // [tokens, n_heads * head_dim], rows `out_row_stride` apart
  int64_t out_row_stride = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;  // query head h uses kv head h / (n_heads / n_kv_heads)
  int64_t head_dim = 0;
  float scale = 1.0f;  // multiplies q·k (head_dim^-0.5)
  const AttentionSequence* sequences = nullptr;
  int64_t n_sequences = 0;
};

// Writes new positions of one sequence into its KV cache (KvStore below).
struct KvStoreArgs {
  // [n, n_kv_heads, head_dim] float rows of keys and values, rows
  // `row_stride` floats apart.
  const float* k = nullptr;
  const float* v = nullptr;
  int64_t row_stride = 0;
  int64_t n = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  // The sequence's cache (elements of `dtype`) with the layout of
  // AttentionSequence: element (h, p) at h * head_stride + p * position_stride.
  void* k_cache = nullptr;
  void* v_cache = nullptr;
  KvDtype dtype = KvDtype::kF32;
  int64_t position_stride = 0;
  int64_t head_stride = 0;
  int64_t first_pos = 0;  // row t goes to position first_pos + t
};

// The operations of KernelBackend, for supports(op, format).
enum class Op : uint8_t {
  kMatmul,     // Matmul and MatmulMulti (m = 1 GEMV and m > 1 GEMM), per weight format
  kGemm,       // float32 GEMM (the trainer)
  kEmbedding,  // per table format
  kRmsNorm,    // rows and per-head (QK-norm)
  kRope,       // half-split; partial rotary through head_dim and inv_freq
  kAttention,  // decode over a KV cache and causal prefill
  kKvStore,
  kSiluMul,
  kRelu2,
  kAdd,
  kAddRowVector,  // biases
  kFill,
  kGatherRows,
  kScatterAddRows,  // mixture-of-experts: an expert's rows back into the tokens' rows
  kScale,
  kSoftCap,
  kSoftmax,
  kArgmax,
  kTopK,
  kMatmulGrouped,     // MatmulGrouped: the chosen experts' gate/up products in one call
  kMatmulScatterAdd,  // MatmulScatterAdd: their down products, weighted and summed, in one call
  kCount
};
std::string_view OpName(Op op);  // "matmul", "kv_store", ...

// Memory a model may still take, for the load-time check
// (LoadOptions::check_memory) and its message.
struct MemoryBudget {
  int64_t bytes = 0;
  std::string source;  // the figure, as a message names it: "MemAvailable", ...
};

// A device's budget from its driver's free memory. `unified`: the device
// shares the host's memory (GB10): the driver's free figure leaves out what
// the page cache holds, which the host gives back on demand, so it understates
// what the device can have; the host's MemAvailable (`meminfo`, when it could
// be read) counts as well, and the larger figure is the budget, its source
// saying both.
MemoryBudget DeviceMemoryBudget(int64_t device_free, bool unified, const Result<MemInfo>& meminfo);

struct BackendOptions {
  int threads = 0;  // <= 0: all hardware threads
};

class KernelBackend {
 public:
  virtual ~KernelBackend() = default;

  virtual std::string_view name() const = 0;
  virtual int num_threads() const = 0;
  // Whether Matmul/Embedding accept weights of this format.
  virtual bool supports(WeightFormat format) const = 0;
  // Whether this backend runs `op` (with weights of `format`, for the ops that
  // take weights; ignored otherwise).
  virtual bool supports(Op op, WeightFormat format = WeightFormat::kF32) const = 0;

  // ---- memory (see the conventions above) ----
  // The kind of memory every op's pointers are in.
  virtual MemoryKind memory_kind() const { return MemoryKind::kHost; }
  // `bytes` of this backend's memory, zeroed, aligned to at least 64 bytes.
  // ResourceExhausted when there is no such memory to be had.
  virtual Result<Buffer> Allocate(int64_t bytes) = 0;
  // host -> backend memory, and backend memory -> host (which first waits for
  // the ops issued before it). Plain copies on a host backend.
  virtual void CopyToDevice(void* dst, const void* host_src, int64_t bytes) = 0;
  virtual void CopyToHost(void* host_dst, const void* src, int64_t bytes) = 0;
  // Waits for every op issued so far; reports an error a device raised.
  virtual Status Synchronize() { return Status::Ok(); }

  // ---- recording (device backends) ----
  // A device backend may record the ops issued between BeginRecording and
  // EndRecording and run them as one unit (CUDA: a graph), and run such a
  // recording again for a later step that issues the same ops on the same
  // memory (a decode step: only the contents of the token, position and KV
  // memory differ), with no op issued at all. BeginRecording returns false
  // where the backend does not record (the host backends; CUDA unless
  // OCTET_CUDA_GRAPHS is set); the ops then run as usual.
  //
  // While recording, ops only record: nothing runs before EndRecording, so no
  // op between the two may need a result on the host. An op that cannot be
  // recorded (a copy to or from the host, a synchronization, memory to
  // allocate or grow) does nothing and makes EndRecording return Aborted:
  // nothing recorded ran, and the caller issues the same ops again without
  // recording.
  virtual bool BeginRecording() { return false; }
  // Ends the recording and, when `run`, runs it. `replace`: the id of an
  // earlier recording of the same step, which this one supersedes (its
  // resources are reused), or -1. Returns the id RunRecording takes, or -1
  // where the recording was discarded (not `run`, or an op failed:
  // Synchronize reports that); Aborted as above.
  virtual Result<int64_t> EndRecording(bool run, int64_t replace = -1) {
    (void)run;
    (void)replace;
    return int64_t{-1};
  }
  // Runs recording `id` again: its ops with the arguments they were recorded
  // with, on whatever the memory they name holds now. The caller vouches that
  // the step is the same one (the same ops on the same buffers, every value
  // that changes from step to step in device memory). Aborted where the
  // backend cannot (the recording was dropped, memory it used has moved, one
  // of its ops took a value of that step as an argument): the caller records
  // the step anew, passing `id` as EndRecording's `replace`.
  virtual Status RunRecording(int64_t id) {
    (void)id;
    return AbortedError("this backend keeps no recordings");
  }
  struct RecordingCounts {
    int64_t recorded = 0;  // recordings run by EndRecording
    int64_t replayed = 0;  // and by RunRecording
    int64_t aborted = 0;   // recordings that could not run
  };
  virtual RecordingCounts recording_counts() const { return {}; }

  // What this backend's memory can take now, and which figure that is
  // (MemoryBudget): a host backend's is the host's MemAvailable, read from
  // `meminfo_path`; a device's is its driver's free memory, or, where the
  // device shares the host's memory, DeviceMemoryBudget's choice.
  virtual Result<MemoryBudget> AvailableMemory(
      const std::string& meminfo_path = "/proc/meminfo") const;
  // A weight matrix as this backend's ops read it. Host backends read the
  // caller's (mapped) memory in place and return `w` itself; a device backend
  // copies the data (and scales, tiles) into buffers it appends to `storage`
  // (which the caller keeps as long as the returned view) and returns a view
  // of them.
  virtual Result<WeightMatrix> PrepareWeight(const WeightMatrix& w, std::vector<Buffer>* storage) {
    (void)storage;
    return w;
  }
  // The host thread pool this backend's ops run on (nullptr for a device
  // backend). Callers with loops of their own (the trainer's element-wise ops)
  // run them on it, so two pools never spin against each other on one core.
  // Same one-caller-at-a-time rule as the ops.
  virtual ThreadPool* host_thread_pool() { return nullptr; }
  // Whether NVFP4 decode (1 to 8 rows) reads a matrix's tiles (weight.h,
  // TileNvfp4) when it has them: a loader then builds them (the same bytes
  // again, in the tile order). That decode multiplies in integers: each
  // 16-value block of an activation row is scaled by a power of two and
  // rounded, its largest magnitude kept in [2^14, 2^15) or finer (AVX2: 15
  // bits; AVX512-VNNI and SDOT: 22), so a value moves by at most 2^-14 of
  // the block's largest; a row's output is the same whatever batch it is in.
  virtual bool UsesNvfp4Tiles() const { return false; }

  // Batch-invariant mode, for the forward passes that verify speculative
  // drafts (Model::Forward sets it around them; SequenceChunk::verify). While
  // it is on, every row of a matmul (Matmul, MatmulMulti, NormMatmulMulti,
  // MatmulGrouped, MatmulScatterAdd, SiluMulMatmul) gets the bits that a call
  // of that row alone gets with the mode off, whatever m is: a verify step of
  // K + 1 rows then computes each position exactly as one-token decoding does,
  // so greedy speculation equals plain greedy decoding even at an argmax
  // near-tie. Off (the default), batches take whatever is fastest: AMX and
  // BFMMLA decode 5-8 BF16 rows on tiles, AVX-512 sums 3-8 dense rows in
  // 512-bit lanes, and larger batches take the GEMM, each rounding otherwise
  // than one row does. Returns whether the backend gives that guarantee (the
  // CPU backends do; the CUDA backend does not yet, and says so once).
  virtual bool set_batch_invariant(bool on) { return !on; }

  // y[m, n] = x[m, k] · W[n, k]ᵀ, W in any supported format (dequantized in the
  // kernel). `x` rows are `ldx` floats apart, `y` rows `ldy` apart. With
  // `accumulate` the product is added to y. Weights are read once per call
  // whatever m is (batched decode and prefill share one pass over W).
  virtual void Matmul(const float* x, int64_t m, int64_t ldx, const WeightMatrix& w, float* y,
                      int64_t ldy, bool accumulate) = 0;

  // Several products of the same activations in one call (q/k/v, gate/up):
  // outputs[i].y = x · outputs[i].w ᵀ. One pass of the thread pool for all of
  // them (a decode step has fewer synchronisation points).
  struct MatmulOutput {
    const WeightMatrix* w;
    float* y;
    int64_t ldy;
  };
  virtual void MatmulMulti(const float* x, int64_t m, int64_t ldx, const MatmulOutput* outputs,
                           int n_outputs) = 0;

  // MatmulMulti of the RMSNorm of x: xn = RmsNorm(x, norm_weight, eps) over
  // rows of k (x and xn rows k floats apart), then outputs[i].y = xn ·
  // outputs[i].wᵀ (every w with k columns). A block's first step (the
  // input norm and q/k/v, the post-attention norm and gate/up). A device
  // backend may apply the norm as the matmuls read x (one launch instead of
  // two), leaving xn unwritten: the caller must not read xn afterwards. The
  // default makes the two calls (Matmul for one output). xn may be x.
  virtual void NormMatmulMulti(const float* x, int64_t m, int64_t k, const float* norm_weight,
                               float eps, float* xn, const MatmulOutput* outputs, int n_outputs) {
    RmsNorm(x, norm_weight, eps, m, k, k, xn);
    if (n_outputs == 1) {
      Matmul(xn, m, k, *outputs[0].w, outputs[0].y, outputs[0].ldy, false);
    } else {
      MatmulMulti(xn, m, k, outputs, n_outputs);
    }
  }

  // General float32 GEMM, row-major: C[M,N] = alpha · op(A) · op(B) + beta · C,
  // op(A) is [M,K] (A stored [K,M] when trans_a), op(B) is [K,N] (B stored
  // [N,K] when trans_b). beta == 0 ignores C's old contents (NaNs included).
  // The trainer's forward is (false, true), its backward dA (false, false) and
  // dB (true, false).
  virtual void Gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                    const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                    int64_t ldc) = 0;

  // out[r] = x[r] * rsqrt(mean(x[r]^2) + eps) * weight (weight may be null:
  // no scale). Rows `stride` floats apart in x and out; out may equal x.
  virtual void RmsNorm(const float* x, const float* weight, float eps, int64_t rows, int64_t dim,
                       int64_t stride, float* out) = 0;

  // Rotary embedding, half-split (rotate_half): for each row r and head h of
  // x [rows, n_heads, head_dim] (rows `row_stride` apart), angle_i =
  // positions[r] * inv_freq[i] (float32), i < head_dim/2:
  // x'[i] = x[i]cos - x[i+d/2]sin, x'[i+d/2] = x[i+d/2]cos + x[i]sin. In place.
  virtual void Rope(float* x, int64_t rows, int64_t row_stride, int64_t n_heads, int64_t head_dim,
                    const int32_t* positions, const float* inv_freq) = 0;
  // Rope of the first `rotary_dim` features of each of n_heads heads lying
  // `head_stride` floats apart in a row (partial rotary, GLM-4.5: the rest
  // of each head passes unchanged); inv_freq[rotary_dim / 2]. rotary_dim ==
  // head_stride is Rope itself. A device backend does every head in one
  // launch; the default calls Rope once a head.
  virtual void RopeHeads(float* x, int64_t rows, int64_t row_stride, int64_t n_heads,
                         int64_t head_stride, int64_t rotary_dim, const int32_t* positions,
                         const float* inv_freq) {
    if (rotary_dim == head_stride) {
      Rope(x, rows, row_stride, n_heads, rotary_dim, positions, inv_freq);
      return;
    }
    for (int64_t h = 0; h < n_heads; ++h) {
      Rope(x + h * head_stride, rows, row_stride, 1, rotary_dim, positions, inv_freq);
    }
  }

  // A step's queries and keys made ready for attention, in place: q [rows,
  // q_heads, head_dim] and k [rows, k_heads, head_dim] (rows of q_heads *
  // head_dim and k_heads * head_dim floats), each head's first rotary_dim
  // features rotated as RopeHeads does; with qk_norm, each head's head_dim
  // features RMSNorm'ed (q_norm / k_norm the scales, either may be null: no
  // scale) before the rotation, or after it with norm_after_rope; then the
  // KvStoreBatch of `stores` (each a sequence's rows of this k and their
  // values). A device backend does all of it in one launch (five
  // otherwise); the default calls RmsNorm, RopeHeads and KvStoreBatch.
  // While recording (BeginRecording), a store's row t must be at position
  // positions[r] = first_pos + t (r its row of k), as the engine's are: a
  // recording run again for a later step stores at the positions that step
  // holds in device memory.
  struct QkPrepArgs {
    float* q = nullptr;
    int64_t q_heads = 0;
    float* k = nullptr;
    int64_t k_heads = 0;
    int64_t rows = 0;
    int64_t head_dim = 0;
    int64_t rotary_dim = 0;  // 0..head_dim, even
    const int32_t* positions = nullptr;
    const float* inv_freq = nullptr;  // [rotary_dim / 2]
    bool qk_norm = false;
    bool norm_after_rope = false;
    const float* q_norm = nullptr;  // [head_dim]
    const float* k_norm = nullptr;
    float eps = 0.0f;
    const KvStoreArgs* stores = nullptr;  // their k: rows of this k
    int64_t n_stores = 0;
  };
  virtual void PrepareQk(const QkPrepArgs& a) {
    const auto norm = [&] {
      RmsNorm(a.q, a.q_norm, a.eps, a.rows * a.q_heads, a.head_dim, a.head_dim, a.q);
      RmsNorm(a.k, a.k_norm, a.eps, a.rows * a.k_heads, a.head_dim, a.head_dim, a.k);
    };
    if (a.qk_norm && !a.norm_after_rope) norm();
    RopeHeads(a.q, a.rows, a.q_heads * a.head_dim, a.q_heads, a.head_dim, a.rotary_dim, a.positions,
              a.inv_freq);
    RopeHeads(a.k, a.rows, a.k_heads * a.head_dim, a.k_heads, a.head_dim, a.rotary_dim, a.positions,
              a.inv_freq);
    if (a.qk_norm && a.norm_after_rope) norm();
    if (a.n_stores > 0) KvStoreBatch(a.stores, a.n_stores);
  }

  // Causal grouped-query attention over KV caches, several sequences at once.
  virtual void Attention(const AttentionArgs& args) = 0;

  // out[i] = silu(gate[i]) * up[i] for `rows` rows of `n`; gate/up/out rows
  // `stride` floats apart. out may alias gate.
  virtual void SiluMul(const float* gate, const float* up, int64_t rows, int64_t n, int64_t stride,
                       float* out) = 0;

  // y (+)= (silu(gate) * up) · wᵀ: SiluMul then Matmul, the MLP's down
  // projection with its input. gate and up are [m, w.cols], rows `stride`
  // floats apart; gate's contents are unspecified afterwards (the default
  // writes the product into it; a device backend may form it as the GEMV
  // reads its input, one launch instead of two).
  virtual void SiluMulMatmul(float* gate, const float* up, int64_t m, int64_t stride,
                             const WeightMatrix& w, float* y, int64_t ldy, bool accumulate) {
    SiluMul(gate, up, m, w.cols, stride, gate);
    Matmul(gate, m, stride, w, y, ldy, accumulate);
  }

  // Numerically stable softmax of each row, in place.
  virtual void Softmax(float* x, int64_t rows, int64_t n) = 0;

  // out[i] = a[i] + b[i]; out may alias a or b.
  virtual void Add(const float* a, const float* b, int64_t n, float* out) = 0;

  // out[i, :] = table[ids[i], :] as float. ids must be in [0, table.rows)
  // (the engine validates them first).
  virtual void Embedding(const WeightMatrix& table, const int32_t* ids, int64_t n, float* out) = 0;

  // x[r, :] = table[ids[r] - first_row, :] for the rows whose id lies in
  // [first_row, first_row + table.rows), zero for the others: a vocab-parallel
  // embedding shard (the all-reduce across ranks completes every row).
  virtual void EmbeddingShard(const WeightMatrix& table, int64_t first_row, const int32_t* ids,
                              int64_t n, float* out) = 0;

  // Stores new keys and values of one sequence into its cache, converted to
  // the cache's dtype (f16: rounded to nearest, saturated at +-65504).
  virtual void KvStore(const KvStoreArgs& args) = 0;
  // KvStore of each of args[0..n) (distinct sequences: their caches must not
  // overlap). A step of a batch stores every sequence's new keys at every
  // layer; a device backend does it with one launch instead of one a
  // sequence. The default calls KvStore for each.
  virtual void KvStoreBatch(const KvStoreArgs* args, int64_t n) {
    for (int64_t i = 0; i < n; ++i) KvStore(args[i]);
  }

  // x[r, :] += v for `rows` rows of `n`, rows `stride` floats apart (a bias).
  virtual void AddRowVector(float* x, int64_t rows, int64_t n, int64_t stride, const float* v) = 0;

  // x[i] = max(x[i], 0)^2 (nanochat's ReLU² MLP), in place.
  virtual void Relu2(float* x, int64_t n) = 0;

  // x[i] = cap * tanh(x[i] / cap) (nanochat's logit soft-cap), in place. The
  // scalar backend calls std::tanh; the vector CPU backends keep tanh within
  // 1e-7 of the exact value (so x within 1e-7 * cap plus rounding).
  virtual void SoftCap(float* x, int64_t n, float cap) = 0;

  // x[i] = value for n elements.
  virtual void Fill(float* x, int64_t n, float value) = 0;

  // out[r, :] = x[rows[r], :] for r < n_rows, rows of `n` floats, x rows `ldx`
  // apart, out rows `n` apart.
  virtual void GatherRows(const float* x, int64_t ldx, const int64_t* rows, int64_t n_rows,
                          int64_t n, float* out) = 0;

  // out[rows[r], :] += weights[r] * x[r, :] for r < n_rows, in order, rows of
  // `n` floats, x rows `ldx` apart, out rows `ldo` apart; `weights` null means
  // 1. A mixture-of-experts block adds each expert's output rows, weighted by
  // the router, into the rows of the tokens routed to it (a row may repeat:
  // the additions happen in r order).
  virtual void ScatterAddRows(const float* x, int64_t ldx, const int64_t* rows,
                              const float* weights, int64_t n_rows, int64_t n, float* out,
                              int64_t ldo) = 0;

  // ---- mixture-of-experts decode: every chosen expert in one call ----
  //
  // A decode step routes each token to k experts, each of which sees only a
  // few rows (one at c1). One matmul call per expert and projection pays the
  // call's fixed costs (packing the activations, starting the pool, the
  // tasks' cold start) 2k times a layer for very little work each; these two
  // ops pay them once for all the experts of the step.

  // One product of MatmulGrouped: y[m, w.rows] = x[m, w.cols] · wᵀ, x rows
  // `ldx` floats apart, y rows `ldy` apart.
  struct GroupedProduct {
    const float* x;
    int64_t m;
    int64_t ldx;
    const WeightMatrix* w;
    float* y;
    int64_t ldy;
  };
  // Every product of `products` (each its own activations, weights and
  // output; outputs must not overlap), each equal to its own Matmul call
  // (accumulate false). Products with the same x, m and ldx share one
  // activation packing. The default runs one Matmul per product.
  virtual void MatmulGrouped(const GroupedProduct* products, int n_products) {
    for (int i = 0; i < n_products; ++i) {
      const GroupedProduct& p = products[i];
      Matmul(p.x, p.m, p.ldx, *p.w, p.y, p.ldy, false);
    }
  }

  // One product of MatmulScatterAdd: m rows of x (ldx apart) against w, row
  // j of the product added, times weights[j] (null: 1), into out row rows[j].
  struct ScatterProduct {
    const float* x;
    int64_t m;
    int64_t ldx;
    const WeightMatrix* w;
    const int64_t* rows;   // [m], backend memory
    const float* weights;  // [m], backend memory, or null
  };
  // out[rows_i[j], :] += weights_i[j] * (x_i · w_iᵀ)[j, :] for every product
  // i in order and row j in order: exactly Matmul of each product followed by
  // ScatterAddRows, in that order (the down projections of a step's experts
  // and the router-weighted sum into the tokens' rows). Every w_i has
  // `n` = w.rows output features; out rows are `ldo` apart. `scratch`:
  // backend memory of at least max_i(m_i) * n floats, which the default (a
  // Matmul and a ScatterAddRows per product) uses and a fused implementation
  // may ignore.
  virtual void MatmulScatterAdd(const ScatterProduct* products, int n_products, int64_t n,
                                float* out, int64_t ldo, float* scratch) {
    for (int i = 0; i < n_products; ++i) {
      const ScatterProduct& p = products[i];
      Matmul(p.x, p.m, p.ldx, *p.w, scratch, n, false);
      ScatterAddRows(scratch, n, p.rows, p.weights, p.m, n, out, ldo);
    }
  }

  // The largest step (tokens) whose routed experts the engine runs through
  // MatmulGrouped and MatmulScatterAdd rather than a Matmul call per expert,
  // unless told otherwise (Model::set_grouped_experts); 0: never. The CPU
  // backends keep 0: their grouped ops measured no gain in the engine
  // (octet_bench_engine --moe-ab, docs/performance.md); a device backend, where every
  // call is a kernel launch, says how many rows its grouped ops take.
  virtual int64_t grouped_experts_max_tokens() const { return 0; }

  // ---- mixture-of-experts decode with the routing in the backend ----
  //
  // The engine routes on the host: a device backend must copy the router's
  // logits back and wait for them every layer. A backend that can route
  // itself returns a table of a layer's experts from PrepareExperts (its
  // memory, held by the engine for the model's life); MoeDecode then routes
  // and runs a step's experts with no host round trip. The defaults decline
  // (Unimplemented), and the engine keeps its host routing.

  // A table of n_experts experts (gate and up [width, hidden], down [hidden,
  // width], all prepared by this backend), or Unimplemented.
  virtual Result<Buffer> PrepareExperts(const WeightMatrix* const* gate,
                                        const WeightMatrix* const* up,
                                        const WeightMatrix* const* down, int64_t n_experts) {
    (void)gate, (void)up, (void)down, (void)n_experts;
    return UnimplementedError("PrepareExperts: this backend routes experts on the host");
  }
  struct MoeDecodeArgs {
    const float* x;  // [tokens, hidden] (rows ldx apart): the normalized hidden states
    int64_t tokens;  // 1..grouped_experts_max_tokens()
    int64_t ldx;
    const float* router_logits;  // [tokens, route.num_experts], contiguous
    MoeRouteSpec route;
    const float* bias;    // the correction bias [num_experts], backend memory, or null
    const void* experts;  // PrepareExperts' table, of route.num_experts experts
    int64_t hidden, width;  // the table's matrices: gate/up [width, hidden], down [hidden, width]
    float* out;  // [tokens, hidden] (rows ldo apart): the weighted sum is added
    int64_t ldo;
  };
  // Each token routed as MoeRouteToken routes it, and its experts' outputs,
  // router-weighted, added into its row of out in increasing expert order.
  // Argument errors come back before anything is queued.
  virtual Status MoeDecode(const MoeDecodeArgs& args) {
    (void)args;
    return UnimplementedError("MoeDecode: this backend routes experts on the host");
  }

  // x[i] *= s for n elements (MiniCPM's embedding and residual-branch scales).
  virtual void Scale(float* x, int64_t n, float s) = 0;

  // Index of the largest element (the first one on ties; NaN never wins).
  virtual int64_t Argmax(const float* x, int64_t n) = 0;

  // The k largest elements in descending order (ties: lower index first).
  virtual void TopK(const float* x, int64_t n, int64_t k, int32_t* indices, float* values) = 0;
};

struct BackendInfo {
  std::string name;
  std::string description;
  bool available = false;  // this machine can run it
  // CreateBackend("auto") may take it (it takes the last available one that
  // it may): false where a backend runs but was measured slower here than
  // one before it (avx512-rows on Intel).
  bool auto_choice = true;
};

// Every backend compiled into this build, with whether it runs here.
std::vector<BackendInfo> ProbeBackends();

// `name` is "scalar", "avx2", "avx512", "avx512-amx", "avx512-rows", "neon",
// "neon-dotprod", "neon-bf16" or "auto" (the fastest available: the last of
// ProbeBackends that runs here, but avx512-rows on AMD CPUs only).
// Errors: unknown name, or a backend this machine cannot run.
Result<std::unique_ptr<KernelBackend>> CreateBackend(std::string_view name,
                                                     const BackendOptions& options = {});

}  // namespace octet::kernels
