// A Communicator connects the n ranks (processes) of one job and runs
// collectives among them: all-reduce (sum), all-gather, reduce-scatter,
// broadcast, barrier and point-to-point send/recv, on host memory.
//
//   CommunicatorOptions o;                 // transport auto, algorithm auto
//   auto comm = Communicator::Create("10.0.0.1:29500", /*world_size=*/4, rank, o);
//   if (!comm.ok()) ...                    // names the rank/peer that failed
//   Status s = (*comm)->AllReduce(hidden, n, DType::kBF16);   // in place
//
// Start-up. Create is collective: every rank calls it with the same rendezvous
// address, world size and options (a mismatch is an error naming the rank).
// Rank 0 listens on HOST:PORT; the others connect to it, everyone learns
// everyone's address, and the ranks build a full mesh of control connections.
// Then every rank probes the requested transport (device present, peers
// reachable) and runs a self-test (a real small all-reduce checked against the
// expected sum); all ranks vote, and if any rank cannot use the transport they
// all fall back together (verbs -> shm on one host, else tcp; shm -> tcp;
// nccl -> shm/tcp) and rank 0 logs one line saying what and why
// (fallback_reason()). With algorithm kAuto the ranks then time one-shot and
// ring at every power of two from 8 B to 16 MiB, compare their bandwidths
// at 16 MiB for every larger size, and adopt rank 0's table of
// the faster one per power-of-two size band (or rank 0's stored table from
// options.crossover_profile); see algorithm_bands().
//
// Agreement. Which algorithm a call uses depends only on its arguments (op,
// byte size) and on values all ranks agreed at start-up, so every rank always
// takes the same path. Every rank must issue the same collectives in the same
// order with the same sizes (like NCCL/MPI); a size mismatch that a transport
// can see is reported as an error naming the peer.
//
// Failure is fail-stop. A peer that dies (its connections close) fails the
// current call on every surviving rank within milliseconds; a peer that stays
// silent for options.peer_timeout_ms fails it after that deadline (plus up to
// ~0.2 s per rank on the way, to follow the chain of waiting ranks to the one
// that stopped, so that every survivor blames the same rank). The error
// names the peer ("rank 3 ..."), failed_peer() returns it, and the
// communicator is poisoned: every later call returns the same error at once.
// No call ever waits without a deadline and no call returns a wrong sum.
//
// Threads. A Communicator runs one operation at a time: calls must not
// overlap (a second concurrent call fails with FailedPrecondition rather than
// corrupting the first). Use one communicator per thread that issues
// collectives, e.g. Duplicate() one for a trainer's background gradient
// reduction while the main thread keeps its own. stats(), rank(), size() and
// the other accessors may be called from any thread at any time.
//
// Cost per call: about 0.2 us of CPU for bookkeeping (checks, statistics,
// algorithm choice; measured with one rank and a 4-byte all-reduce) plus the
// transport's latency: an 8-byte shm all-reduce between 2 ranks pinned to
// separate cores took ~0.7 us, 32 KiB ~11 us, on a busy 2-core x86-64 VM
// (octet_bench_collectives prints both). Pin ranks to distinct cores for low
// latency (waiting ranks spin ~0.5 us, yield up to 50 us, then sleep on a
// futex). The shm path allocates nothing per call. Calls block until done
// (the caller's buffers may be reused on return).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "octet/base/status.h"
#include "octet/collectives/types.h"

namespace octet::collectives {

struct CommunicatorOptions {
  TransportKind transport = TransportKind::kAuto;
  AlgorithmKind algorithm = AlgorithmKind::kAuto;

  // Fail-stop deadline: a peer this rank waits for that shows no progress for
  // this long is declared failed (milliseconds).
  int peer_timeout_ms = 5000;
  // How long Create waits for all ranks to join and connect (milliseconds).
  int connect_timeout_ms = 60000;

  // kAuto only: a fixed crossover, messages up to this many bytes (per rank)
  // use one-shot, bigger ones ring. 0 = use rank 0's band table from
  // crossover_profile when it has one for this transport and world size, else
  // measure one at start-up (and store it there). Profile lines:
  //   TRANSPORT WORLD_SIZE ALGO:MAX_BYTES ... ALGO:max   (a band table)
  //   TRANSPORT WORLD_SIZE ONESHOT_MAX_BYTES             (one crossover)
  size_t oneshot_max_bytes = 0;
  std::string crossover_profile;

  // Run the start-up self-test before accepting a transport.
  bool self_test = true;

  // Largest message one one-shot step carries per rank; larger one-shot
  // collectives are split into steps of this size. Memory: 2 * world_size *
  // slot_bytes per rank (shm: one shared region).
  size_t slot_bytes = size_t{1} << 20;
  // Piece size of pipelined ring / point-to-point transfers.
  size_t chunk_bytes = size_t{256} << 10;

  // RDMA verbs: devices ("" = every one with an active port, else a
  // comma-separated list; each peer gets the one that reaches it), port
  // number and GID index (-1 = the first RoCE v2 GID with an IPv4 address,
  // else 0).
  std::string verbs_device;
  int verbs_port = 1;
  int verbs_gid_index = -1;
};

// Time and volume spent inside collective calls, for "all-reduce share of a
// step" figures. Counts every public call (ok or failed); bytes are the
// caller's payload per rank (all_reduce: count * dtype size).
struct CollectiveStats {
  uint64_t calls = 0;
  uint64_t bytes = 0;
  int64_t busy_ns = 0;        // wall time inside calls, summed
  uint64_t oneshot_calls = 0;
  uint64_t ring_calls = 0;
  uint64_t other_calls = 0;   // barrier, send/recv, world size 1, nccl
};

// One row of kAuto's algorithm table: messages of up to max_bytes per rank
// (and more than the previous row's max_bytes) use `algorithm`. A table is
// sorted by max_bytes, adjacent rows differ in algorithm, and the last row's
// max_bytes is SIZE_MAX.
struct AlgorithmBand {
  size_t max_bytes = 0;
  AlgorithmKind algorithm = AlgorithmKind::kOneShot;
  bool operator==(const AlgorithmBand&) const = default;
};

class Communicator {
 public:
  // Joins the rendezvous at `rendezvous` ("HOST:PORT", "[v6addr]:PORT") as
  // `rank` of `world_size` ranks; see the file comment for what happens.
  static Result<std::unique_ptr<Communicator>> Create(const std::string& rendezvous,
                                                      int world_size, int rank,
                                                      const CommunicatorOptions& options = {});
  ~Communicator();  // tells peers it leaves; never blocks for long
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // What the start-up vote chose; fallback_reason() is empty when it is what
  // the options asked for (with kAuto: what kAuto would pick).
  TransportKind transport() const;
  AlgorithmKind algorithm() const { return algorithm_; }
  const std::string& fallback_reason() const { return fallback_reason_; }
  // kAuto's agreed table (identical on every rank); empty for other
  // algorithms, one rank, or NCCL.
  const std::vector<AlgorithmBand>& algorithm_bands() const { return bands_; }
  // kAuto: every message up to this many bytes per rank uses one-shot (the end
  // of the table's first one-shot row; 0 when the first row is ring, SIZE_MAX
  // when one-shot is used at every size). Larger ones may still use one-shot
  // in a later band (algorithm_bands()).
  size_t oneshot_max_bytes() const;
  // One line for logs: "4 ranks over shm, auto (one-shot up to 16.0 KiB, ring
  // above)".
  std::string Describe() const;
  // The algorithm a collective of this op and size takes on every rank.
  AlgorithmKind AlgorithmFor(CollectiveOp op, size_t bytes) const;

  // Sum all-reduce of `count` elements. In place: `data` is input and output.
  Status AllReduce(void* data, size_t count, DType dtype);
  // Out of place: `in` and `out` hold count elements each (may be equal).
  Status AllReduce(const void* in, void* out, size_t count, DType dtype);
  // The same with `algorithm` (kOneShot or kRing) instead of this
  // communicator's choice: for comparing algorithms over the same links and
  // transport state (benchmarks, tests). Every rank must pass the same one.
  Status AllReduceWith(AlgorithmKind algorithm, const void* in, void* out, size_t count,
                       DType dtype);
  // Rank r's `count` elements land at out[r * count]; out holds size()*count.
  Status AllGather(const void* in, void* out, size_t count, DType dtype);
  // in holds size()*count elements; rank r receives the sum of block r (count
  // elements) in `out`.
  Status ReduceScatter(const void* in, void* out, size_t count, DType dtype);
  // Root's `bytes` at data are copied to every rank's data.
  Status Broadcast(void* data, size_t bytes, int root);
  Status Barrier();

  // Point to point, matched in order per pair of ranks (no tags). Blocks until
  // the bytes have left (Send) or arrived (Recv). A Send may wait for the peer
  // to post its Recv once the transport's buffering is full, so two ranks that
  // send each other large messages should use SendRecv. Sizes must match.
  Status Send(const void* data, size_t bytes, int peer);
  Status Recv(void* data, size_t bytes, int peer);
  // Sends to `send_peer` while receiving from `recv_peer` (either may be -1).
  Status SendRecv(const void* send_data, size_t send_bytes, int send_peer, void* recv_data,
                  size_t recv_bytes, int recv_peer);

  // Collective: a new communicator over the same ranks with its own
  // connections and buffers (same transport and crossover), for a second
  // thread. Every rank must call it in the same order relative to its other
  // collectives on this communicator.
  Result<std::unique_ptr<Communicator>> Duplicate();

  CollectiveStats stats() const;
  void ResetStats();

  // After a failure: true, with the error every call now returns, and the
  // rank blamed for it (-1 when unknown).
  bool poisoned() const { return poisoned_.load(std::memory_order_acquire); }
  Status health() const;
  int failed_peer() const { return failed_peer_.load(std::memory_order_acquire); }

 private:
  struct Impl;  // bootstrap, transport/backend, waiter (collectives/src)
  class CallScope;
  Communicator();
  // `forced`: the algorithm to run instead of AlgorithmFor's (kAuto: none).
  Status Run(CollectiveOp op, const void* in, void* out, size_t count, DType dtype, int root,
             size_t payload_bytes, AlgorithmKind forced = AlgorithmKind::kAuto);
  Status Poison(Status why, int blamed);
  Status SelectBackend(bool self_test);
  Status AgreeCrossover();
  Status MeasureBands(std::vector<AlgorithmBand>* bands);

  int rank_ = 0;
  int size_ = 1;
  AlgorithmKind algorithm_ = AlgorithmKind::kAuto;
  std::string fallback_reason_;
  std::vector<AlgorithmBand> bands_;  // kAuto's table; see algorithm_bands()
  size_t retimed_bands_ = 0;          // start-up: bands MeasureBands timed twice
  CommunicatorOptions options_;
  std::unique_ptr<Impl> impl_;
  uint64_t op_index_ = 0;  // collectives issued; only touched by the calling thread

  std::atomic<bool> busy_{false};
  std::atomic<bool> poisoned_{false};
  std::atomic<int> failed_peer_{-1};
  Status poison_status_;  // written once before poisoned_ is set (release)

  std::atomic<uint64_t> calls_{0};
  std::atomic<uint64_t> bytes_{0};
  std::atomic<int64_t> busy_ns_{0};
  std::atomic<uint64_t> oneshot_calls_{0};
  std::atomic<uint64_t> ring_calls_{0};
  std::atomic<uint64_t> other_calls_{0};
};

}  // namespace octet::collectives
