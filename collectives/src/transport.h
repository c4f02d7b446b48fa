// The transport interface: how bytes move between the ranks of one
// communicator. Algorithms (one-shot, ring) are written against it only.
//
// Two primitives:
//
//  * Publish / WaitPublished: one one-shot step. Each rank makes its
//    contribution (up to slot_bytes()) visible to every peer under a step
//    number `seq`, then reads every peer's contribution to the same step.
//    Every rank takes part in every step (possibly with zero bytes) and waits
//    for every peer's contribution before the step ends. That is what makes
//    two slots per rank enough: a peer can be at most one step ahead, since
//    it cannot finish step s+1 without this rank's contribution to s+1, which
//    this rank makes only after it finished reading step s.
//      shm:   one copy into this rank's slot in the shared region; peers read
//             it in place. A release store of the step number is the flag.
//      tcp:   the contribution is written to every peer's socket; each peer
//             lands it in a per-sender slot.
//      verbs: one RDMA write-with-immediate per peer into the peer's slot for
//             this rank; the immediate is the flag.
//
//  * SendRecv: pipelined point-to-point, in pieces of chunk_bytes, matched in
//    order per pair of ranks; the receiver hands each piece to a callback
//    where it lies (shm channel slot, tcp staging buffer, verbs receive slot),
//    so a ring step reduces straight out of the transport's buffer.
//
// A transport is used by one thread at a time. Every wait goes through the
// Waiter (deadline, liveness) and an error names the peer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "octet/base/status.h"
#include "octet/collectives/types.h"
#include "wait.h"

namespace octet::collectives {

class Bootstrap;

// One rank's contribution to a one-shot step: `blocks` blocks of
// `block_bytes`, block i at base + i * block_stride (gathered contiguously on
// the wire). With per_peer_block, peer p needs only block p (reduce-scatter),
// and blocks == world size.
struct PublishSpec {
  const void* base = nullptr;
  size_t block_bytes = 0;
  size_t block_stride = 0;
  int blocks = 1;  // 0: a zero-byte contribution (this rank only takes part)
  bool per_peer_block = false;
  size_t bytes() const { return block_bytes * static_cast<size_t>(blocks); }
};

// Receives one piece of a point-to-point message: [offset, offset + len) of
// it, at `data` (valid during the call only).
using PieceFn = FunctionRef<Status(size_t offset, const uint8_t* data, size_t len)>;

// Shared sizing and identity of a transport.
struct TransportConfig {
  size_t slot_bytes = size_t{1} << 20;
  size_t chunk_bytes = size_t{256} << 10;
  int64_t connect_timeout_ms = 60000;
  // verbs
  std::string verbs_device;
  int verbs_port = 1;
  int verbs_gid_index = -1;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual TransportKind kind() const = 0;
  int rank() const { return rank_; }
  int size() const { return size_; }
  // Most bytes one Publish may carry (the whole message, all blocks).
  size_t slot_bytes() const { return slot_bytes_; }

  // Step numbers: every rank draws them in the same order.
  uint64_t NextSeq() { return next_seq_++; }

  // Makes `spec` this rank's contribution to step `seq`.
  virtual Status Publish(uint64_t seq, const PublishSpec& spec, Waiter& w) = 0;
  // Waits for `peer`'s contribution to step `seq` (peer may be this rank) and
  // returns where it lies: the whole message, or with per_peer_block the block
  // for this rank. `expect_bytes` is its size as this rank expects it; a peer
  // that contributed another size is an error naming it. Valid until the next
  // Publish on this transport.
  virtual Result<const uint8_t*> WaitPublished(int peer, uint64_t seq, size_t expect_bytes,
                                               Waiter& w) = 0;
  // Returns once this rank's contribution to `seq` has left its buffer, so the
  // caller may overwrite it (one-shot in-place all-reduce).
  virtual Status FinishPublish(uint64_t seq, Waiter& w) { return Status::Ok(); }

  // Piecewise forms of the two above, for a large one-shot step that is
  // reduced piece by piece while the rest is still arriving (while a piece
  // just landed is still in cache). WaitPublishedPrefix returns where peer's
  // contribution (`expect_bytes` in all) lies once at least its first
  // `landed_bytes` are there; FinishPublishPrefix returns once the first
  // `bytes` of this rank's contribution have left its buffer. True from
  // lands_in_pieces() only where a contribution does land in pieces (TCP);
  // elsewhere the defaults wait for the whole contribution.
  virtual bool lands_in_pieces() const { return false; }
  virtual Result<const uint8_t*> WaitPublishedPrefix(int peer, uint64_t seq, size_t expect_bytes,
                                                     size_t landed_bytes, Waiter& w) {
    return WaitPublished(peer, seq, expect_bytes, w);
  }
  virtual Status FinishPublishPrefix(uint64_t seq, size_t bytes, Waiter& w) {
    return FinishPublish(seq, w);
  }

  // Sends `send_bytes` to `send_peer` while receiving `recv_bytes` from
  // `recv_peer`, passing each received piece to `on_piece` in order. A peer of
  // -1 means no send / no receive. Returns when both are done.
  virtual Status SendRecv(int send_peer, const void* send_data, size_t send_bytes, int recv_peer,
                          size_t recv_bytes, PieceFn on_piece, Waiter& w) = 0;

 protected:
  Transport(int rank, int size, size_t slot_bytes)
      : rank_(rank), size_(size), slot_bytes_(slot_bytes) {}

  int rank_;
  int size_;
  size_t slot_bytes_;
  uint64_t next_seq_ = 1;
};

// The error when a peer's step or message has another size than expected.
Status SizeMismatch(const Waiter& w, int peer, size_t theirs, size_t ours, const char* what);

// Each transport's probe-and-connect. Probe failures say why ("no RDMA
// device", "ranks are on more than one host") and every rank learns the first
// failure through the bootstrap, so all ranks agree on the outcome.
Result<std::unique_ptr<Transport>> ConnectShm(Bootstrap& bootstrap, const TransportConfig& config);
Result<std::unique_ptr<Transport>> ConnectTcp(Bootstrap& bootstrap, const TransportConfig& config);
Result<std::unique_ptr<Transport>> ConnectVerbs(Bootstrap& bootstrap,
                                                const TransportConfig& config);
// Local check only (no peers): is an RDMA device with an active port present?
// Runs everywhere; without rdma-core compiled in it says so.
Status ProbeVerbs(const TransportConfig& config);

}  // namespace octet::collectives
