// Bootstrap: the rendezvous and the control mesh of one communicator.
//
// Rank 0 listens on the rendezvous HOST:PORT; every other rank connects, says
// who it is (rank, world size, options digest, host identity, pid, the port of
// its own listener) and receives the roster of all ranks. The ranks then open
// a full mesh of TCP control connections (the star links to rank 0 are reused).
//
// The control mesh carries small messages only: all-gathers of set-up blobs
// (transport addresses, votes, crossovers), an ABORT naming a failed rank when
// one rank's communicator is poisoned, and a BYE when a rank closes cleanly.
// It is also the liveness signal: a connection that closes without BYE means
// that rank's process is gone, which every waiting transport notices through
// CheckPeers() within about a millisecond.
//
// Thread-safety: not thread-safe; owned and used by one communicator.
#pragma once

#include <poll.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "net.h"
#include "octet/base/deadline.h"
#include "octet/base/status.h"

namespace octet::collectives {

struct RankInfo {
  std::string host_id;   // HostIdentity() of the rank's machine
  std::string address;   // numeric address other ranks reach it at
  uint16_t mesh_port = 0;
  int64_t pid = 0;
};

// A failure seen on the control mesh: the rank blamed and the error.
struct PeerFailure {
  int rank = -1;
  Status status;
};

class Bootstrap {
 public:
  struct Options {
    int connect_timeout_ms = 60000;
    // Must be equal on every rank (compared by rank 0 at the rendezvous).
    std::string config_digest;
  };

  static Result<std::unique_ptr<Bootstrap>> Connect(const std::string& rendezvous, int world_size,
                                                    int rank, const Options& options);
  ~Bootstrap();  // sends BYE to every peer (best effort) and closes

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::vector<RankInfo>& roster() const { return roster_; }
  bool AllOnOneHost() const;
  // Ranks that share this rank's host, and this rank's index among them.
  int LocalRankCount() const;
  int LocalRank() const;
  // "rank 3 (pid 4242 at 10.0.0.4)": how errors name a peer.
  std::string Describe(int peer) const;

  // Collective: every rank contributes `mine`; returns all contributions by
  // rank. Fails (naming the peer) when a peer dies, aborts or leaves.
  Result<std::vector<std::string>> AllGather(const std::string& mine, Deadline deadline);
  // Collective: like AllGather, but each rank also contributes a Status; if any
  // rank's status is an error, every rank returns that error prefixed with the
  // rank that reported it ("rank 2: no RDMA device").
  Result<std::vector<std::string>> AllGatherChecked(const Status& mine_status,
                                                    const std::string& mine, Deadline deadline);

  // Collective: opens a fresh full mesh of TCP connections between the ranks
  // (for a duplicate control mesh or the TCP transport's data connections).
  // Returns one connected, non-blocking socket per peer (invalid for self).
  Result<std::vector<Fd>> OpenMesh(Deadline deadline);
  // Collective: a new Bootstrap over the same ranks with its own mesh.
  Result<std::unique_ptr<Bootstrap>> Duplicate(Deadline deadline);

  // Non-blocking: reads whatever arrived on the control mesh. Returns the
  // first failure seen (a peer that died, an ABORT), or an OK status with rank
  // -1. Sticky: once a failure is seen it is returned every time.
  PeerFailure CheckPeers();
  // True once `peer` said BYE (it closed its communicator cleanly).
  bool PeerLeft(int peer) const;
  // Adds the control sockets to a poll set (POLLIN), for transports that
  // block in poll() themselves.
  void AppendPollFds(std::vector<pollfd>* fds) const;
  // What this rank is waiting for, so peers that time out can follow the
  // chain of waits to the rank that stopped (set by the Waiter; -1: nothing).
  void SetWaitingOn(int peer) { waiting_on_ = peer; }
  // Asks `peer` whom it waits for. Returns that rank, -1 when it is not
  // waiting, or -2 when it did not answer by `deadline` (or is gone).
  int AskWaitingOn(int peer, Deadline deadline);
  // Tells every peer that this communicator failed because of `failed_rank`
  // (-1: unknown) with `why` (best effort, never blocks).
  void BroadcastAbort(int failed_rank, const Status& why);

 private:
  struct Frame {
    uint32_t kind = 0;
    std::string payload;
  };
  struct Link {
    Fd fd;
    std::string inbuf;           // bytes received, not yet parsed into frames
    std::deque<Frame> frames;    // parsed blob frames waiting for AllGather
    bool said_bye = false;
    uint64_t answers = 0;        // kWaitAnswer frames received
    int last_answer = -1;        // the rank it said it waits for
    bool closed = false;
    std::string close_error;     // why the connection ended (EOF, reset)
  };

  Bootstrap() = default;
  // Reads what is available on `peer` and parses complete frames.
  void Pump(int peer);
  void RecordFailure(int rank, Status status);
  Status BuildMesh(Fd listener, bool reuse_rank0_links, Deadline deadline,
                   std::vector<Fd>* links);

  int rank_ = 0;
  int size_ = 1;
  uint64_t job_id_ = 0;
  uint64_t gather_round_ = 0;
  SockAddr listen_address_;  // where this rank's listeners bind (port 0)
  std::vector<RankInfo> roster_;
  std::vector<Link> links_;  // by rank; links_[rank_] unused
  PeerFailure failure_;      // sticky
  int waiting_on_ = -1;
};

}  // namespace octet::collectives
