// NCCL as a whole backend: NCCL picks its own algorithm and transport; Octet
// supplies the unique id (through the bootstrap), stages host buffers to the
// GPU and back, and keeps its own deadlines: the communicator is created
// non-blocking and every wait polls ncclCommGetAsyncError (and the stream),
// so a dead peer ends in ncclCommAbort and an error, never a hang.
//
// Non-blocking semantics: a collective or a group's end may return
// ncclInProgress, and then the operation is on the stream only once
// ncclCommGetAsyncError says ncclSuccess: nothing is queued behind it before
// that. The copy back to the caller's (pageable) memory waits for the whole
// collective, so it is made only after the stream is idle, never as a wait
// without a deadline.
//
// Each rank uses GPU (local rank % device count); NCCL refuses two ranks of
// one communicator on one GPU, so more local ranks than GPUs fall back
// together at start-up, saying so. The probe runs everywhere: without a GPU
// cudaGetDeviceCount fails and every rank falls back together. Verified here
// only to compile and to probe cleanly (no GPU on this development machine);
// one rank ran on an H200. libnccl is loaded at run time (nccl_loader.h); the
// CUDA runtime is linked statically.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>

#include "backend.h"
#include "bootstrap.h"
#include "octet/base/deadline.h"
#include "wire.h"

#if OCTET_HAVE_NCCL
#include <cuda_runtime.h>
#include <nccl.h>

#include "nccl_loader.h"
#include "octet/base/cuda_driver_problem.h"
#endif

namespace octet::collectives {

#if !OCTET_HAVE_NCCL

Status ProbeNccl() {
  return UnavailableError("NCCL support is not compiled in (no CUDA toolkit with NCCL at build time)");
}

Result<std::unique_ptr<Backend>> ConnectNccl(Bootstrap& bootstrap, const TransportConfig& config) {
  auto agreed = bootstrap.AllGatherChecked(ProbeNccl(), {},
                                           Deadline::AfterMs(config.connect_timeout_ms));
  if (!agreed.ok()) return agreed.status();
  return UnavailableError("NCCL support is not compiled in");
}

#else  // OCTET_HAVE_NCCL

namespace {

std::string CudaError(const char* what, cudaError_t e) {
  return std::string(what) + ": " + cudaGetErrorString(e);
}

ncclDataType_t NcclType(const CollectiveArgs& a) {
  if (a.op == CollectiveOp::kBroadcast) return ncclUint8;
  switch (a.dtype) {
    case DType::kF32: return ncclFloat32;
    case DType::kBF16: return ncclBfloat16;
    case DType::kF16: return ncclFloat16;
  }
  return ncclFloat32;
}

// Makes the communicator's GPU current for a scope and gives the calling
// thread its own device back after. The communicator picks LocalRank % count;
// the thread's device is the CUDA kernel backend's choice (it launches on a
// stream of that device): on a host of several GPUs, a device left switched
// here would send the backend's allocations and launches to the wrong GPU.
class ScopedDevice {
 public:
  explicit ScopedDevice(int device) {
    if (cudaGetDevice(&saved_) != cudaSuccess) saved_ = -1;
    if (saved_ != device) {
      error_ = cudaSetDevice(device);
      set_ = error_ == cudaSuccess;
    }
  }
  ~ScopedDevice() {
    if (set_ && saved_ >= 0) cudaSetDevice(saved_);
  }
  cudaError_t error() const { return error_; }  // of making the device current
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;

 private:
  int saved_ = -1;
  bool set_ = false;
  cudaError_t error_ = cudaSuccess;
};

// How long closing waits for ncclCommFinalize before aborting instead.
constexpr int64_t kFinalizeMs = 5000;

class NcclBackend final : public Backend {
 public:
  explicit NcclBackend(const NcclApi* nccl) : nccl_(nccl) {}
  ~NcclBackend() override {
    if (!comm_ && !stream_ && !send_buf_ && !recv_buf_) return;  // no GPU touched
    ScopedDevice on(device_);
    if (comm_) {
      // Finalize runs in the background on a non-blocking communicator
      // (ncclInProgress); destroy once it is done, abort if it fails or
      // takes too long.
      ncclResult_t r = nccl_->comm_finalize(comm_);
      const Deadline deadline = Deadline::AfterMs(kFinalizeMs);
      while (r == ncclInProgress && !deadline.expired()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        nccl_->comm_get_async_error(comm_, &r);
      }
      if (r == ncclSuccess) {
        nccl_->comm_destroy(comm_);
      } else {
        nccl_->comm_abort(comm_);
      }
    }
    if (stream_) cudaStreamDestroy(stream_);
    if (send_buf_) cudaFree(send_buf_);
    if (recv_buf_) cudaFree(recv_buf_);
  }

  TransportKind transport() const override { return TransportKind::kNccl; }
  bool honours_algorithm() const override { return false; }

  Status Init(Bootstrap& b, const TransportConfig& config) {
    int count = 0;
    if (cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess) {
      return UnavailableError(CudaError("no usable GPU (cudaGetDeviceCount)", e));
    }
    if (count < 1) return UnavailableError("no usable GPU (no CUDA device)");
    if (b.LocalRankCount() > count) {
      return UnavailableError(
          "NCCL needs a GPU of its own for each rank: " + std::to_string(b.LocalRankCount()) +
          " ranks on this host share " + std::to_string(count) + " GPU" + (count == 1 ? "" : "s"));
    }
    device_ = b.LocalRank() % count;
    ScopedDevice on(device_);  // the stream is made on it; the caller's device after
    if (on.error() != cudaSuccess) return UnavailableError(CudaError("cudaSetDevice", on.error()));
    if (cudaError_t e = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking);
        e != cudaSuccess) {
      return UnavailableError(CudaError("cudaStreamCreate", e));
    }
    return Status::Ok();
  }

  Status CreateComm(const ncclUniqueId& id, int n, int rank, Deadline deadline) {
    ScopedDevice on(device_);  // NCCL binds the communicator to the current device
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t r = nccl_->comm_init_rank_config(&comm_, n, id, rank, &config);
    if (r != ncclSuccess && r != ncclInProgress) {
      return UnavailableError(std::string("ncclCommInitRankConfig: ") + nccl_->get_error_string(r));
    }
    for (;;) {
      nccl_->comm_get_async_error(comm_, &r);
      if (r == ncclSuccess) return Status::Ok();
      if (r != ncclInProgress) {
        return Fail(UnavailableError(std::string("NCCL communicator set-up: ") +
                                     nccl_->get_error_string(r)));
      }
      if (deadline.expired()) {
        return Fail(DeadlineExceededError("NCCL communicator set-up did not finish in time"));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  Status Collective(const CollectiveArgs& a, AlgorithmKind, Waiter& w) override {
    OCTET_RETURN_IF_ERROR(Usable());
    ScopedDevice on(device_);
    const size_t elem = a.elem_bytes();
    const int n = w.bootstrap() ? w.bootstrap()->size() : 1;
    size_t in_bytes = a.count * elem, out_bytes = a.count * elem;
    if (a.op == CollectiveOp::kAllGather) out_bytes *= n;
    if (a.op == CollectiveOp::kReduceScatter) in_bytes *= n;
    if (a.op == CollectiveOp::kBarrier) in_bytes = out_bytes = sizeof(float);
    OCTET_RETURN_IF_ERROR(Reserve(std::max(in_bytes, out_bytes)));
    if (a.op == CollectiveOp::kBarrier) {
      OCTET_RETURN_IF_ERROR(Check(cudaMemsetAsync(send_buf_, 0, sizeof(float), stream_), "memset"));
    } else if (in_bytes > 0) {
      const void* src = a.op == CollectiveOp::kBroadcast ? a.out : a.in;
      OCTET_RETURN_IF_ERROR(Check(
          cudaMemcpyAsync(send_buf_, src, in_bytes, cudaMemcpyHostToDevice, stream_), "copy in"));
    }
    ncclResult_t r = ncclSuccess;
    switch (a.op) {
      case CollectiveOp::kAllReduce:
        r = nccl_->all_reduce(send_buf_, recv_buf_, a.count, NcclType(a), ncclSum, comm_, stream_);
        break;
      case CollectiveOp::kAllGather:
        r = nccl_->all_gather(send_buf_, recv_buf_, a.count, NcclType(a), comm_, stream_);
        break;
      case CollectiveOp::kReduceScatter:
        r = nccl_->reduce_scatter(send_buf_, recv_buf_, a.count, NcclType(a), ncclSum, comm_,
                                  stream_);
        break;
      case CollectiveOp::kBroadcast:
        r = nccl_->broadcast(send_buf_, recv_buf_, a.count, ncclUint8, a.root, comm_, stream_);
        break;
      case CollectiveOp::kBarrier:
        r = nccl_->all_reduce(send_buf_, recv_buf_, 1, ncclFloat32, ncclSum, comm_, stream_);
        break;
      case CollectiveOp::kSendRecv:
        return InvalidArgumentError("nccl: send/recv goes through SendRecv");
    }
    OCTET_RETURN_IF_ERROR(Await(r, w));
    if (a.op != CollectiveOp::kBarrier && out_bytes > 0) {
      OCTET_RETURN_IF_ERROR(Check(
          cudaMemcpyAsync(a.out, recv_buf_, out_bytes, cudaMemcpyDeviceToHost, stream_),
          "copy out"));
      OCTET_RETURN_IF_ERROR(Check(cudaStreamSynchronize(stream_), "copy out"));
    }
    return Status::Ok();
  }

  Status SendRecv(int send_peer, const void* send_data, size_t send_bytes, int recv_peer,
                  void* recv_data, size_t recv_bytes, Waiter& w) override {
    OCTET_RETURN_IF_ERROR(Usable());
    ScopedDevice on(device_);
    OCTET_RETURN_IF_ERROR(Reserve(std::max(send_bytes, recv_bytes)));
    if (send_peer >= 0 && send_bytes > 0) {
      OCTET_RETURN_IF_ERROR(Check(
          cudaMemcpyAsync(send_buf_, send_data, send_bytes, cudaMemcpyHostToDevice, stream_),
          "copy in"));
    }
    nccl_->group_start();
    ncclResult_t r = ncclSuccess;
    if (send_peer >= 0)
      r = nccl_->send(send_buf_, send_bytes, ncclUint8, send_peer, comm_, stream_);
    if (r == ncclSuccess && recv_peer >= 0) {
      r = nccl_->recv(recv_buf_, recv_bytes, ncclUint8, recv_peer, comm_, stream_);
    }
    const ncclResult_t g = nccl_->group_end();
    OCTET_RETURN_IF_ERROR(Await(r != ncclSuccess && r != ncclInProgress ? r : g, w));
    if (recv_peer >= 0 && recv_bytes > 0) {
      OCTET_RETURN_IF_ERROR(Check(
          cudaMemcpyAsync(recv_data, recv_buf_, recv_bytes, cudaMemcpyDeviceToHost, stream_),
          "copy out"));
      OCTET_RETURN_IF_ERROR(Check(cudaStreamSynchronize(stream_), "copy out"));
    }
    return Status::Ok();
  }

 private:
  Status Check(cudaError_t e, const char* what) {
    if (e == cudaSuccess) return Status::Ok();
    return UnavailableError(CudaError(what, e));
  }

  // After a failure the communicator is aborted at once: its kernels stop
  // spinning on the GPU (which the model's stream shares), and the peers'
  // NCCL calls fail instead of waiting for this rank.
  Status Fail(Status s) {
    if (comm_) nccl_->comm_abort(comm_);
    comm_ = nullptr;
    return s;
  }
  Status Usable() const {
    return comm_ ? Status::Ok()
                 : FailedPreconditionError("NCCL: the communicator was aborted after a failure");
  }

  Status Reserve(size_t bytes) {
    if (bytes <= capacity_) return Status::Ok();
    if (send_buf_) cudaFree(send_buf_);
    if (recv_buf_) cudaFree(recv_buf_);
    send_buf_ = recv_buf_ = nullptr;
    capacity_ = 0;
    OCTET_RETURN_IF_ERROR(Check(cudaMalloc(&send_buf_, bytes), "cudaMalloc"));
    OCTET_RETURN_IF_ERROR(Check(cudaMalloc(&recv_buf_, bytes), "cudaMalloc"));
    capacity_ = bytes;
    return Status::Ok();
  }

  // After an enqueue returned `r`: waits until NCCL has the operation on the
  // stream (ncclInProgress until ncclCommGetAsyncError says ncclSuccess) and
  // the stream has run it, while watching the control mesh and the peer
  // timeout (this rank cannot tell which peer NCCL waits for; the error says
  // so). Any failure aborts the communicator.
  Status Await(ncclResult_t r, Waiter& w) {
    if (r != ncclSuccess && r != ncclInProgress) {
      return Fail(UnavailableError(std::string("NCCL: ") + nccl_->get_error_string(r) + " (" +
                                   w.label().ToString() + ")"));
    }
    const int64_t start = NowNs();
    for (int i = 0;; ++i) {
      nccl_->comm_get_async_error(comm_, &r);
      if (r != ncclSuccess && r != ncclInProgress) {
        return Fail(UnavailableError(std::string("NCCL: ") + nccl_->get_error_string(r) + " (" +
                                     w.label().ToString() + ")"));
      }
      if (r == ncclSuccess) {  // enqueued: now the stream
        const cudaError_t e = cudaStreamQuery(stream_);
        if (e == cudaSuccess) return Status::Ok();
        if (e != cudaErrorNotReady) return Fail(UnavailableError(CudaError("NCCL stream", e)));
      }
      if ((i & 63) == 63) {
        Status peers = w.CheckPeers();
        if (!peers.ok()) return Fail(peers);
        if (NowNs() - start > w.peer_timeout_ns()) {
          return Fail(DeadlineExceededError("NCCL did not finish within " +
                                            std::to_string(w.peer_timeout_ns() / 1'000'000) +
                                            " ms (" + w.label().ToString() + ")"));
        }
      }
      std::this_thread::yield();
    }
  }

  const NcclApi* nccl_;
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  ncclComm_t comm_ = nullptr;
  void* send_buf_ = nullptr;
  void* recv_buf_ = nullptr;
  size_t capacity_ = 0;
};

}  // namespace

Status ProbeNccl() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) return UnavailableError("no usable GPU: " + DriverProblem(e));
  if (count == 0) return UnavailableError("no usable GPU (no CUDA device)");
  auto nccl = LoadNccl();  // a GPU without libnccl: the ranks fall back together
  return nccl.ok() ? Status::Ok() : nccl.status();
}

Result<std::unique_ptr<Backend>> ConnectNccl(Bootstrap& b, const TransportConfig& config) {
  const Deadline deadline = Deadline::AfterMs(config.connect_timeout_ms);
  Status local = ProbeNccl();
  const NcclApi* nccl = local.ok() ? *LoadNccl() : nullptr;
  auto backend = std::make_unique<NcclBackend>(nccl);
  if (local.ok()) local = backend->Init(b, config);
  // Rank 0 makes the unique id; every rank learns it (or the first failure).
  ncclUniqueId id{};
  if (local.ok() && b.rank() == 0) {
    if (ncclResult_t r = nccl->get_unique_id(&id); r != ncclSuccess) {
      local = UnavailableError(std::string("ncclGetUniqueId: ") + nccl->get_error_string(r));
    }
  }
  const std::string mine =
      b.rank() == 0 ? std::string(reinterpret_cast<const char*>(&id), sizeof id) : std::string();
  auto all = b.AllGatherChecked(local, mine, deadline);
  if (!all.ok()) return all.status();
  if ((*all)[0].size() != sizeof id) return DataLossError("rank 0 sent a malformed NCCL id");
  std::memcpy(&id, (*all)[0].data(), sizeof id);
  OCTET_RETURN_IF_ERROR(backend->CreateComm(id, b.size(), b.rank(), deadline));
  return std::unique_ptr<Backend>(std::move(backend));
}

#endif  // OCTET_HAVE_NCCL

}  // namespace octet::collectives
