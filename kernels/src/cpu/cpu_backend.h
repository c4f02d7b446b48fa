// Internal: the CPU implementation of KernelBackend, parameterised by an ISA
// table (scalar, AVX2, AVX-512, AMX, NEON and its extensions). Threading and
// blocking live here, once.
#pragma once

#include <cstddef>
#include <new>
#include <string>
#include <vector>

#include "cpu/isa.h"
#include "octet/kernels/backend.h"
#include "octet/kernels/thread_pool.h"

namespace octet::kernels::cpu {

// Storage on 64-byte boundaries: activation rows packed for the NVFP4 tile
// kernels, read with 32-byte loads (a load across two cache lines costs two).
template <class T>
struct CacheLineAllocator {
  using value_type = T;
  CacheLineAllocator() = default;
  template <class U>
  CacheLineAllocator(const CacheLineAllocator<U>&) {}
  T* allocate(std::size_t n) {
    return static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{64}));
  }
  void deallocate(T* p, std::size_t) { ::operator delete (p, std::align_val_t{64}); }
  bool operator==(const CacheLineAllocator&) const { return true; }
};

class CpuBackend final : public KernelBackend {
 public:
  CpuBackend(const IsaKernels& isa, int threads);

  std::string_view name() const override { return isa_.name; }
  int num_threads() const override { return pool_.size(); }
  bool supports(WeightFormat format) const override;
  bool supports(Op op, WeightFormat format) const override;
  Result<Buffer> Allocate(int64_t bytes) override;
  void CopyToDevice(void* dst, const void* host_src, int64_t bytes) override;
  void CopyToHost(void* host_dst, const void* src, int64_t bytes) override;
  ThreadPool* host_thread_pool() override { return &pool_; }
  bool UsesNvfp4Tiles() const override { return isa_.gemv_nvfp4_tiles != nullptr; }
  bool set_batch_invariant(bool on) override;

  void Matmul(const float* x, int64_t m, int64_t ldx, const WeightMatrix& w, float* y, int64_t ldy,
              bool accumulate) override;
  void MatmulMulti(const float* x, int64_t m, int64_t ldx, const MatmulOutput* outputs,
                   int n_outputs) override;
  void Gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
            const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
            int64_t ldc) override;
  void RmsNorm(const float* x, const float* weight, float eps, int64_t rows, int64_t dim,
               int64_t stride, float* out) override;
  void Rope(float* x, int64_t rows, int64_t row_stride, int64_t n_heads, int64_t head_dim,
            const int32_t* positions, const float* inv_freq) override;
  void RopeHeads(float* x, int64_t rows, int64_t row_stride, int64_t n_heads, int64_t head_stride,
                 int64_t rotary_dim, const int32_t* positions, const float* inv_freq) override;
  void Attention(const AttentionArgs& args) override;
  void SiluMul(const float* gate, const float* up, int64_t rows, int64_t n, int64_t stride,
               float* out) override;
  void Softmax(float* x, int64_t rows, int64_t n) override;
  void Add(const float* a, const float* b, int64_t n, float* out) override;
  void Embedding(const WeightMatrix& table, const int32_t* ids, int64_t n, float* out) override;
  void EmbeddingShard(const WeightMatrix& table, int64_t first_row, const int32_t* ids, int64_t n,
                      float* out) override;
  void KvStore(const KvStoreArgs& args) override;
  void AddRowVector(float* x, int64_t rows, int64_t n, int64_t stride, const float* v) override;
  void Relu2(float* x, int64_t n) override;
  void SoftCap(float* x, int64_t n, float cap) override;
  void Fill(float* x, int64_t n, float value) override;
  void GatherRows(const float* x, int64_t ldx, const int64_t* rows, int64_t n_rows, int64_t n,
                  float* out) override;
  void ScatterAddRows(const float* x, int64_t ldx, const int64_t* rows, const float* weights,
                      int64_t n_rows, int64_t n, float* out, int64_t ldo) override;
  void Scale(float* x, int64_t n, float s) override;
  // Mixture-of-experts decode (cpu_backend_moe.cpp).
  void MatmulGrouped(const GroupedProduct* products, int n_products) override;
  void MatmulScatterAdd(const ScatterProduct* products, int n_products, int64_t n, float* out,
                        int64_t ldo, float* scratch) override;
  int64_t Argmax(const float* x, int64_t n) override;
  void TopK(const float* x, int64_t n, int64_t k, int32_t* indices, float* values) override;

 private:
  // The ISA's table, and the same without gemv_packed and with
  // gemv_batch_invariant as its gemv; isa_ is one or the other
  // (set_batch_invariant, between ops).
  const IsaKernels default_table_;
  const IsaKernels invariant_table_;
  IsaKernels isa_;
  bool batch_invariant_ = false;
  // Matmuls of up to this many rows take the decode kernels (gemv in passes
  // of kGemvMaxRows, or gemv_nvfp4_tiles), larger ones the GEMM: the table's
  // decode_batch_rows (DecodeRows), every m while batch-invariant.
  int64_t decode_rows_;
  ThreadPool pool_;
  // decode_rows_ for w: at most kGemvBatchRows for NVFP4 weights, unless
  // batch-invariant (past 8 rows the GEMM beats the row-major kernels, and
  // the tile kernels' rounding of the activations stays with decode).
  int64_t DecodeRows(const WeightMatrix& w) const;
  // Whether a Matmul of m rows against w takes gemv_nvfp4_tiles.
  bool TakesNvfp4Tiles(const WeightMatrix& w, int64_t m) const;
  // Per pool thread (indexed by the ParallelFor thread id): the matmul weight
  // panel and attention scores.
  std::vector<std::vector<float>> scratch_;
  std::vector<std::vector<float>> attn_scratch_;
  std::vector<std::vector<float>>
      kv_scratch_;  // per thread: an F16 KV head widened (no attend_f16)
  // A decode call's activations packed for isa_.gemv_packed (written before
  // its tasks start, read by all of them).
  std::vector<uint16_t> packed_x_;
  std::vector<std::vector<uint16_t>> bf16_scratch_;  // per thread: NVFP4 rows as BF16 (prefill)
  // Decode rows packed for isa_.gemv_nvfp4_tiles.
  std::vector<uint8_t, CacheLineAllocator<uint8_t>> tiles_x_;
  // RopeHeads' cos and sin by position for the inv_freq it was last given (a
  // model's), each computed once as RopeHeads computes a row's (the same
  // bits), where every call of a forward computed them again: a decode
  // token's 2 x layers calls, a verify step's for each of its rows. Up to
  // kRopeTableBytes; positions past it are computed a row at a time.
  struct RopeTable {
    std::vector<float> inv_freq;
    std::vector<float> cos_sin;  // [position][cos half, sin half]
    int64_t positions = 0;
  };
  static constexpr int64_t kRopeTableBytes = int64_t{32} << 20;
  RopeTable rope_;
  // Whether rope_ now holds every one of `positions` for inv_freq[0, half).
  bool RopeTableCovers(const float* inv_freq, int64_t half, const int32_t* positions, int64_t rows);

  // cpu_backend_moe.cpp: activation blocks packed for gemv_nvfp4_tiles, and
  // per pool thread a task's product rows before they are scattered.
  std::vector<uint8_t, CacheLineAllocator<uint8_t>> moe_tiles_x_;
  std::vector<std::vector<float>> moe_task_y_;
  int64_t PackGroupedTiles(const float* x, int64_t m, int64_t ldx, int64_t k, int64_t* offset);
  // False (nothing done) when batch-invariant and a product's rows cannot all
  // take the NVFP4 tiles.
  bool ScatterAddRun(const ScatterProduct* products, const std::vector<int>& run, int64_t n,
                     float* out, int64_t ldo);

  // Packs x for gemv_packed when this table has it and a BF16 matrix of k
  // columns takes m rows; returns null when gemv is used instead.
  const uint16_t* PackForGemv(const float* x, int64_t m, int64_t ldx, int64_t k);
  // Packs the m rows of x (k columns, ldx apart) for gemv_nvfp4_tiles when
  // this table has it; null when the row-major kernels must run instead
  // (isa.h: any row that cannot go this way).
  const uint8_t* PackForNvfp4Tiles(const float* x, int64_t m, int64_t ldx, int64_t k);
  // Matmul of a BF16 or NVFP4 w against m > kGemvMaxRows rows through
  // gemm_packed over each task's weight rows (kept in L2).
  void MatmulPackedBlocks(const float* x, int64_t m, int64_t ldx, const WeightMatrix& w, float* y,
                          int64_t ldy, bool accumulate);
};

}  // namespace octet::kernels::cpu
