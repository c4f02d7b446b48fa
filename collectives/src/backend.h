// A Backend runs whole collectives for a Communicator. TransportBackend is
// "algorithm x transport" (one-shot or ring over shm, tcp or verbs); the NCCL
// backend hands whole collectives to NCCL.
#pragma once

#include <cstring>
#include <memory>

#include "algorithm.h"
#include "bootstrap.h"
#include "octet/base/status.h"
#include "octet/collectives/types.h"
#include "transport.h"
#include "wait.h"

namespace octet::collectives {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual TransportKind transport() const = 0;
  // False when the backend chooses its own algorithm (NCCL).
  virtual bool honours_algorithm() const { return true; }
  virtual Status Collective(const CollectiveArgs& args, AlgorithmKind algorithm, Waiter& w) = 0;
  virtual Status SendRecv(int send_peer, const void* send_data, size_t send_bytes, int recv_peer,
                          void* recv_data, size_t recv_bytes, Waiter& w) = 0;
};

class TransportBackend final : public Backend {
 public:
  explicit TransportBackend(std::unique_ptr<Transport> transport)
      : transport_(std::move(transport)), oneshot_(MakeOneShot()), ring_(MakeRing()) {}

  TransportKind transport() const override { return transport_->kind(); }

  Status Collective(const CollectiveArgs& args, AlgorithmKind algorithm, Waiter& w) override {
    // Barrier is always one step of zero-byte contributions.
    Algorithm& algo = algorithm == AlgorithmKind::kRing && args.op != CollectiveOp::kBarrier
                          ? *ring_
                          : *oneshot_;
    return algo.Run(args, *transport_, w);
  }

  Status SendRecv(int send_peer, const void* send_data, size_t send_bytes, int recv_peer,
                  void* recv_data, size_t recv_bytes, Waiter& w) override {
    auto* dst = static_cast<uint8_t*>(recv_data);
    return transport_->SendRecv(
        send_peer, send_data, send_bytes, recv_peer, recv_bytes,
        [dst](size_t off, const uint8_t* data, size_t len) {
          if (len) std::memcpy(dst + off, data, len);
          return Status::Ok();
        },
        w);
  }

 private:
  std::unique_ptr<Transport> transport_;
  std::unique_ptr<Algorithm> oneshot_;
  std::unique_ptr<Algorithm> ring_;
};

// NCCL as a whole backend (OCTET_HAVE_NCCL builds only; elsewhere it says it
// is not compiled in). Fails cleanly, on every rank alike, when a rank has no
// usable GPU.
Result<std::unique_ptr<Backend>> ConnectNccl(Bootstrap& bootstrap, const TransportConfig& config);
// Local check: is a CUDA device usable by this process?
Status ProbeNccl();

}  // namespace octet::collectives
