// CudaBackend (cuda_backend.h): argument checks, memory, and the dispatch of
// each op to its kernel. Host code only: it never dereferences a device
// pointer (the attention table and TopK go through explicit copies).
#include "cuda_backend.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <string>
#include <utility>

#include "backend_kernels.h"
#include "cuda_check.h"
#include "octet/base/log.h"
#include "octet/kernels/cuda/cuda_backend.h"
#include "octet/kernels/cuda/cuda_device.h"
#include "octet/kernels/cuda/cuda_ops.h"

namespace octet::kernels::cuda {
namespace {

// Each half of the pinned staging ring (CudaBackend::StagingRing): a decode
// step uploads a few kilobytes, so a half holds many steps.
constexpr size_t kStagingHalfBytes = size_t{1} << 20;

// Dequantised weight panels (NVFP4 -> BF16, F16 -> F32) are at most this big.
constexpr int64_t kPanelBytes = int64_t{64} << 20;

int64_t RoundUp(int64_t v, int64_t to) { return (v + to - 1) / to * to; }

// Bytes of one packed row of `w`'s codes/elements.
int64_t RowBytes(const WeightMatrix& w) {
  switch (w.format) {
    case WeightFormat::kF32:
      return w.cols * 4;
    case WeightFormat::kBF16:
    case WeightFormat::kF16:
      return w.cols * 2;
    case WeightFormat::kNvfp4:
      return (w.cols + 1) / 2;
  }
  return 0;
}

std::string Str(int64_t v) { return std::to_string(v); }

// Whether environment variable `name` is `pick`. Unset, empty or `keep`:
// false; anything else: false with a warning that ends in `keeping` (what
// the backend does instead).
bool EnvPicks(const char* name, const char* pick, const char* keep, const char* keeping) {
  const char* value = std::getenv(name);
  if (!value || !*value) return false;
  const std::string v = value;
  if (v == pick) return true;
  if (v != keep) {
    OCTET_LOG(WARNING) << "cuda backend: " << name << "='" << v << "' is neither '" << pick
                       << "' nor '" << keep << "'; " << keeping;
  }
  return false;
}

}  // namespace

Result<std::unique_ptr<KernelBackend>> CreateCudaBackend(const BackendOptions& options) {
  OCTET_ASSIGN_OR_RETURN(std::unique_ptr<CudaBackend> b, CudaBackend::Create(options));
  return std::unique_ptr<KernelBackend>(std::move(b));
}

bool CudaBackend::set_batch_invariant(bool on) {
  if (on) {
    static std::once_flag logged;
    std::call_once(logged, [] {
      OCTET_LOG(WARNING) << "cuda backend: no batch-invariant verify steps yet: a speculative "
                            "draft's logits may differ from one-token decoding in the last bits, "
                            "so greedy speculation can part from plain greedy decoding where two "
                            "logits nearly tie";
    });
  }
  return !on;
}

Result<std::unique_ptr<CudaBackend>> CudaBackend::Create(const BackendOptions& options) {
  (void)options;  // the host threads do not apply
  const CudaProbeResult probe = CudaProbe();
  if (!probe.usable) return UnavailableError(probe.why);
  OCTET_RETURN_IF_ERROR(CudaCheck(cudaSetDevice(0), "cudaSetDevice(0)"));
  if (probe.devices.size() > 1) {
    // A DGX Spark has one GPU; on a host of several, the engine uses the first
    // (every local TP rank's weights too; NCCL's buffers follow LocalRank).
    static std::once_flag said;
    std::call_once(said, [&] {
      OCTET_LOG(INFO) << "cuda backend: GPU 0 of " << probe.devices.size()
                      << " (this engine places a process's model on the first GPU)";
    });
  }
  OCTET_ASSIGN_OR_RETURN(const CublasApi* api, LoadCublas());
  std::unique_ptr<CudaBackend> b(new CudaBackend());
  b->cublas_ = api;
  b->sm_count_ = std::max(1, probe.devices[0].sm_count);
  OCTET_RETURN_IF_ERROR(CudaCheck(cudaStreamCreateWithFlags(&b->stream_, cudaStreamNonBlocking),
                                  "cudaStreamCreateWithFlags"));
  if (cublasStatus_t st = api->create(&b->handle_); st != CUBLAS_STATUS_SUCCESS) {
    b->handle_ = nullptr;
    return CublasError(*api, st, "cublasCreate");
  }
  if (cublasStatus_t st = api->set_stream(b->handle_, b->stream_); st != CUBLAS_STATUS_SUCCESS) {
    return CublasError(*api, st, "cublasSetStream");
  }
  const char* mode = std::getenv("OCTET_CUDA_MATMUL");
  b->split_bf16_ = !(mode && std::string(mode) == "bf16");
  // The NVFP4 decode matmuls: the float kernel (gemv.cu, proven on an H200)
  // unless OCTET_CUDA_NVFP4_GEMV=int picks the integer one (gemv_int.cu).
  b->nvfp4_int_ = EnvPicks("OCTET_CUDA_NVFP4_GEMV", "int", "float", "using the float kernel");
  if (b->nvfp4_int_) {
    OCTET_LOG(INFO) << "cuda backend: NVFP4 decode matmuls (1-" << kGemvMaxRows
                    << " rows) in integers (OCTET_CUDA_NVFP4_GEMV=int)";
  }
  // Mixture-of-experts decode: routing on the host (the engine's) unless
  // OCTET_CUDA_MOE_ROUTING=device moves it, and the experts, onto the device.
  b->moe_on_device_ = EnvPicks("OCTET_CUDA_MOE_ROUTING", "device", "host", "routing on the host");
  if (b->moe_on_device_) {
    OCTET_LOG(INFO) << "cuda backend: mixture-of-experts decode routed on the device "
                       "(OCTET_CUDA_MOE_ROUTING=device)";
  }
  // The fused decode ops (norms, SiLU·mul into the GEMVs; q/k/v and gate/up
  // in one launch each; QK-norm, RoPE and the KV store in one): on unless
  // OCTET_CUDA_FUSED=off, the A/B.
  b->fused_ = !EnvPicks("OCTET_CUDA_FUSED", "off", "on", "fusing");
  if (!b->fused_) {
    OCTET_LOG(INFO) << "cuda backend: norm, matmul, RoPE and KV-store launches unfused "
                       "(OCTET_CUDA_FUSED=off)";
  }
  // Long prefills' attention through cuBLAS (GemmAttention) unless
  // OCTET_CUDA_PREFILL_ATTENTION is "kernel" (the table kernel, the A/B) or
  // "tensor" (over F16 caches, flash attention on the tensor cores; not the
  // default until a GPU has checked and measured it).
  if (const char* v = std::getenv("OCTET_CUDA_PREFILL_ATTENTION"); v && *v) {
    const std::string mode = v;
    if (mode == "kernel") {
      b->gemm_attention_ = false;
      OCTET_LOG(INFO) << "cuda backend: prefill attention in the table kernel "
                         "(OCTET_CUDA_PREFILL_ATTENTION=kernel)";
    } else if (mode == "tensor") {
      b->tensor_attention_ = true;
      OCTET_LOG(INFO) << "cuda backend: prefill attention over F16 caches on the tensor cores "
                         "(OCTET_CUDA_PREFILL_ATTENTION=tensor; float caches through the GEMMs)";
    } else if (mode != "gemm") {
      OCTET_LOG(WARNING) << "cuda backend: OCTET_CUDA_PREFILL_ATTENTION='" << mode
                         << "' is neither 'gemm', 'tensor' nor 'kernel'; using the GEMMs";
    }
  }
  // Decode steps as CUDA graphs (BeginRecording): off unless
  // OCTET_CUDA_GRAPHS is "on" (a recording runs again for the same step) or
  // "update" (every step recorded), until a GPU has measured them.
  if (const char* g = std::getenv("OCTET_CUDA_GRAPHS"); g && *g) {
    const std::string v = g;
    b->graphs_ = v == "on" || v == "update";
    b->replay_ = v == "on";
    if (b->graphs_) {
      OCTET_LOG(INFO) << "cuda backend: decode steps as CUDA graphs (OCTET_CUDA_GRAPHS=" << v
                      << (b->replay_ ? "): recorded once, run again for the same step"
                                     : "): recorded every step");
    } else if (v != "off") {
      OCTET_LOG(WARNING) << "cuda backend: OCTET_CUDA_GRAPHS='" << v
                         << "' is neither 'on', 'update' nor 'off'; running steps op by op";
    }
  }
  // Without pinned memory the uploads stay correct, only synchronous-ish.
  void* ring = nullptr;
  if (cudaHostAlloc(&ring, 2 * kStagingHalfBytes, cudaHostAllocDefault) == cudaSuccess &&
      cudaEventCreateWithFlags(&b->staging_.left[0], cudaEventDisableTiming) == cudaSuccess &&
      cudaEventCreateWithFlags(&b->staging_.left[1], cudaEventDisableTiming) == cudaSuccess) {
    b->staging_.base = static_cast<uint8_t*>(ring);
    b->staging_.half_bytes = kStagingHalfBytes;
  } else {
    cudaGetLastError();  // clear the error the failed call left behind
    if (ring) cudaFreeHost(ring);
    OCTET_LOG(WARNING) << "cuda backend: no pinned staging memory; small uploads are "
                          "copied from pageable memory (the host waits for the device)";
  }
  return b;
}

CudaBackend::~CudaBackend() {
  // Nothing to report to here; a broken context shows in the next checked call.
  if (recording_) {
    cudaGraph_t graph = nullptr;
    if (cudaStreamEndCapture(stream_, &graph) == cudaSuccess && graph) cudaGraphDestroy(graph);
    cudaGetLastError();
  }
  if (stream_) cudaStreamSynchronize(stream_);
  for (GraphSlot& g : graph_slots_) {
    if (g.exec) cudaGraphExecDestroy(g.exec);
  }
  if (counts_.recorded > 0 || counts_.aborted > 0) {
    OCTET_LOG(INFO) << "cuda backend: " << counts_.recorded + counts_.replayed
                    << " steps ran as graphs (" << counts_.recorded << " recorded, "
                    << counts_.replayed << " run again; " << graphs_instantiated_
                    << " executables instantiated), " << counts_.aborted
                    << " recordings could not run";
  }
  for (ScratchBuffer& s : scratch_) {
    if (s.data) cudaFree(s.data);
  }
  if (handle_) cublas_->destroy(handle_);
  for (cudaEvent_t e : staging_.left) {
    if (e) cudaEventDestroy(e);
  }
  if (staging_.base) cudaFreeHost(staging_.base);
  if (stream_) cudaStreamDestroy(stream_);
}

Status CudaBackend::Upload(void* dst, const void* src, size_t bytes) {
  if (Unrecordable("a copy from the host")) return AbortedError("not recorded: a host copy");
  StagingRing& r = staging_;
  if (!r.base || bytes > r.half_bytes) {
    // From pageable memory. The runtime documents that such a copy returns
    // once the bytes are staged, but where the GPU reads host memory through
    // the host's page tables (Grace's HMM/ATS) it may read them in place, so
    // the copy is waited for: the caller may reuse src at once. It is the
    // size of weights at load (the ring takes per-step uploads), and a
    // pageable copy waits for the stream before it starts anyway.
    OCTET_RETURN_IF_ERROR(
        CudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_),
                  "cudaMemcpyAsync(" + Str(static_cast<int64_t>(bytes)) + " bytes to the device)"));
    return CudaCheck(cudaStreamSynchronize(stream_), "cudaStreamSynchronize(upload)");
  }
  r.head = (r.head + 15) & ~size_t{15};
  if (r.head + bytes > r.half_bytes) {
    // Leave this half; take the other once the copies queued from it have run.
    OCTET_RETURN_IF_ERROR(
        CudaCheck(cudaEventRecord(r.left[r.half], stream_), "cudaEventRecord(staging)"));
    r.half ^= 1;
    OCTET_RETURN_IF_ERROR(
        CudaCheck(cudaEventSynchronize(r.left[r.half]), "cudaEventSynchronize(staging)"));
    r.head = 0;
  }
  uint8_t* slot = r.base + r.half * r.half_bytes + r.head;
  std::memcpy(slot, src, bytes);
  r.head += bytes;
  return CudaCheck(
      cudaMemcpyAsync(dst, slot, bytes, cudaMemcpyHostToDevice, stream_),
      "cudaMemcpyAsync(" + Str(static_cast<int64_t>(bytes)) + " staged bytes to the device)");
}

bool CudaBackend::supports(WeightFormat format) const {
  switch (format) {
    case WeightFormat::kF32:
    case WeightFormat::kBF16:
    case WeightFormat::kF16:
    case WeightFormat::kNvfp4:
      return true;
  }
  return false;
}

bool CudaBackend::supports(Op op, WeightFormat format) const {
  switch (op) {
    case Op::kMatmul:
    case Op::kEmbedding:
      return supports(format);
    default:
      return op < Op::kCount;
  }
}

// Why a recording stops (Unrecordable) when a scratch buffer must grow: the
// one abort that cannot repeat for a step of the same shape, since the ops
// issued again one by one grow the buffer, and buffers only grow.
constexpr char kScratchGrowth[] = "a scratch buffer to grow";

bool CudaBackend::Check(Status s) {
  if (s.ok()) return true;
  if (recording_ && abort_reason_ && s.code() == StatusCode::kAborted) return false;
  if (error_.ok()) {
    error_ = std::move(s);
  } else {
    ++more_errors_;
  }
  return false;
}

Result<void*> CudaBackend::Scratch(ScratchId id, size_t bytes) {
  ScratchBuffer& s = scratch_[id];
  if (s.bytes >= bytes && s.data) return s.data;
  if (Unrecordable(kScratchGrowth)) return AbortedError("not recorded: scratch growth");
  ++scratch_epoch_;  // recordings that name the old block are not run again
  // The old block may still be read by queued work.
  OCTET_RETURN_IF_ERROR(CudaCheck(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"));
  const size_t want = std::max(bytes, s.bytes + s.bytes / 2);
  if (s.data) cudaFree(s.data);
  s.data = nullptr;
  s.bytes = 0;
  void* p = nullptr;
  OCTET_RETURN_IF_ERROR(
      CudaCheck(cudaMalloc(&p, want), "cudaMalloc(" + std::to_string(want) + " bytes of scratch)"));
  s.data = p;
  s.bytes = want;
  return p;
}

// ---- memory -------------------------------------------------------------------

Result<Buffer> CudaBackend::Allocate(int64_t bytes) {
  if (bytes < 0) return InvalidArgumentError("Allocate: negative size");
  if (Unrecordable("memory to allocate")) return AbortedError("not recorded: an allocation");
  const size_t size = static_cast<size_t>(std::max<int64_t>(bytes, 1));
  void* p = nullptr;
  if (cudaError_t e = cudaMalloc(&p, size); e != cudaSuccess) {
    cudaGetLastError();
    size_t free_bytes = 0, total = 0;
    std::string have;
    if (cudaMemGetInfo(&free_bytes, &total) == cudaSuccess) {
      have = " (" + std::to_string(free_bytes) + " of " + std::to_string(total) +
             " bytes free on device 0)";
    }
    cudaGetLastError();
    Status s = CudaError(e, "cudaMalloc(" + Str(bytes) + " bytes)" + have);
    if (e == cudaErrorMemoryAllocation) return ResourceExhaustedError(s.message());
    return s;
  }
  if (cudaError_t e = cudaMemsetAsync(p, 0, size, stream_); e != cudaSuccess) {
    cudaFree(p);
    return CudaError(e, "cudaMemsetAsync(" + Str(bytes) + " bytes)");
  }
  return Buffer(p, bytes, MemoryKind::kDevice, [](void* q, int64_t) { cudaFree(q); });
}

Result<MemoryBudget> CudaBackend::AvailableMemory(const std::string& meminfo_path) const {
  size_t free_bytes = 0, total = 0;
  if (cudaError_t e = cudaMemGetInfo(&free_bytes, &total); e != cudaSuccess) {
    cudaGetLastError();
    return CudaError(e, "cudaMemGetInfo");
  }
  int integrated = 0;  // GB10: the device shares the host's memory
  if (cudaDeviceGetAttribute(&integrated, cudaDevAttrIntegrated, 0) != cudaSuccess) {
    cudaGetLastError();
    integrated = 0;
  }
  return DeviceMemoryBudget(static_cast<int64_t>(free_bytes), integrated != 0,
                            ReadMemInfo(meminfo_path));
}

void CudaBackend::CopyToDevice(void* dst, const void* host_src, int64_t bytes) {
  if (bytes <= 0) return;
  if (!dst || !host_src) {
    Check(InvalidArgumentError("CopyToDevice: null pointer"));
    return;
  }
  // Upload has copied the bytes (into the pinned ring, or to the device)
  // before it returns, so the caller may reuse host_src at once.
  Check(Upload(dst, host_src, static_cast<size_t>(bytes)));
}

void CudaBackend::CopyToHost(void* host_dst, const void* src, int64_t bytes) {
  if (bytes <= 0) return;
  if (!host_dst || !src) {
    Check(InvalidArgumentError("CopyToHost: null pointer"));
    return;
  }
  if (Unrecordable("a copy to the host")) {
    // Nothing is copied; the caller reads defined bytes all the same.
    std::memset(host_dst, 0, static_cast<size_t>(bytes));
    return;
  }
  if (Check(CudaCheck(cudaMemcpyAsync(host_dst, src, static_cast<size_t>(bytes),
                                      cudaMemcpyDeviceToHost, stream_),
                      "cudaMemcpyAsync(" + Str(bytes) + " bytes to the host)"))) {
    Check(CudaCheck(cudaStreamSynchronize(stream_), "cudaStreamSynchronize after a copy"));
  }
}

Status CudaBackend::Synchronize() {
  if (Unrecordable("a synchronization")) return AbortedError("not recorded: a synchronization");
  Status device = CudaCheck(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  Status first = std::move(error_);
  error_ = Status::Ok();
  const int64_t more = std::exchange(more_errors_, 0);
  if (!first.ok()) {
    std::string msg = "cuda backend: " + first.message();
    if (more > 0) msg += " (and " + Str(more) + " more errors)";
    return Status(first.code(), std::move(msg));
  }
  return device;
}

// ---- recording: CUDA graphs ----------------------------------------------------
//
// A recorded step is captured into a graph and run through an executable kept
// in a slot. With OCTET_CUDA_GRAPHS=on the engine runs that executable again
// for later steps that issue the same ops on the same memory (RunRecording:
// one launch, no op issued; the kernels read each step's tokens, positions and
// KV lengths from device memory); with "update" every step is captured anew
// and the executable updated in place (cudaGraphExecUpdate, far cheaper than
// instantiating), as llama.cpp's CUDA backend does. Capture mode "relaxed":
// the ops' own calls that are not stream work (function attributes, error
// queries) stay legal; those that would synchronize or allocate never reach
// CUDA while recording (Unrecordable).

bool CudaBackend::Unrecordable(const char* what) {
  if (!recording_) return false;
  if (!abort_reason_) abort_reason_ = what;
  return true;
}

bool CudaBackend::BeginRecording() {
  if (!graphs_ || recording_ || !error_.ok()) return false;
  if (cudaError_t e = cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed);
      e != cudaSuccess) {
    cudaGetLastError();
    graphs_ = false;
    OCTET_LOG(WARNING) << "cuda backend: cudaStreamBeginCapture: " << cudaGetErrorString(e)
                       << "; steps run op by op from now on";
    return false;
  }
  recording_ = true;
  abort_reason_ = nullptr;
  replayable_ = replay_;
  return true;
}

Result<int64_t> CudaBackend::EndRecording(bool run, int64_t replace) {
  if (!recording_) return FailedPreconditionError("EndRecording without BeginRecording");
  recording_ = false;
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream_, &graph);
  struct DestroyGraph {
    cudaGraph_t g;
    ~DestroyGraph() {
      if (g) cudaGraphDestroy(g);
    }
  } destroy{ended == cudaSuccess ? graph : nullptr};
  if (ended != cudaSuccess) {
    cudaGetLastError();
    if (!abort_reason_) abort_reason_ = "a call the stream capture does not allow";
  }
  if (abort_reason_) {
    ++counts_.aborted;
    if (std::find(logged_aborts_.begin(), logged_aborts_.end(), abort_reason_) ==
        logged_aborts_.end()) {
      logged_aborts_.push_back(abort_reason_);
      OCTET_LOG(INFO) << "cuda backend: a recorded step needed " << abort_reason_
                      << "; it runs op by op (logged once)";
    }
    // Nothing recorded ran: an error an op met while recording (a capture
    // that CUDA invalidated fails every later launch) belongs to no step,
    // and the ops issued again one by one report any real one anew.
    error_ = Status::Ok();
    more_errors_ = 0;
    // Recordings that keep failing have a cause that does not go away. Scratch
    // growth is not one: it happens once per new batch size (a server's
    // batch ramping up 1, 2, 3, 4 ... grows the MoE scratch at each), so it
    // does not count.
    constexpr int kMaxAbortsInRow = 4;
    if (abort_reason_ != kScratchGrowth && ++aborts_in_row_ >= kMaxAbortsInRow) {
      graphs_ = false;
      OCTET_LOG(WARNING) << "cuda backend: " << kMaxAbortsInRow
                         << " recordings in a row could not run (the last needed " << abort_reason_
                         << "); steps run op by op from now on";
    }
    return AbortedError(std::string("cuda backend: the recorded step needed ") + abort_reason_);
  }
  // The caller's step failed, or an op's did (Synchronize reports it):
  // nothing runs.
  if (!run || !error_.ok()) return int64_t{-1};
  aborts_in_row_ = 0;
  size_t nodes = 0;
  OCTET_RETURN_IF_ERROR(CudaCheck(cudaGraphGetNodes(graph, nullptr, &nodes), "cudaGraphGetNodes"));
  if (nodes == 0) return int64_t{-1};
  // The slot of the recording this one replaces, else a free one or the
  // least recently used.
  GraphSlot* slot = nullptr;
  for (GraphSlot& g : graph_slots_) {
    if (replace >= 0 && g.id == replace) slot = &g;
  }
  if (!slot) {
    slot = &graph_slots_[0];
    for (GraphSlot& g : graph_slots_) {
      if (g.last_used < slot->last_used) slot = &g;
    }
  }
  if (slot->exec && slot->id == replace) {
    cudaGraphExecUpdateResultInfo info{};
    if (cudaGraphExecUpdate(slot->exec, graph, &info) != cudaSuccess) {
      cudaGetLastError();  // another topology: instantiate it
      cudaGraphExecDestroy(slot->exec);
      slot->exec = nullptr;
    }
  } else if (slot->exec) {
    cudaGraphExecDestroy(slot->exec);
    slot->exec = nullptr;
  }
  if (!slot->exec) {
    slot->id = -1;
    if (cudaError_t e = cudaGraphInstantiate(&slot->exec, graph, 0); e != cudaSuccess) {
      cudaGetLastError();
      slot->exec = nullptr;
      graphs_ = false;
      OCTET_LOG(WARNING) << "cuda backend: cudaGraphInstantiate: " << cudaGetErrorString(e)
                         << "; steps run op by op from now on";
      return AbortedError("cuda backend: cudaGraphInstantiate failed");
    }
    ++graphs_instantiated_;
  }
  slot->id = next_recording_id_++;
  slot->epoch = scratch_epoch_;
  slot->replayable = replayable_;
  OCTET_RETURN_IF_ERROR(LaunchGraph(*slot, /*replay=*/false));
  return slot->id;
}

Status CudaBackend::RunRecording(int64_t id) {
  if (!graphs_ || recording_ || !error_.ok()) {
    return AbortedError("cuda backend: not running recordings now");
  }
  for (GraphSlot& g : graph_slots_) {
    if (g.exec && g.id == id) {
      if (!g.replayable) return AbortedError("cuda backend: recording " + Str(id) + " runs once");
      if (g.epoch != scratch_epoch_) {
        return AbortedError("cuda backend: recording " + Str(id) + " names scratch that has moved");
      }
      return LaunchGraph(g, /*replay=*/true);
    }
  }
  return AbortedError("cuda backend: no recording " + Str(id));
}

Status CudaBackend::LaunchGraph(GraphSlot& slot, bool replay) {
  slot.last_used = ++graph_clock_;
  OCTET_RETURN_IF_ERROR(CudaCheck(cudaGraphLaunch(slot.exec, stream_), "cudaGraphLaunch"));
  ++(replay ? counts_.replayed : counts_.recorded);
  return Status::Ok();
}

Result<WeightMatrix> CudaBackend::PrepareWeight(const WeightMatrix& w,
                                                std::vector<Buffer>* storage) {
  if (!storage) return InvalidArgumentError("PrepareWeight: null storage");
  if (!supports(w.format)) return UnimplementedError("PrepareWeight: unknown weight format");
  if (w.rows < 0 || w.cols < 0) return InvalidArgumentError("PrepareWeight: negative shape");
  WeightMatrix out = w;
  out.tiles = nullptr;  // a CPU layout
  out.tile_group_stride = 0;
  const int64_t row_bytes = RowBytes(w);
  if (w.rows == 0 || w.cols == 0) {
    out.data = nullptr;
    out.scales = nullptr;
    return out;
  }
  if (!w.data || (w.rows > 1 && w.row_stride < row_bytes)) {
    return InvalidArgumentError("PrepareWeight: " + std::string(WeightFormatName(w.format)) +
                                " matrix [" + Str(w.rows) + ", " + Str(w.cols) +
                                "] without data or with a row stride of " + Str(w.row_stride) +
                                " < " + Str(row_bytes) + " bytes");
  }
  // Rows on 16-byte boundaries: the decode kernels then take vector loads.
  const int64_t pitch = RoundUp(row_bytes, 16);
  OCTET_ASSIGN_OR_RETURN(Buffer data, Allocate(w.rows * pitch));
  OCTET_RETURN_IF_ERROR(
      CudaCheck(cudaMemcpy2DAsync(data.data(), pitch, w.data, w.rows > 1 ? w.row_stride : row_bytes,
                                  row_bytes, w.rows, cudaMemcpyHostToDevice, stream_),
                "cudaMemcpy2DAsync(weights, " + Str(w.rows * row_bytes) + " bytes)"));
  out.data = data.data();
  out.row_stride = pitch;
  storage->push_back(std::move(data));
  if (w.format == WeightFormat::kNvfp4) {
    const int64_t scale_bytes = (w.cols + kNvfp4BlockSize - 1) / kNvfp4BlockSize;
    if (!w.scales || (w.rows > 1 && w.scale_row_stride < scale_bytes)) {
      return InvalidArgumentError(
          "PrepareWeight: NVFP4 matrix without scales or with a scale "
          "row stride < " +
          Str(scale_bytes));
    }
    const int64_t scale_pitch = RoundUp(scale_bytes, 16);
    OCTET_ASSIGN_OR_RETURN(Buffer scales, Allocate(w.rows * scale_pitch));
    OCTET_RETURN_IF_ERROR(
        CudaCheck(cudaMemcpy2DAsync(scales.data(), scale_pitch, w.scales,
                                    w.rows > 1 ? w.scale_row_stride : scale_bytes, scale_bytes,
                                    w.rows, cudaMemcpyHostToDevice, stream_),
                  "cudaMemcpy2DAsync(NVFP4 scales)"));
    out.scales = scales.as<uint8_t>();
    out.scale_row_stride = scale_pitch;
    storage->push_back(std::move(scales));
  }
  return out;
}

// ---- matmul -------------------------------------------------------------------

void CudaBackend::Matmul(const float* x, int64_t m, int64_t ldx, const WeightMatrix& w, float* y,
                         int64_t ldy, bool accumulate) {
  Check(MatmulImpl(x, m, ldx, w, y, ldy, accumulate));
}

void CudaBackend::MatmulMulti(const float* x, int64_t m, int64_t ldx, const MatmulOutput* outputs,
                              int n_outputs) {
  // Matrices of one k that all go to the integer kernel share one packing.
  bool shared_packing = outputs && n_outputs > 1;
  for (int i = 0; shared_packing && i < n_outputs; ++i) {
    shared_packing = UseNvfp4Int(m, *outputs[i].w) && outputs[i].w->cols == outputs[0].w->cols &&
                     outputs[i].w->rows > 0 && outputs[i].ldy >= outputs[i].w->rows &&
                     outputs[i].y && x && ldx >= outputs[i].w->cols;
  }
  if (shared_packing) {
    auto packed = PackNvfp4Int(x, m, ldx, outputs[0].w->cols);
    if (!Check(packed.status())) return;
    for (int i = 0; i < n_outputs; ++i) {
      Check(LaunchGemvNvfp4Int(stream_, *packed, m, *outputs[i].w, outputs[i].y, outputs[i].ldy,
                               false));
    }
    return;
  }
  if (n_outputs > 0 &&
      !Check(outputs ? Status::Ok() : InvalidArgumentError("MatmulMulti: null outputs"))) {
    return;
  }
  if (!fused_) {
    for (int i = 0; i < n_outputs; ++i) {
      Check(MatmulImpl(x, m, ldx, *outputs[i].w, outputs[i].y, outputs[i].ldy, false));
    }
    return;
  }
  // As grouped products: the decode-sized ones of one format in one launch
  // (q/k/v: three launches become one), each bit for bit its own Matmul.
  multi_products_.clear();
  for (int i = 0; i < n_outputs; ++i) {
    multi_products_.push_back({x, m, ldx, outputs[i].w, outputs[i].y, outputs[i].ldy});
  }
  Check(MatmulGroupedImpl(multi_products_.data(), n_outputs));
}

void CudaBackend::NormMatmulMulti(const float* x, int64_t m, int64_t k, const float* norm_weight,
                                  float eps, float* xn, const MatmulOutput* outputs,
                                  int n_outputs) {
  // The norm goes into the GEMV's staging of x when every output is a
  // decode product of the float kernel of one format (the integer kernel
  // packs x in a launch of its own; prefill-sized products go to cuBLAS).
  bool fuse = fused_ && n_outputs > 0 && outputs && x && m >= 1 && m <= kGemvMaxRows;
  for (int i = 0; fuse && i < n_outputs; ++i) {
    const WeightMatrix* w = outputs[i].w;
    fuse = w && (w->format == WeightFormat::kBF16 || w->format == WeightFormat::kNvfp4) &&
           w->format == outputs[0].w->format && w->cols == k && w->rows > 0 && !UseNvfp4Int(m, *w);
  }
  if (!fuse) {
    KernelBackend::NormMatmulMulti(x, m, k, norm_weight, eps, xn, outputs, n_outputs);
    return;
  }
  gemv_products_.clear();
  for (int i = 0; i < n_outputs; ++i) {
    GemvProduct p{x, k, outputs[i].w, outputs[i].y, outputs[i].ldy};
    p.staging = GemvStaging::kRmsNorm;
    p.aux = norm_weight;
    p.norm_eps = eps;
    gemv_products_.push_back(p);
  }
  Check(LaunchGemvGrouped(stream_, m, gemv_products_.data(), n_outputs));
}

// ---- mixture-of-experts decode ---------------------------------------------------
//
// A decode step of a Qwen3-30B-A3B-shaped layer runs 8 experts a token. A
// Matmul call per expert and projection is two launches per expert for
// about 1 MB of weights each, a few microseconds of an H200's memory time
// against the launch's own cost; here a step's gate/up products take one
// launch per row count (all 8 experts at c1) and the down products one more
// plus one for the weighted sums.

void CudaBackend::MatmulGrouped(const GroupedProduct* products, int n_products) {
  // The products (which experts, how many rows each) are this step's choice.
  if (recording_) replayable_ = false;
  Check(MatmulGroupedImpl(products, n_products));
}

Status CudaBackend::MatmulGroupedImpl(const GroupedProduct* products, int n_products) {
  if (n_products < 0 || (n_products > 0 && !products)) {
    return InvalidArgumentError("MatmulGrouped: null or negative product list");
  }
  for (auto& by_format : gemv_groups_) {
    for (std::vector<GemvProduct>& g : by_format) g.clear();
  }
  for (int i = 0; i < n_products; ++i) {
    const GroupedProduct& p = products[i];
    if (!p.w || p.m < 0) {
      return InvalidArgumentError("MatmulGrouped: product " + Str(i) +
                                  (p.w ? " with negative rows" : " without weights"));
    }
  }
  // Decode products of the float GEMV (the kernel Matmul would pick).
  auto gemv = [this](const GroupedProduct& p) {
    const WeightMatrix& w = *p.w;
    return (w.format == WeightFormat::kBF16 || w.format == WeightFormat::kNvfp4) && p.m >= 1 &&
           p.m <= kGemvMaxRows && w.rows > 0 && w.cols > 0 && !UseNvfp4Int(p.m, w);
  };
  for (int i = 0; i < n_products; ++i) {
    const GroupedProduct& p = products[i];
    if (gemv(p)) {
      gemv_groups_[p.w->format == WeightFormat::kNvfp4][p.m - 1].push_back(
          {p.x, p.ldx, p.w, p.y, p.ldy});
    }
  }
  // The grouped launches (each checks its products before queueing any).
  for (int f = 0; f < 2; ++f) {
    for (int64_t m = 1; m <= kGemvMaxRows; ++m) {
      const std::vector<GemvProduct>& g = gemv_groups_[f][m - 1];
      if (!g.empty()) {
        OCTET_RETURN_IF_ERROR(LaunchGemvGrouped(stream_, m, g.data(), static_cast<int>(g.size())));
      }
    }
  }
  // Then the rest (prefill-sized, F32/F16, the integer kernel's) as Matmul
  // runs them.
  for (int i = 0; i < n_products; ++i) {
    const GroupedProduct& p = products[i];
    if (!gemv(p)) OCTET_RETURN_IF_ERROR(MatmulImpl(p.x, p.m, p.ldx, *p.w, p.y, p.ldy, false));
  }
  return Status::Ok();
}

void CudaBackend::MatmulScatterAdd(const ScatterProduct* products, int n_products, int64_t n,
                                   float* out, int64_t ldo, float* scratch) {
  (void)scratch;                        // the products go to kExpertRows, all of them at once
  if (recording_) replayable_ = false;  // as MatmulGrouped
  if (n_products == 0 || n == 0) return;
  if (!Check(n_products < 0 || !products || n < 0 || !out || ldo < n
                 ? InvalidArgumentError("MatmulScatterAdd: null or negative product list, or "
                                        "an out row shorter than n (" +
                                        Str(n) + ")")
                 : Status::Ok())) {
    return;
  }
  int64_t total = 0;
  for (int i = 0; i < n_products; ++i) {
    const ScatterProduct& p = products[i];
    if (!p.w || p.w->rows != n || p.m < 0 || (p.m > 0 && !p.rows)) {
      Check(InvalidArgumentError("MatmulScatterAdd: product " + Str(i) +
                                 (!p.w ? " without weights"
                                  : p.w->rows != n
                                      ? " has " + Str(p.w->rows) + " output features, not " + Str(n)
                                      : " with negative rows or without its row list")));
      return;
    }
    total += p.m;
  }
  if (total == 0) return;
  auto rows = Scratch(kExpertRows, static_cast<size_t>(total * n) * sizeof(float));
  if (!Check(rows.status())) return;
  float* y = static_cast<float*>(*rows);
  scatter_products_.clear();
  scatter_rows_.clear();
  int64_t at = 0;
  for (int i = 0; i < n_products; ++i) {
    const ScatterProduct& p = products[i];
    scatter_products_.push_back({p.x, p.m, p.ldx, p.w, y + at * n, n});
    scatter_rows_.push_back({p.rows, p.weights, p.m, at});
    at += p.m;
  }
  if (!Check(MatmulGroupedImpl(scatter_products_.data(), n_products))) return;
  Check(LaunchScatterAddProducts(stream_, y, scatter_rows_.data(), n_products, n, out, ldo));
}

Result<Buffer> CudaBackend::PrepareExperts(const WeightMatrix* const* gate,
                                           const WeightMatrix* const* up,
                                           const WeightMatrix* const* down, int64_t n_experts) {
  if (!moe_on_device_) {
    return UnimplementedError(
        "PrepareExperts: routing on the host (OCTET_CUDA_MOE_ROUTING is "
        "not 'device')");
  }
  if (n_experts < 1 || !gate || !up || !down) {
    return InvalidArgumentError("PrepareExperts: no experts");
  }
  std::vector<DeviceExpert> table(n_experts);
  for (int64_t e = 0; e < n_experts; ++e) {
    const WeightMatrix* m[3] = {gate[e], up[e], down[e]};
    for (int j = 0; j < 3; ++j) {
      if (!m[j] || m[j]->cols != (j == 2 ? gate[0]->rows : gate[0]->cols) ||
          m[j]->rows != (j == 2 ? gate[0]->cols : gate[0]->rows)) {
        return InvalidArgumentError(
            "PrepareExperts: expert " + Str(e) + "'s " +
            (j == 0   ? "gate"
             : j == 1 ? "up"
                      : "down") +
            (m[j] ? " is " + std::string(WeightFormatName(m[j]->format)) + " [" + Str(m[j]->rows) +
                        ", " + Str(m[j]->cols) + "]"
                  : " is missing") +
            "; expert 0's gate is [" + Str(gate[0]->rows) + ", " + Str(gate[0]->cols) + "]");
      }
    }
    OCTET_ASSIGN_OR_RETURN(table[e].gate, MakeDeviceGemvMatrix(*gate[e]));
    OCTET_ASSIGN_OR_RETURN(table[e].up, MakeDeviceGemvMatrix(*up[e]));
    OCTET_ASSIGN_OR_RETURN(table[e].down, MakeDeviceGemvMatrix(*down[e]));
  }
  const int64_t bytes = n_experts * static_cast<int64_t>(sizeof(DeviceExpert));
  OCTET_ASSIGN_OR_RETURN(Buffer b, Allocate(bytes));
  OCTET_RETURN_IF_ERROR(
      CudaCheck(cudaMemcpyAsync(b.data(), table.data(), bytes, cudaMemcpyHostToDevice, stream_),
                "cudaMemcpyAsync(" + Str(bytes) + " bytes of expert table)"));
  // The table leaves with this function: the copy must have read it.
  OCTET_RETURN_IF_ERROR(CudaCheck(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"));
  expert_tables_[b.data()] = {n_experts, gate[0]->rows, gate[0]->cols};
  return b;
}

Status CudaBackend::MoeDecode(const MoeDecodeArgs& a) {
  const MoeRouteSpec& r = a.route;
  const int64_t T = a.tokens, k = r.experts_per_token, H = a.hidden, F = a.width;
  if (!moe_on_device_ || !a.experts) {
    return InvalidArgumentError("MoeDecode: no expert table (PrepareExperts)");
  }
  if (T < 1 || T > kGemvMaxRows || k < 1 || H < 1 || F < 1 || !a.x || a.ldx < H ||
      !a.router_logits || !a.out || a.ldo < H) {
    return InvalidArgumentError("MoeDecode: " + Str(T) + " tokens (1.." + Str(kGemvMaxRows) +
                                "), " + Str(k) + " experts a token, hidden " + Str(H) + ", width " +
                                Str(F) + ", rows " + Str(a.ldx) + " / " + Str(a.ldo) +
                                " apart, or a null pointer");
  }
  const auto shape = expert_tables_.find(a.experts);
  if (shape == expert_tables_.end()) {
    return InvalidArgumentError("MoeDecode: the expert table is not one PrepareExperts made");
  }
  if (shape->second.width != F || shape->second.hidden != H ||
      r.num_experts != shape->second.experts || k > r.num_experts) {
    return InvalidArgumentError("MoeDecode: the expert table holds " + Str(shape->second.experts) +
                                " experts of width " + Str(shape->second.width) + " over hidden " +
                                Str(shape->second.hidden) + "; asked for " + Str(r.num_experts) +
                                " experts (" + Str(k) + " a token) of width " + Str(F) +
                                " over hidden " + Str(H));
  }
  // Scratch: each slot's expert and weight, its gate, up and down rows.
  const int64_t slots = T * k;
  const size_t ids = static_cast<size_t>(RoundUp(slots * 8, 256));
  const size_t floats = static_cast<size_t>(slots * (2 * F + H));
  OCTET_ASSIGN_OR_RETURN(void* scratch, Scratch(kMoeDecode, ids + floats * sizeof(float)));
  int32_t* chosen = static_cast<int32_t*>(scratch);
  float* weight = reinterpret_cast<float*>(chosen + slots);
  float* gate = reinterpret_cast<float*>(static_cast<uint8_t*>(scratch) + ids);
  float* up = gate + slots * F;
  float* down = up + slots * F;
  const auto* experts = static_cast<const DeviceExpert*>(a.experts);
  OCTET_RETURN_IF_ERROR(LaunchMoeRoute(stream_, a.router_logits, T, r, a.bias, chosen, weight));
  GemvRoutedArgs g{};
  g.experts = experts;
  g.num_experts = r.num_experts;
  g.chosen = chosen;
  g.n_slots = slots;
  g.n_mats = 2;
  g.which[0] = 0;
  g.which[1] = 1;
  g.rows = F;
  g.x = a.x;
  g.ldx = a.ldx;
  g.x_div = k;  // slot s is token s / k's
  g.y[0] = gate;
  g.y[1] = up;
  g.ldy = F;
  OCTET_RETURN_IF_ERROR(LaunchGemvRouted(stream_, g));
  OCTET_RETURN_IF_ERROR(LaunchSiluMul(stream_, gate, up, slots, F, F, gate));
  g.n_mats = 1;
  g.which[0] = 2;
  g.rows = H;
  g.x = gate;
  g.ldx = F;
  g.x_div = 1;
  g.y[0] = down;
  g.y[1] = nullptr;
  g.ldy = H;
  OCTET_RETURN_IF_ERROR(LaunchGemvRouted(stream_, g));
  return LaunchMoeCombine(stream_, down, weight, T, k, H, a.out, a.ldo);
}

bool CudaBackend::UseNvfp4Int(int64_t m, const WeightMatrix& w) const {
  return nvfp4_int_ && m >= 1 && m <= kGemvMaxRows && GemvNvfp4IntSupports(w);
}

Result<const void*> CudaBackend::PackNvfp4Int(const float* x, int64_t m, int64_t ldx, int64_t k) {
  const int64_t bytes = Nvfp4IntPackedBytes(m, k);
  OCTET_ASSIGN_OR_RETURN(void* packed, Scratch(kNvfp4Packed, static_cast<size_t>(bytes)));
  OCTET_RETURN_IF_ERROR(LaunchPackNvfp4Int(stream_, x, m, ldx, k, packed, bytes));
  return static_cast<const void*>(packed);
}

Status CudaBackend::MatmulImpl(const float* x, int64_t m, int64_t ldx, const WeightMatrix& w,
                               float* y, int64_t ldy, bool accumulate) {
  const int64_t n = w.rows, k = w.cols;
  if (m <= 0 || n <= 0) return Status::Ok();
  if (!y || ldy < n || ldx < k || (k > 0 && (!x || !w.data))) {
    return InvalidArgumentError("Matmul: null pointer or a row stride shorter than a row (m " +
                                Str(m) + ", n " + Str(n) + ", k " + Str(k) + ", ldx " + Str(ldx) +
                                ", ldy " + Str(ldy) + ")");
  }
  if (!FitsInt(m) || !FitsInt(n) || !FitsInt(k) || !FitsInt(ldx) || !FitsInt(ldy)) {
    return InvalidArgumentError("Matmul: sizes must fit in 31 bits");
  }
  if (k == 0) {
    if (accumulate) return Status::Ok();
    return CudaCheck(cudaMemset2DAsync(y, ldy * sizeof(float), 0, n * sizeof(float), m, stream_),
                     "cudaMemset2DAsync(Matmul output)");
  }
  switch (w.format) {
    case WeightFormat::kBF16:
    case WeightFormat::kNvfp4: {
      if (UseNvfp4Int(m, w)) {
        OCTET_ASSIGN_OR_RETURN(const void* packed, PackNvfp4Int(x, m, ldx, k));
        return LaunchGemvNvfp4Int(stream_, packed, m, w, y, ldy, accumulate);
      }
      if (m <= kGemvMaxRows) return LaunchGemv(stream_, x, m, ldx, w, y, ldy, accumulate);
      // Activations to BF16 once for every panel.
      const int64_t halves = split_bf16_ ? 2 : 1;
      OCTET_ASSIGN_OR_RETURN(void* xb, Scratch(kXBf16, halves * m * k * sizeof(uint16_t)));
      uint16_t* x16 = static_cast<uint16_t*>(xb);
      OCTET_RETURN_IF_ERROR(split_bf16_ ? LaunchSplitBf16(stream_, x, m, ldx, k, x16)
                                        : LaunchToBf16(stream_, x, m, ldx, k, x16));
      if (w.format == WeightFormat::kBF16) {
        if (w.row_stride % 2 != 0 || reinterpret_cast<uintptr_t>(w.data) % 2 != 0) {
          return InvalidArgumentError("Matmul: BF16 rows must be 2-byte aligned");
        }
        return Bf16Gemm(x16, split_bf16_, m, static_cast<const uint16_t*>(w.data), w.row_stride / 2,
                        n, k, 1.0f, y, ldy, accumulate);
      }
      if (!w.scales) return InvalidArgumentError("Matmul: NVFP4 weights without scales");
      const int64_t ld = RoundUp(k, 8);
      const int64_t panel_rows = std::clamp<int64_t>(kPanelBytes / (ld * 2), 1, n);
      OCTET_ASSIGN_OR_RETURN(void* pb, Scratch(kPanel, panel_rows * ld * sizeof(uint16_t)));
      for (int64_t r0 = 0; r0 < n; r0 += panel_rows) {
        const int64_t rows = std::min(panel_rows, n - r0);
        uint16_t* panel = static_cast<uint16_t*>(pb);
        OCTET_RETURN_IF_ERROR(LaunchDequantNvfp4ToBf16(stream_, w, r0, rows, panel, ld));
        OCTET_RETURN_IF_ERROR(Bf16Gemm(x16, split_bf16_, m, panel, ld, rows, k, w.global_scale,
                                       y + r0, ldy, accumulate));
      }
      return Status::Ok();
    }
    case WeightFormat::kF32:
      if (w.row_stride % 4 != 0 || reinterpret_cast<uintptr_t>(w.data) % 4 != 0) {
        return InvalidArgumentError("Matmul: F32 rows must be 4-byte aligned");
      }
      return Sgemm(x, m, ldx, static_cast<const float*>(w.data), w.row_stride / 4, n, k, y, ldy,
                   accumulate);
    case WeightFormat::kF16: {
      const int64_t panel_rows = std::clamp<int64_t>(kPanelBytes / (k * 4), 1, n);
      OCTET_ASSIGN_OR_RETURN(void* pb, Scratch(kPanel, panel_rows * k * sizeof(float)));
      for (int64_t r0 = 0; r0 < n; r0 += panel_rows) {
        const int64_t rows = std::min(panel_rows, n - r0);
        float* panel = static_cast<float*>(pb);
        OCTET_RETURN_IF_ERROR(LaunchWidenRows(stream_, w, r0, rows, panel, k));
        OCTET_RETURN_IF_ERROR(Sgemm(x, m, ldx, panel, k, rows, k, y + r0, ldy, accumulate));
      }
      return Status::Ok();
    }
  }
  return UnimplementedError("Matmul: unknown weight format");
}

// Row-major y[m, n] = x[m, k] · W[n, k]ᵀ is column-major yᵀ[n, m] = W · xᵀ:
// W row-major with ld w_ld is the column-major [k, n] matrix Wᵀ (so op T),
// x row-major is column-major xᵀ [k, m] (op N), y column-major [n, m] ld ldy.
Status CudaBackend::Bf16Gemm(const uint16_t* x_bf16, bool split, int64_t m, const uint16_t* w,
                             int64_t w_ld, int64_t n, int64_t k, float alpha, float* y, int64_t ldy,
                             bool accumulate) {
  // cuBLAS may allocate its workspace as it is captured; the prefill-sized
  // matmuls it runs are not what recording is for.
  if (Unrecordable("a cuBLAS GEMM")) return AbortedError("not recorded: cuBLAS");
  const float beta_first = accumulate ? 1.0f : 0.0f;
  const float one = 1.0f;
  for (int half = 0; half < (split ? 2 : 1); ++half) {
    const uint16_t* xh = x_bf16 + half * m * k;
    const cublasStatus_t st = cublas_->gemm_ex(
        handle_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
        static_cast<int>(k), &alpha, w, CUDA_R_16BF, static_cast<int>(w_ld), xh, CUDA_R_16BF,
        static_cast<int>(k), half == 0 ? &beta_first : &one, y, CUDA_R_32F, static_cast<int>(ldy),
        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (st != CUBLAS_STATUS_SUCCESS) return CublasError(*cublas_, st, "cublasGemmEx(BF16)");
  }
  return Status::Ok();
}

Status CudaBackend::Sgemm(const float* x, int64_t m, int64_t ldx, const float* w, int64_t w_ld,
                          int64_t n, int64_t k, float* y, int64_t ldy, bool accumulate) {
  if (Unrecordable("a cuBLAS GEMM")) return AbortedError("not recorded: cuBLAS");
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  const cublasStatus_t st =
      cublas_->sgemm(handle_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
                     static_cast<int>(k), &alpha, w, static_cast<int>(w_ld), x,
                     static_cast<int>(ldx), &beta, y, static_cast<int>(ldy));
  return st == CUBLAS_STATUS_SUCCESS ? Status::Ok() : CublasError(*cublas_, st, "cublasSgemm");
}

// Row-major C[M, N] = alpha op(A) op(B) + beta C is column-major
// Cᵀ[N, M] = alpha op(B)ᵀ op(A)ᵀ + beta Cᵀ. B stored [K, N] row-major is the
// column-major [N, K] op(B)ᵀ itself (op N); stored [N, K] (trans_b) it needs
// op T. Likewise A.
void CudaBackend::Gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                       const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                       float* C, int64_t ldc) {
  if (M <= 0 || N <= 0 || Unrecordable("a cuBLAS GEMM")) return;
  if (!FitsInt(M) || !FitsInt(N) || !FitsInt(K) || !FitsInt(lda) || !FitsInt(ldb) ||
      !FitsInt(ldc) || !C || ldc < N || (K > 0 && (!A || !B))) {
    Check(
        InvalidArgumentError("Gemm: null pointer, a stride shorter than a row, or sizes "
                             "beyond 31 bits (M " +
                             Str(M) + ", N " + Str(N) + ", K " + Str(K) + ")"));
    return;
  }
  const cublasStatus_t st =
      cublas_->sgemm(handle_, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                     trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(N), static_cast<int>(M),
                     static_cast<int>(K), &alpha, B, static_cast<int>(std::max<int64_t>(ldb, 1)), A,
                     static_cast<int>(std::max<int64_t>(lda, 1)), &beta, C, static_cast<int>(ldc));
  if (st != CUBLAS_STATUS_SUCCESS) Check(CublasError(*cublas_, st, "cublasSgemm (Gemm)"));
}

// ---- row and element-wise ops ---------------------------------------------------

void CudaBackend::RmsNorm(const float* x, const float* weight, float eps, int64_t rows, int64_t dim,
                          int64_t stride, float* out) {
  Check(LaunchRmsNorm(stream_, x, weight, eps, rows, dim, stride, out));
}

void CudaBackend::Rope(float* x, int64_t rows, int64_t row_stride, int64_t n_heads,
                       int64_t head_dim, const int32_t* positions, const float* inv_freq) {
  Check(LaunchRope(stream_, x, rows, row_stride, n_heads, head_dim, positions, inv_freq));
}

void CudaBackend::RopeHeads(float* x, int64_t rows, int64_t row_stride, int64_t n_heads,
                            int64_t head_stride, int64_t rotary_dim, const int32_t* positions,
                            const float* inv_freq) {
  Check(LaunchRopeHeads(stream_, x, rows, row_stride, n_heads, head_stride, rotary_dim, positions,
                        inv_freq));
}

void CudaBackend::SiluMulMatmul(float* gate, const float* up, int64_t m, int64_t stride,
                                const WeightMatrix& w, float* y, int64_t ldy, bool accumulate) {
  // silu(gate) * up formed as the GEMV stages its input, where the float
  // decode kernel takes the product.
  if (!fused_ || m < 1 || m > kGemvMaxRows || !gate || !up || w.rows <= 0 || w.cols <= 0 ||
      (w.format != WeightFormat::kBF16 && w.format != WeightFormat::kNvfp4) || UseNvfp4Int(m, w)) {
    KernelBackend::SiluMulMatmul(gate, up, m, stride, w, y, ldy, accumulate);
    return;
  }
  GemvProduct p{gate, stride, &w, y, ldy};
  p.staging = GemvStaging::kSiluMul;
  p.aux = up;
  p.accumulate = accumulate;
  Check(LaunchGemvGrouped(stream_, m, &p, 1));
}

void CudaBackend::PrepareQk(const QkPrepArgs& a) {
  if (!fused_ || a.head_dim > kQkPrepMaxHeadDim) {  // wider heads: RmsNorm's and RoPE's kernels
    KernelBackend::PrepareQk(a);
    return;
  }
  // The stores go into the same launch when each is whole rows of this k
  // (the engine's are: a sequence's rows each) and they fit its parameters;
  // otherwise they follow as KvStoreBatch.
  const int64_t kvd = a.k_heads * a.head_dim;
  bool inline_stores = a.n_stores > 0 && a.n_stores <= kKvStoreBatch && a.stores && a.k && kvd > 0;
  qk_first_rows_.clear();
  for (int64_t i = 0; inline_stores && i < a.n_stores; ++i) {
    const KvStoreArgs& st = a.stores[i];
    const auto offset =
        static_cast<int64_t>(reinterpret_cast<uintptr_t>(st.k) - reinterpret_cast<uintptr_t>(a.k));
    const int64_t row_bytes = kvd * static_cast<int64_t>(sizeof(float));
    inline_stores = st.n > 0 && offset >= 0 && offset % row_bytes == 0 &&
                    offset / row_bytes + st.n <= a.rows && st.row_stride == kvd &&
                    st.n_kv_heads == a.k_heads && st.head_dim == a.head_dim;
    qk_first_rows_.push_back(offset / row_bytes);
  }
  // Recorded, the stores read each row's position from device memory
  // (backend.h: it is first_pos + t there), so the recording may run again.
  Check(LaunchQkPrep(stream_, a, inline_stores ? qk_first_rows_.data() : nullptr, recording_));
  if (!inline_stores && a.n_stores > 0) KvStoreBatch(a.stores, a.n_stores);
}

void CudaBackend::SiluMul(const float* gate, const float* up, int64_t rows, int64_t n,
                          int64_t stride, float* out) {
  Check(LaunchSiluMul(stream_, gate, up, rows, n, stride, out));
}

void CudaBackend::Softmax(float* x, int64_t rows, int64_t n) {
  if (rows > 0 && n > 0 && !x) {
    Check(InvalidArgumentError("Softmax: null pointer"));
    return;
  }
  Check(LaunchSoftmax(stream_, x, rows, n));
}

void CudaBackend::Add(const float* a, const float* b, int64_t n, float* out) {
  Check(LaunchAdd(stream_, a, b, n, out));
}

void CudaBackend::Embedding(const WeightMatrix& table, const int32_t* ids, int64_t n, float* out) {
  Check(LaunchEmbedding(stream_, table, ids, n, out));
}

void CudaBackend::EmbeddingShard(const WeightMatrix& table, int64_t first_row, const int32_t* ids,
                                 int64_t n, float* out) {
  if (n > 0 && table.cols > 0 &&
      (!ids || !out || (table.rows > 0 && !table.data) ||
       (table.format == WeightFormat::kNvfp4 && !table.scales))) {
    Check(InvalidArgumentError("EmbeddingShard: null pointer"));
    return;
  }
  Check(LaunchEmbeddingShard(stream_, table, first_row, ids, n, out));
}

namespace {
// KvStore's argument check (an empty store, n <= 0, passes).
Status CheckKvStoreArgs(const KvStoreArgs& a) {
  if (a.n <= 0) return Status::Ok();
  if (!a.k || !a.v || !a.k_cache || !a.v_cache || a.head_dim <= 0 || a.n_kv_heads <= 0 ||
      a.row_stride < a.n_kv_heads * a.head_dim || a.first_pos < 0) {
    return InvalidArgumentError(
        "KvStore: null pointer, empty head or a row stride shorter than n_kv_heads * head_dim");
  }
  return Status::Ok();
}
}  // namespace

void CudaBackend::KvStore(const KvStoreArgs& a) {
  if (recording_) replayable_ = false;  // first_pos is this step's
  if (a.n <= 0 || !Check(CheckKvStoreArgs(a))) return;
  Check(LaunchKvStore(stream_, a));
}

void CudaBackend::KvStoreBatch(const KvStoreArgs* args, int64_t n) {
  if (recording_) replayable_ = false;  // first_pos is this step's
  if (n <= 0) return;
  if (!Check(args ? Status::Ok() : InvalidArgumentError("KvStoreBatch: null arguments"))) return;
  for (int64_t i = 0; i < n; ++i) {
    if (!Check(CheckKvStoreArgs(args[i]))) return;
  }
  Check(LaunchKvStoreBatch(stream_, args, n));
}

void CudaBackend::AddRowVector(float* x, int64_t rows, int64_t n, int64_t stride, const float* v) {
  if (rows > 0 && n > 0 && (!x || !v || stride < n)) {
    Check(InvalidArgumentError("AddRowVector: null pointer or stride < n"));
    return;
  }
  Check(LaunchAddRowVector(stream_, x, rows, n, stride, v));
}

void CudaBackend::Relu2(float* x, int64_t n) {
  if (n > 0 && !x) {
    Check(InvalidArgumentError("Relu2: null pointer"));
    return;
  }
  Check(LaunchRelu2(stream_, x, n));
}

void CudaBackend::SoftCap(float* x, int64_t n, float cap) {
  if (n > 0 && !x) {
    Check(InvalidArgumentError("SoftCap: null pointer"));
    return;
  }
  Check(LaunchSoftCap(stream_, x, n, cap));
}

void CudaBackend::Fill(float* x, int64_t n, float value) {
  if (n > 0 && !x) {
    Check(InvalidArgumentError("Fill: null pointer"));
    return;
  }
  Check(LaunchFill(stream_, x, n, value));
}

void CudaBackend::Scale(float* x, int64_t n, float s) {
  if (n > 0 && !x) {
    Check(InvalidArgumentError("Scale: null pointer"));
    return;
  }
  Check(LaunchScale(stream_, x, n, s));
}

void CudaBackend::GatherRows(const float* x, int64_t ldx, const int64_t* rows, int64_t n_rows,
                             int64_t n, float* out) {
  if (n_rows > 0 && n > 0 && (!x || !rows || !out || ldx < n)) {
    Check(InvalidArgumentError("GatherRows: null pointer or ldx < n"));
    return;
  }
  Check(LaunchGatherRows(stream_, x, ldx, rows, n_rows, n, out));
}

void CudaBackend::ScatterAddRows(const float* x, int64_t ldx, const int64_t* rows,
                                 const float* weights, int64_t n_rows, int64_t n, float* out,
                                 int64_t ldo) {
  if (recording_) replayable_ = false;  // an expert's rows: this step's routing
  if (n_rows > 0 && n > 0 && (!x || !rows || !out || ldx < n || ldo < n)) {
    Check(InvalidArgumentError("ScatterAddRows: null pointer or a stride < n"));
    return;
  }
  Check(LaunchScatterAddRows(stream_, x, ldx, rows, weights, n_rows, n, out, ldo));
}

int64_t CudaBackend::Argmax(const float* x, int64_t n) {
  if (n <= 0) return 0;
  if (!x) {
    Check(InvalidArgumentError("Argmax: null pointer"));
    return 0;
  }
  auto slot = Scratch(kArgmax, sizeof(int64_t));
  if (!Check(slot.status())) return 0;
  int64_t* d_index = static_cast<int64_t*>(*slot);
  int64_t index = 0;
  if (!Check(LaunchArgmax(stream_, x, n, d_index))) return 0;
  CopyToHost(&index, d_index, sizeof index);
  return index;
}

void CudaBackend::TopK(const float* x, int64_t n, int64_t k, int32_t* indices, float* values) {
  k = std::min(k, n);
  if (k <= 0) return;
  if (!x || !indices || !values) {
    Check(InvalidArgumentError("TopK: null pointer"));
    return;
  }
  // On the host, over a copy: the sampler of a device backend samples host
  // logits with a CPU backend, so this is not on the decode path.
  std::vector<float> h(n);
  CopyToHost(h.data(), x, n * static_cast<int64_t>(sizeof(float)));
  if (!error_.ok()) return;
  std::vector<int32_t> idx(n);
  for (int64_t i = 0; i < n; ++i) idx[i] = static_cast<int32_t>(i);
  auto key = [&](int32_t i) {
    return std::isnan(h[i]) ? -std::numeric_limits<float>::infinity() : h[i];
  };
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
    const float va = key(a), vb = key(b);
    return va > vb || (va == vb && a < b);
  });
  std::vector<float> vals(k);
  for (int64_t i = 0; i < k; ++i) vals[i] = h[idx[i]];
  CopyToDevice(indices, idx.data(), k * static_cast<int64_t>(sizeof(int32_t)));
  CopyToDevice(values, vals.data(), k * static_cast<int64_t>(sizeof(float)));
}

// ---- attention --------------------------------------------------------------------

void CudaBackend::Attention(const AttentionArgs& a) {
  if (a.n_sequences <= 0) return;
  if (!a.sequences || !a.q || !a.out || a.n_heads < 1 || a.n_kv_heads < 1 ||
      a.n_heads % a.n_kv_heads != 0 || a.head_dim < 1 || a.head_dim > kGeneralAttentionMaxHeadDim ||
      a.q_row_stride < a.n_heads * a.head_dim || a.out_row_stride < a.n_heads * a.head_dim ||
      !FitsInt(a.n_heads)) {
    Check(InvalidArgumentError(
        "Attention: null pointer, n_heads not a multiple of n_kv_heads, head_dim " +
        Str(a.head_dim) + " outside 1.." + Str(kGeneralAttentionMaxHeadDim) +
        ", or a row stride shorter than n_heads * head_dim"));
    return;
  }
  // Long prefills through GEMMs (GemmAttention); the table, for the rest:
  // sequence descriptors, then one item per query token.
  std::vector<AttnSeqDesc> seqs;
  std::vector<int64_t> table_seqs;  // their indices in a.sequences
  int64_t n_items = 0;
  for (int64_t s = 0; s < a.n_sequences; ++s) {
    const AttentionSequence& q = a.sequences[s];
    if (q.n_tokens < 0 || q.first_token < 0 ||
        (q.n_tokens > 0 && (!q.k_cache || !q.v_cache || !q.positions))) {
      Check(InvalidArgumentError("Attention: sequence " + Str(s) +
                                 " has a negative size or a null cache or positions"));
      return;
    }
    if (q.n_tokens >= kGemmAttentionMinTokens && q.n_keys > 0 && !recording_) {
      if (tensor_attention_ && q.kv_dtype == KvDtype::kF16 && TensorCoreAttentionFits(a.head_dim)) {
        if (!Check(LaunchTensorCoreAttention(stream_, a, q))) return;
        continue;
      }
      if (gemm_attention_) {
        if (!Check(GemmAttention(a, q))) return;
        continue;
      }
    }
    if (q.n_tokens == 0) continue;
    const bool packed = q.position_stride == 0 && q.head_stride == 0;
    table_seqs.push_back(s);
    AttnSeqDesc& d = seqs.emplace_back();
    d.k = q.k_cache;
    d.v = q.v_cache;
    d.positions = q.positions;
    d.position_stride = packed ? a.n_kv_heads * a.head_dim : q.position_stride;
    d.head_stride = packed ? a.head_dim : q.head_stride;
    d.first_token = q.first_token;
    d.f16 = q.kv_dtype == KvDtype::kF16 ? 1 : 0;
    d.pad = 0;
    n_items += q.n_tokens;
  }
  if (n_items == 0) return;
  if (n_items > INT32_MAX) {
    Check(InvalidArgumentError("Attention: more than 2^31 query tokens"));
    return;
  }
  // A decode step's table goes in the kernels' parameters; a larger one is
  // built in host_table_ and uploaded.
  const bool inline_table =
      static_cast<int64_t>(seqs.size()) <= kInlineAttnSeqs && n_items <= kInlineAttnItems;
  GeneralAttentionArgs g{};
  const size_t seq_bytes = RoundUp(seqs.size() * sizeof(AttnSeqDesc), 16);
  const size_t table_bytes = seq_bytes + n_items * sizeof(AttnItem);
  AttnItem* items = g.inline_items;
  if (inline_table) {
    g.inline_table = 1;
    std::copy(seqs.begin(), seqs.end(), g.inline_seqs);
  } else {
    host_table_.assign(table_bytes, 0);
    std::memcpy(host_table_.data(), seqs.data(), seqs.size() * sizeof(AttnSeqDesc));
    items = reinterpret_cast<AttnItem*>(host_table_.data() + seq_bytes);
  }
  int64_t i = 0;
  for (size_t s = 0; s < table_seqs.size(); ++s) {
    for (int64_t t = 0; t < a.sequences[table_seqs[s]].n_tokens; ++t) {
      items[i++] = AttnItem{static_cast<int32_t>(s), static_cast<int32_t>(t)};
    }
  }
  // Split the keys over blocks only when the grid is too small to fill the
  // device (decode); the kernel sizes the splits from each token's position.
  const int64_t group = a.n_heads / a.n_kv_heads;
  const int64_t blocks =
      n_items * a.n_kv_heads *
      ((group + GeneralAttentionHeadsPerBlock(group) - 1) / GeneralAttentionHeadsPerBlock(group));
  const int64_t target = 2 * static_cast<int64_t>(sm_count_);
  const int64_t splits = blocks >= target ? 1
                                          : std::min<int64_t>((target + blocks - 1) / blocks,
                                                              kGeneralAttentionMaxSplits);
  const int64_t work_floats =
      GeneralAttentionWorkspaceFloats(n_items, a.n_heads, a.head_dim, splits);
  if (work_floats > 0) {
    auto work = Scratch(kAttnWork, work_floats * sizeof(float));
    if (!Check(work.status())) return;
    g.workspace = static_cast<float*>(*work);
  }
  if (!inline_table) {
    auto table = Scratch(kAttnTable, table_bytes);
    if (!Check(table.status())) return;
    // After both scratches (which may wait for the stream): the upload is
    // ordered after any queued reader of the previous table.
    if (!Check(Upload(*table, host_table_.data(), table_bytes))) return;
    g.seqs = static_cast<const AttnSeqDesc*>(*table);
    g.items = reinterpret_cast<const AttnItem*>(static_cast<const uint8_t*>(*table) + seq_bytes);
  }
  g.q = a.q;
  g.q_row_stride = a.q_row_stride;
  g.out = a.out;
  g.out_row_stride = a.out_row_stride;
  g.n_heads = static_cast<int>(a.n_heads);
  g.n_kv_heads = static_cast<int>(a.n_kv_heads);
  g.head_dim = static_cast<int>(a.head_dim);
  g.scale = a.scale;
  g.n_items = n_items;
  g.splits = static_cast<int>(splits);
  Check(LaunchGeneralAttention(stream_, g));
}

// A long prefill's attention as GEMMs, per KV head and tile of queries:
// scores = scale * Q Kᵀ for the head's query heads (one strided batched
// SGEMM), the causal softmax of each row in place (LaunchCausalSoftmax: keys
// 0..position), out = P V (another). The table kernel gives a block to each
// query token, which reads all of its keys and takes each score as a warp
// sum on the CUDA cores; here each key is read once per tile and the
// products run at the GEMM's rate. Float32 throughout (the fixtures'
// tolerances, as the split BF16 matmuls). F16 caches are widened first.
Status CudaBackend::GemmAttention(const AttentionArgs& a, const AttentionSequence& q) {
  if (Unrecordable("a cuBLAS GEMM")) return AbortedError("not recorded: cuBLAS");
  const int64_t hd = a.head_dim, n = q.n_tokens, L = q.n_keys;
  const int64_t G = a.n_heads / a.n_kv_heads;
  const bool packed = q.position_stride == 0 && q.head_stride == 0;
  const int64_t ps = packed ? a.n_kv_heads * hd : q.position_stride;
  const int64_t hs = packed ? hd : q.head_stride;
  const bool f16 = q.kv_dtype == KvDtype::kF16;
  // Query rows per tile: at most kGemmAttentionMaxTileRows, and the tile's
  // scores (G x rows x L floats) within kGemmAttentionScoresBytes.
  const int64_t tile =
      std::clamp<int64_t>(kGemmAttentionScoresBytes / (G * L * static_cast<int64_t>(sizeof(float))),
                          1, std::min(n, kGemmAttentionMaxTileRows));
  if (!FitsInt(L) || !FitsInt(ps) || !FitsInt(a.q_row_stride) || !FitsInt(a.out_row_stride) ||
      !FitsInt(tile * L)) {
    return InvalidArgumentError("Attention: " + Str(L) + " keys or strides beyond 31 bits");
  }
  const size_t score_bytes = static_cast<size_t>(G * tile * L) * sizeof(float);
  const size_t kv_bytes = f16 ? static_cast<size_t>(2 * L * hd) * sizeof(float) : 0;
  OCTET_ASSIGN_OR_RETURN(void* work, Scratch(kAttnGemm, score_bytes + kv_bytes));
  float* scores = static_cast<float*>(work);
  float* kv = reinterpret_cast<float*>(static_cast<uint8_t*>(work) + score_bytes);
  const float zero = 0.0f, one = 1.0f;
  for (int64_t h = 0; h < a.n_kv_heads; ++h) {
    const float* k = nullptr;
    const float* v = nullptr;
    int64_t ld = ps;
    if (f16) {
      OCTET_RETURN_IF_ERROR(LaunchWidenKvRows(
          stream_, static_cast<const uint16_t*>(q.k_cache) + h * hs, L, hd, ps, kv));
      OCTET_RETURN_IF_ERROR(LaunchWidenKvRows(
          stream_, static_cast<const uint16_t*>(q.v_cache) + h * hs, L, hd, ps, kv + L * hd));
      k = kv;
      v = kv + L * hd;
      ld = hd;
    } else {
      k = static_cast<const float*>(q.k_cache) + h * hs;
      v = static_cast<const float*>(q.v_cache) + h * hs;
    }
    for (int64_t t0 = 0; t0 < n; t0 += tile) {
      const int64_t m = std::min(tile, n - t0);
      const float* qt = a.q + (q.first_token + t0) * a.q_row_stride + h * G * hd;
      float* ot = a.out + (q.first_token + t0) * a.out_row_stride + h * G * hd;
      // Column-major, as Sgemm: scoresᵀ [L, m] of head g = K [L, hd] · Q_gᵀ.
      cublasStatus_t st = cublas_->sgemm_strided_batched(
          handle_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(L), static_cast<int>(m),
          static_cast<int>(hd), &a.scale, k, static_cast<int>(ld), 0, qt,
          static_cast<int>(a.q_row_stride), hd, &zero, scores, static_cast<int>(L), m * L,
          static_cast<int>(G));
      if (st != CUBLAS_STATUS_SUCCESS) {
        return CublasError(*cublas_, st, "cublasSgemmStridedBatched (attention scores)");
      }
      OCTET_RETURN_IF_ERROR(LaunchCausalSoftmax(stream_, scores, G, m, L, q.positions + t0));
      // outᵀ [hd, m] of head g = Vᵀ [hd, L] · P_gᵀ [L, m].
      st = cublas_->sgemm_strided_batched(
          handle_, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(hd), static_cast<int>(m),
          static_cast<int>(L), &one, v, static_cast<int>(ld), 0, scores, static_cast<int>(L), m * L,
          &zero, ot, static_cast<int>(a.out_row_stride), hd, static_cast<int>(G));
      if (st != CUBLAS_STATUS_SUCCESS) {
        return CublasError(*cublas_, st, "cublasSgemmStridedBatched (attention values)");
      }
    }
  }
  return Status::Ok();
}

}  // namespace octet::kernels::cuda
