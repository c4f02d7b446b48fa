// CudaBackend: the KernelBackend of octet/kernels/cuda/cuda_backend.h
// (internal; programs make one through CreateCudaBackend or the backend
// registry). Which kernel runs each op:
//   Matmul             m <= 8, BF16/NVFP4: LaunchGemv (gemv.cu);
//   MatmulMulti         as MatmulGrouped (q/k/v in one launch);
//   NormMatmulMulti     the same with the RMSNorm in the GEMV's staging;
//   PrepareQk           LaunchQkPrep: QK-norm, RoPE and the KV store in one
//                       launch;
//   SiluMulMatmul       the GEMV forming silu(gate) * up as it stages it;
//   MatmulGrouped       the same kernel, up to 32 products a launch
//   (and ScatterAdd)    (LaunchGemvGrouped); the weighted sums up to 64
//                       products a launch (LaunchScatterAddProducts);
//                       BF16 otherwise: cuBLAS GemmEx BF16 x BF16 -> F32 on the
//                       activations split in hi + lo BF16 halves (two GEMMs,
//                       the second accumulating); NVFP4: panels dequantised
//                       to BF16 (exact), the same GEMMs with alpha = global
//                       scale; F32: cuBLAS SGEMM; F16: panels widened to F32, SGEMM.
//   Gemm                cuBLAS SGEMM (row-major mapped to column-major).
//   Attention           LaunchGeneralAttention (backend_kernels.cu): prefill and
//                       decode, split over keys on the device when the grid is small;
//                       a decode step's table in the kernels' parameters. A
//                       sequence of 32+ queries whose n_keys is given: GemmAttention
//                       (cuBLAS scores and values, LaunchCausalSoftmax between).
//   RmsNorm, Rope, SiluMul, Add, Embedding, Argmax: cuda_ops.h launchers.
//   Recording (BeginRecording, OCTET_CUDA_GRAPHS): stream capture into CUDA
//                       graphs, their executables kept and run again.
//   The rest: backend_kernels.cu. TopK: on the host over a copy of x.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "backend_kernels.h"
#include "cublas_loader.h"
#include "octet/base/status.h"
#include "octet/kernels/backend.h"
#include "octet/kernels/cuda/cuda_ops.h"

namespace octet::kernels::cuda {

class CudaBackend final : public KernelBackend {
 public:
  static Result<std::unique_ptr<CudaBackend>> Create(const BackendOptions& options);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string_view name() const override { return "cuda"; }
  int num_threads() const override { return 1; }
  bool supports(WeightFormat format) const override;
  bool supports(Op op, WeightFormat format) const override;
  // Not yet: one GEMV launch covers 1-8 rows and cuBLAS takes more, with
  // other reduction orders; says so once, the first time it is asked.
  bool set_batch_invariant(bool on) override;

  MemoryKind memory_kind() const override { return MemoryKind::kDevice; }
  Result<Buffer> Allocate(int64_t bytes) override;
  void CopyToDevice(void* dst, const void* host_src, int64_t bytes) override;
  void CopyToHost(void* host_dst, const void* src, int64_t bytes) override;
  Status Synchronize() override;
  bool BeginRecording() override;
  Result<int64_t> EndRecording(bool run, int64_t replace) override;
  Status RunRecording(int64_t id) override;
  RecordingCounts recording_counts() const override { return counts_; }
  Result<MemoryBudget> AvailableMemory(const std::string& meminfo_path) const override;
  Result<WeightMatrix> PrepareWeight(const WeightMatrix& w, std::vector<Buffer>* storage) override;

  void Matmul(const float* x, int64_t m, int64_t ldx, const WeightMatrix& w, float* y, int64_t ldy,
              bool accumulate) override;
  void MatmulMulti(const float* x, int64_t m, int64_t ldx, const MatmulOutput* outputs,
                   int n_outputs) override;
  void NormMatmulMulti(const float* x, int64_t m, int64_t k, const float* norm_weight, float eps,
                       float* xn, const MatmulOutput* outputs, int n_outputs) override;
  void PrepareQk(const QkPrepArgs& a) override;
  void SiluMulMatmul(float* gate, const float* up, int64_t m, int64_t stride, const WeightMatrix& w,
                     float* y, int64_t ldy, bool accumulate) override;
  void Gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
            const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
            int64_t ldc) override;
  void RmsNorm(const float* x, const float* weight, float eps, int64_t rows, int64_t dim,
               int64_t stride, float* out) override;
  void Rope(float* x, int64_t rows, int64_t row_stride, int64_t n_heads, int64_t head_dim,
            const int32_t* positions, const float* inv_freq) override;
  void Attention(const AttentionArgs& args) override;
  void SiluMul(const float* gate, const float* up, int64_t rows, int64_t n, int64_t stride,
               float* out) override;
  void Softmax(float* x, int64_t rows, int64_t n) override;
  void Add(const float* a, const float* b, int64_t n, float* out) override;
  void Embedding(const WeightMatrix& table, const int32_t* ids, int64_t n, float* out) override;
  void EmbeddingShard(const WeightMatrix& table, int64_t first_row, const int32_t* ids, int64_t n,
                      float* out) override;
  void RopeHeads(float* x, int64_t rows, int64_t row_stride, int64_t n_heads, int64_t head_stride,
                 int64_t rotary_dim, const int32_t* positions, const float* inv_freq) override;
  void KvStore(const KvStoreArgs& args) override;
  void KvStoreBatch(const KvStoreArgs* args, int64_t n) override;
  void AddRowVector(float* x, int64_t rows, int64_t n, int64_t stride, const float* v) override;
  void Relu2(float* x, int64_t n) override;
  void SoftCap(float* x, int64_t n, float cap) override;
  void Fill(float* x, int64_t n, float value) override;
  void GatherRows(const float* x, int64_t ldx, const int64_t* rows, int64_t n_rows, int64_t n,
                  float* out) override;
  void ScatterAddRows(const float* x, int64_t ldx, const int64_t* rows, const float* weights,
                      int64_t n_rows, int64_t n, float* out, int64_t ldo) override;
  void MatmulGrouped(const GroupedProduct* products, int n_products) override;
  void MatmulScatterAdd(const ScatterProduct* products, int n_products, int64_t n, float* out,
                        int64_t ldo, float* scratch) override;
  int64_t grouped_experts_max_tokens() const override { return kGemvMaxRows; }
  // With OCTET_CUDA_MOE_ROUTING=device (until a GPU has run them): routing
  // and the experts on the device (LaunchMoeRoute, LaunchGemvRouted,
  // LaunchMoeCombine); otherwise Unimplemented, as the defaults.
  Result<Buffer> PrepareExperts(const WeightMatrix* const* gate, const WeightMatrix* const* up,
                                const WeightMatrix* const* down, int64_t n_experts) override;
  Status MoeDecode(const MoeDecodeArgs& args) override;
  void Scale(float* x, int64_t n, float s) override;
  int64_t Argmax(const float* x, int64_t n) override;
  void TopK(const float* x, int64_t n, int64_t k, int32_t* indices, float* values) override;

 private:
  // Device scratch the ops reuse; grown (never shrunk) on demand.
  enum ScratchId {
    kXBf16,
    kPanel,
    kAttnTable,
    kAttnWork,
    kArgmax,
    kNvfp4Packed,
    kExpertRows,  // MatmulScatterAdd's products before they are added
    kMoeDecode,   // MoeDecode's routes and its slots' rows
    kAttnGemm,    // GemmAttention's scores (and widened F16 keys and values)
    kScratchCount
  };

  CudaBackend() = default;
  // Keeps the first error for Synchronize; true when `s` is OK. (While
  // recording, the Aborted of an op that cannot be recorded is not kept:
  // EndRecording reports it.)
  bool Check(Status s);
  // Inside a recording, for an op that cannot be recorded (it needs the host
  // or memory): notes `what` as the reason the recording cannot run and
  // returns true; the op then does nothing. False outside a recording.
  bool Unrecordable(const char* what);
  Result<void*> Scratch(ScratchId id, size_t bytes);
  Status MatmulImpl(const float* x, int64_t m, int64_t ldx, const WeightMatrix& w, float* y,
                    int64_t ldy, bool accumulate);
  // MatmulGrouped's work: decode products of the float GEMV in one launch
  // per format and row count (LaunchGemvGrouped, which checks all of them
  // before it queues any), the others (prefill-sized, F32/F16, the integer
  // kernel's) a MatmulImpl each, checked as Matmul checks them.
  Status MatmulGroupedImpl(const GroupedProduct* products, int n_products);
  // Whether an NVFP4 decode matmul of m rows by w goes to the integer kernel.
  bool UseNvfp4Int(int64_t m, const WeightMatrix& w) const;
  // x packed for it (into the kNvfp4Packed scratch).
  Result<const void*> PackNvfp4Int(const float* x, int64_t m, int64_t ldx, int64_t k);
  // y[m, n] (+)= alpha * x · Wᵀ with W BF16 [n, k], rows `w_ld` elements apart.
  Status Bf16Gemm(const uint16_t* x_bf16, bool split, int64_t m, const uint16_t* w, int64_t w_ld,
                  int64_t n, int64_t k, float alpha, float* y, int64_t ldy, bool accumulate);
  Status Sgemm(const float* x, int64_t m, int64_t ldx, const float* w, int64_t w_ld, int64_t n,
               int64_t k, float* y, int64_t ldy, bool accumulate);
  // Attention of sequence `q` (at least kGemmAttentionMinTokens queries, its
  // n_keys given) through cuBLAS: see cuda_backend.cpp.
  Status GemmAttention(const AttentionArgs& a, const AttentionSequence& q);
  static constexpr int64_t kGemmAttentionMinTokens = 32;
  static constexpr int64_t kGemmAttentionScoresBytes = int64_t{256} << 20;
  static constexpr int64_t kGemmAttentionMaxTileRows = 1024;
  // Queues the copy of `bytes` host bytes to `dst` on the stream; `src` may be
  // reused as soon as it returns. Small copies go through the pinned staging
  // ring (below), larger ones straight from pageable memory.
  Status Upload(void* dst, const void* src, size_t bytes);

  cudaStream_t stream_ = nullptr;
  const CublasApi* cublas_ = nullptr;
  cublasHandle_t handle_ = nullptr;
  int sm_count_ = 1;
  bool split_bf16_ = true;      // OCTET_CUDA_MATMUL != "bf16"
  bool nvfp4_int_ = false;      // OCTET_CUDA_NVFP4_GEMV == "int"
  bool moe_on_device_ = false;  // OCTET_CUDA_MOE_ROUTING == "device"
  // Each expert table PrepareExperts made (by its device address): how many
  // experts, their width and hidden size, which MoeDecode checks its
  // arguments against (the kernels would write past a slot's rows otherwise).
  struct ExpertTableShape {
    int64_t experts = 0, width = 0, hidden = 0;
  };
  std::unordered_map<const void*, ExpertTableShape> expert_tables_;
  bool fused_ = true;           // OCTET_CUDA_FUSED != "off"
  bool gemm_attention_ = true;  // OCTET_CUDA_PREFILL_ATTENTION != "kernel"
  // OCTET_CUDA_PREFILL_ATTENTION == "tensor": long prefills over F16 caches
  // on the tensor cores (attention_tc.cu), the rest as with "gemm".
  bool tensor_attention_ = false;
  // OCTET_CUDA_GRAPHS: "on" records decode steps and runs a recording again
  // for the same step; "update" records every step (each run through the
  // executable of the step's last recording, updated in place).
  bool graphs_ = false;
  bool replay_ = false;

  // Recordings (BeginRecording): the stream captured into a graph, run
  // through an executable kept in a slot. A recording's executable is updated
  // in place by the recording that replaces it where the two have the same
  // topology. `epoch` counts scratch reallocations: a recording made before
  // one names memory that has moved and is not run again.
  struct GraphSlot {
    cudaGraphExec_t exec = nullptr;
    int64_t id = -1;
    int64_t epoch = 0;
    bool replayable = false;
    int64_t last_used = 0;
  };
  static constexpr int kGraphSlots = 8;
  // Runs slot's executable; counts it.
  Status LaunchGraph(GraphSlot& slot, bool replay);
  bool recording_ = false;
  const char* abort_reason_ = nullptr;  // why the recording cannot run
  // Whether every op recorded so far reads its per-step values from device
  // memory (false: the recording runs once only).
  bool replayable_ = false;
  int aborts_in_row_ = 0;
  GraphSlot graph_slots_[kGraphSlots];
  int64_t graph_clock_ = 0;
  int64_t next_recording_id_ = 0;
  int64_t scratch_epoch_ = 0;
  int64_t graphs_instantiated_ = 0;
  RecordingCounts counts_;
  std::vector<const char*> logged_aborts_;  // reasons already logged
  Status error_ = Status::Ok();
  int64_t more_errors_ = 0;
  struct ScratchBuffer {
    void* data = nullptr;
    size_t bytes = 0;
  };
  ScratchBuffer scratch_[kScratchCount];
  std::vector<uint8_t> host_table_;  // the attention table before its upload
  // MatmulGrouped's launch lists by format (BF16, NVFP4) and rows - 1.
  std::vector<GemvProduct> gemv_groups_[2][kGemvMaxRows];
  std::vector<GroupedProduct> scatter_products_;  // MatmulScatterAdd's products
  std::vector<GroupedProduct> multi_products_;    // MatmulMulti's outputs
  std::vector<GemvProduct> gemv_products_;        // NormMatmulMulti's
  std::vector<int64_t> qk_first_rows_;            // PrepareQk's stores' first rows
  std::vector<ScatterRows> scatter_rows_;         // and where their rows go

  // Pinned host memory for the small uploads of every step (token ids,
  // positions, each layer's attention table). A copy from pageable memory
  // may make the runtime wait for the stream to drain before it stages the
  // bytes, which would stop the host from queueing ahead of the device at
  // every layer; a copy from pinned memory is only queued. The ring has two
  // halves used in turn: leaving a half records an event, and a half is
  // reused only once the event recorded when it was last left has passed
  // (its copies have run). Null where pinned memory could not be had: every
  // upload is then pageable.
  struct StagingRing {
    uint8_t* base = nullptr;
    size_t half_bytes = 0;
    int half = 0;     // the half being filled
    size_t head = 0;  // its next free byte
    cudaEvent_t left[2] = {nullptr, nullptr};
  };
  StagingRing staging_;
};

}  // namespace octet::kernels::cuda
