#include "bootstrap.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>

#include "octet/base/log.h"
#include "octet/collectives/local_rendezvous.h"
#include "wire.h"

namespace octet::collectives {

namespace {

constexpr uint32_t kFrameMagic = 0x3154434f;  // "OCT1"
constexpr uint32_t kProtocolVersion = 1;
constexpr uint64_t kMaxFrameBytes = uint64_t{64} << 20;

enum FrameKind : uint32_t {
  kHello = 1,      // rank -> rank 0 at the rendezvous
  kRoster = 2,     // rank 0 -> rank: everyone's address
  kMeshHello = 3,  // first frame on a mesh connection: {token, rank}
  kBlob = 4,       // one rank's contribution to an all-gather round
  kAbort = 5,      // {failed rank, code, reason}: this sender's communicator failed
  kBye = 6,        // the sender closes its communicator cleanly
  kWaitQuery = 7,  // "whom are you waiting for?"
  kWaitAnswer = 8, // {rank waited for, or -1}
};

struct FrameHeader {
  uint32_t magic;
  uint32_t kind;
  uint64_t length;
};
static_assert(sizeof(FrameHeader) == 16);

std::string EncodeFrame(uint32_t kind, std::string_view payload) {
  FrameHeader h{kFrameMagic, kind, payload.size()};
  std::string out(reinterpret_cast<const char*>(&h), sizeof h);
  out.append(payload);
  return out;
}

Status SendFrame(int fd, uint32_t kind, std::string_view payload, Deadline deadline,
                 std::string_view who) {
  const std::string bytes = EncodeFrame(kind, payload);
  return SendAll(fd, bytes.data(), bytes.size(), deadline, who);
}

// Reads one whole frame (blocking with a deadline), for the set-up handshakes.
Status RecvFrame(int fd, uint32_t* kind, std::string* payload, Deadline deadline,
                 std::string_view who) {
  FrameHeader h{};
  OCTET_RETURN_IF_ERROR(RecvAll(fd, &h, sizeof h, deadline, who));
  if (h.magic != kFrameMagic) {
    return DataLossError(std::string(who) + " is not an Octet collectives endpoint (bad magic)");
  }
  if (h.length > kMaxFrameBytes) {
    return DataLossError(std::string(who) + " sent an oversized frame (" +
                         std::to_string(h.length) + " bytes)");
  }
  *kind = h.kind;
  payload->assign(h.length, '\0');
  return RecvAll(fd, payload->data(), payload->size(), deadline, who);
}

// Best-effort frame send that never blocks (used for ABORT and BYE).
void SendFrameNow(int fd, uint32_t kind, std::string_view payload) {
  const std::string bytes = EncodeFrame(kind, payload);
  size_t done = 0;
  // A few retries on EAGAIN only: the control mesh is idle during data
  // transfer, so its send buffer has room in practice.
  for (int tries = 0; done < bytes.size() && tries < 100; ++tries) {
    const ssize_t n = ::send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, 1);
    } else {
      return;
    }
  }
}

uint64_t RandomId() {
  std::random_device rd;
  return (uint64_t{rd()} << 32) ^ rd() ^ static_cast<uint64_t>(NowNs());
}

std::string RankName(int r) { return "rank " + std::to_string(r); }

// A status code as an ABORT frame carries it: OK or a number that names no
// code reads as kUnknown (an OK "failure" would hide the abort).
StatusCode WireStatusCode(uint32_t v) {
  if (v == 0 || v > static_cast<uint32_t>(StatusCode::kUnauthenticated))
    return StatusCode::kUnknown;
  return static_cast<StatusCode>(v);
}

}  // namespace

Bootstrap::~Bootstrap() {
  for (int p = 0; p < size_; ++p) {
    if (p == rank_ || !links_[p].fd.valid() || links_[p].closed) continue;
    SendFrameNow(links_[p].fd.get(), kBye, {});
    ::shutdown(links_[p].fd.get(), SHUT_WR);
  }
}

bool Bootstrap::AllOnOneHost() const {
  for (const RankInfo& r : roster_) {
    if (r.host_id != roster_[rank_].host_id) return false;
  }
  return true;
}

int Bootstrap::LocalRankCount() const {
  int n = 0;
  for (const RankInfo& r : roster_) n += r.host_id == roster_[rank_].host_id;
  return n;
}

int Bootstrap::LocalRank() const {
  int n = 0;
  for (int r = 0; r < rank_; ++r) n += roster_[r].host_id == roster_[rank_].host_id;
  return n;
}

std::string Bootstrap::Describe(int peer) const {
  if (peer < 0 || peer >= size_) return "an unknown rank";
  const RankInfo& r = roster_[peer];
  std::string s = RankName(peer) + " (pid " + std::to_string(r.pid);
  if (!r.address.empty()) s += " at " + r.address;
  return s + ")";
}

Result<std::unique_ptr<Bootstrap>> Bootstrap::Connect(const std::string& rendezvous,
                                                      int world_size, int rank,
                                                      const Options& options) {
  if (world_size < 1) {
    return InvalidArgumentError("world size must be at least 1 (got " +
                                std::to_string(world_size) + ")");
  }
  if (rank < 0 || rank >= world_size) {
    return InvalidArgumentError("rank " + std::to_string(rank) + " is outside 0.." +
                                std::to_string(world_size - 1));
  }
  Result<HostPort> parsed = ParseHostPort(rendezvous);
  if (!parsed.ok()) return parsed.status().WithContext("rendezvous");
  HostPort hp = std::move(*parsed);
  if (hp.port == 0) {
    return InvalidArgumentError("rendezvous '" + rendezvous + "': the port must be 1-65535");
  }
  std::unique_ptr<Bootstrap> b(new Bootstrap);
  b->rank_ = rank;
  b->size_ = world_size;
  b->links_.resize(world_size);
  b->roster_.resize(world_size);
  const Deadline deadline = Deadline::AfterMs(options.connect_timeout_ms);
  const std::string where = "rendezvous " + hp.ToString();
  const std::string my_host = HostIdentity();
  const int64_t my_pid = ::getpid();

  if (world_size == 1) {
    b->roster_[0] = RankInfo{my_host, "127.0.0.1", 0, my_pid};
    return b;
  }

  auto resolved = Resolve(hp);
  if (!resolved.ok()) return resolved.status().WithContext(where);

  if (rank == 0) {
    // Rank 0 hosts the rendezvous and gathers a hello from every other rank,
    // on the socket its spawner bound for it if there is one (see
    // local_rendezvous.h), else on one it binds now.
    const int inherited = TakeInheritedRendezvous(hp.port);
    Result<Fd> listener =
        inherited >= 0 ? Result<Fd>(Fd(inherited)) : Listen(*resolved, 2 * world_size + 16);
    if (!listener.ok()) {
      return listener.status().WithContext(where + " (rank 0 must run on that host)");
    }
    b->listen_address_ = *resolved;
    b->listen_address_.set_port(0);
    std::vector<bool> joined(world_size, false);
    joined[0] = true;
    int missing = world_size - 1;
    auto fail_all = [&](const Status& why) {
      for (int p = 1; p < world_size; ++p) {
        if (b->links_[p].fd.valid()) {
          SendFrameNow(b->links_[p].fd.get(), kAbort,
                       WireWriter().I64(-1).U32(uint32_t(why.code())).Str(why.message()).str());
        }
      }
      return why;
    };
    while (missing > 0) {
      auto conn = Accept(listener->get(), deadline);
      if (!conn.ok()) {
        std::string who;
        for (int p = 1; p < world_size; ++p) {
          if (!joined[p]) who += (who.empty() ? "" : ", ") + std::to_string(p);
        }
        return fail_all(DeadlineExceededError(
            where + ": rank(s) " + who + " did not join within " +
            std::to_string(options.connect_timeout_ms) + " ms"));
      }
      // A hello must arrive promptly; anything else is a stray connection.
      const Deadline hello_deadline = Deadline::Min(deadline, Deadline::AfterMs(10000));
      uint32_t kind = 0;
      std::string payload;
      if (Status s = RecvFrame(conn->get(), &kind, &payload, hello_deadline, "a joining rank");
          !s.ok() || kind != kHello) {
        OCTET_LOG(WARNING) << where << ": ignoring a connection that did not say hello"
                           << (s.ok() ? "" : ": " + s.message());
        continue;
      }
      WireReader rd(payload);
      const uint32_t version = rd.U32();
      const int peer_world = static_cast<int>(rd.U32());
      const int peer_rank = static_cast<int>(rd.U32());
      const std::string digest = rd.Str();
      RankInfo info;
      info.host_id = rd.Str();
      info.pid = rd.I64();
      info.mesh_port = static_cast<uint16_t>(rd.U32());
      if (!rd.ok() || version != kProtocolVersion) {
        OCTET_LOG(WARNING) << where << ": ignoring a hello of another protocol version";
        continue;
      }
      auto peer_addr = PeerAddress(conn->get());
      info.address = peer_addr.ok() ? peer_addr->HostString() : "?";
      const std::string who = RankName(peer_rank) + " (pid " + std::to_string(info.pid) +
                              " at " + info.address + ")";
      Status bad;
      if (peer_world != world_size) {
        bad = InvalidArgumentError(who + " joined with world size " + std::to_string(peer_world) +
                                   ", rank 0 with " + std::to_string(world_size));
      } else if (peer_rank <= 0 || peer_rank >= world_size) {
        bad = InvalidArgumentError(who + " is outside 1.." + std::to_string(world_size - 1));
      } else if (joined[peer_rank]) {
        bad = InvalidArgumentError("two processes claim " + RankName(peer_rank) + ": " +
                                   b->Describe(peer_rank) + " and pid " +
                                   std::to_string(info.pid) + " at " + info.address);
      } else if (digest != options.config_digest) {
        bad = InvalidArgumentError(who + " was started with options '" + digest +
                                   "' but rank 0 with '" + options.config_digest + "'");
      }
      if (!bad.ok()) {
        SendFrameNow(conn->get(), kAbort,
                     WireWriter().I64(-1).U32(uint32_t(bad.code())).Str(bad.message()).str());
        return fail_all(bad.WithContext(where));
      }
      joined[peer_rank] = true;
      --missing;
      b->roster_[peer_rank] = info;
      b->links_[peer_rank].fd = std::move(*conn);
    }
    b->roster_[0] = RankInfo{my_host, resolved->HostString(), 0, my_pid};
    b->job_id_ = RandomId();
    WireWriter roster;
    roster.U64(b->job_id_);
    for (const RankInfo& r : b->roster_) {
      roster.Str(r.host_id).Str(r.address).U32(r.mesh_port).I64(r.pid);
    }
    for (int p = 1; p < world_size; ++p) {
      OCTET_RETURN_IF_ERROR(SendFrame(b->links_[p].fd.get(), kRoster, roster.str(), deadline,
                                      b->Describe(p)));
    }
    return b;  // rank 0's mesh links are the star links
  }

  // Ranks 1..n-1: connect to rank 0 (it may not be up yet), open a listener on
  // the interface that reaches it, say hello, and wait for the roster.
  auto conn = ConnectTo(*resolved, deadline, /*retry=*/true);
  if (!conn.ok()) {
    return conn.status().WithContext("cannot reach the " + where + " (rank 0) within " +
                                     std::to_string(options.connect_timeout_ms) + " ms");
  }
  auto local = LocalAddress(conn->get());
  if (!local.ok()) return local.status();
  b->listen_address_ = *local;
  b->listen_address_.set_port(0);
  auto listener = Listen(b->listen_address_, 2 * world_size + 16);
  if (!listener.ok()) return listener.status().WithContext("control mesh listener");
  auto bound = LocalAddress(listener->get());
  if (!bound.ok()) return bound.status();
  WireWriter hello;
  hello.U32(kProtocolVersion)
      .U32(static_cast<uint32_t>(world_size))
      .U32(static_cast<uint32_t>(rank))
      .Str(options.config_digest)
      .Str(my_host)
      .I64(my_pid)
      .U32(bound->port());
  OCTET_RETURN_IF_ERROR(SendFrame(conn->get(), kHello, hello.str(), deadline, where));
  uint32_t kind = 0;
  std::string payload;
  if (Status s = RecvFrame(conn->get(), &kind, &payload, deadline, where); !s.ok()) {
    if (s.code() == StatusCode::kDeadlineExceeded) {
      return DeadlineExceededError(where + ": not every rank joined within " +
                                   std::to_string(options.connect_timeout_ms) + " ms");
    }
    return s;
  }
  if (kind == kAbort) {
    WireReader rd(payload);
    rd.I64();
    const StatusCode code = WireStatusCode(rd.U32());
    return Status(code, "rank 0 refused this rank: " + rd.Str());
  }
  if (kind != kRoster) return DataLossError(where + " answered with an unexpected message");
  WireReader rd(payload);
  b->job_id_ = rd.U64();
  for (RankInfo& r : b->roster_) {
    r.host_id = rd.Str();
    r.address = rd.Str();
    r.mesh_port = static_cast<uint16_t>(rd.U32());
    r.pid = rd.I64();
  }
  if (!rd.ok()) return DataLossError(where + " sent a malformed roster");
  // This rank reaches rank 0 at the rendezvous address.
  b->roster_[0].address = resolved->HostString();
  b->links_[0].fd = std::move(*conn);

  std::vector<Fd> links;
  OCTET_RETURN_IF_ERROR(b->BuildMesh(std::move(*listener), /*reuse_rank0_links=*/true, deadline,
                                     &links));
  for (int p = 1; p < world_size; ++p) {
    if (p != rank) b->links_[p].fd = std::move(links[p]);
  }
  return b;
}

// Connects to every lower rank and accepts every higher one. Each connection
// starts with {token, rank} so strays and other jobs are turned away. With
// reuse_rank0_links, rank 0 is left out (its star links are already there).
Status Bootstrap::BuildMesh(Fd listener, bool reuse_rank0_links, Deadline deadline,
                            std::vector<Fd>* links) {
  links->clear();
  links->resize(size_);
  const int first = reuse_rank0_links ? 1 : 0;
  if (rank_ < first) return Status::Ok();
  const uint64_t token = job_id_ ^ (gather_round_ << 1);
  for (int p = first; p < rank_; ++p) {
    auto addr = ParseNumeric(roster_[p].address, roster_[p].mesh_port);
    if (!addr.ok()) return addr.status().WithContext(Describe(p));
    auto c = ConnectTo(*addr, deadline, /*retry=*/true);
    if (!c.ok()) return c.status().WithContext("control mesh to " + Describe(p));
    OCTET_RETURN_IF_ERROR(SendFrame(c->get(), kMeshHello,
                                    WireWriter().U64(token).U32(uint32_t(rank_)).str(), deadline,
                                    Describe(p)));
    (*links)[p] = std::move(*c);
  }
  int missing = size_ - 1 - rank_;
  while (missing > 0) {
    auto c = Accept(listener.get(), deadline);
    if (!c.ok()) {
      return DeadlineExceededError("control mesh: " + std::to_string(missing) +
                                   " higher rank(s) did not connect in time");
    }
    uint32_t kind = 0;
    std::string payload;
    const Deadline hello_deadline = Deadline::Min(deadline, Deadline::AfterMs(10000));
    if (!RecvFrame(c->get(), &kind, &payload, hello_deadline, "a mesh peer").ok() ||
        kind != kMeshHello) {
      continue;
    }
    WireReader rd(payload);
    const uint64_t t = rd.U64();
    const int p = static_cast<int>(rd.U32());
    if (!rd.ok() || t != token || p <= rank_ || p >= size_ || (*links)[p].valid()) continue;
    (*links)[p] = std::move(*c);
    --missing;
  }
  return Status::Ok();
}

Result<std::vector<Fd>> Bootstrap::OpenMesh(Deadline deadline) {
  std::vector<Fd> links(size_);
  if (size_ == 1) return links;
  auto listener = Listen(listen_address_, 2 * size_ + 16);
  Status local = listener.ok() ? Status::Ok() : listener.status();
  uint16_t port = 0;
  if (listener.ok()) {
    auto bound = LocalAddress(listener->get());
    if (bound.ok()) port = bound->port();
    else local = bound.status();
  }
  OCTET_ASSIGN_OR_RETURN(auto ports,
                         AllGatherChecked(local, WireWriter().U32(port).str(), deadline));
  // The round number of that all-gather makes this mesh's token unique.
  std::vector<RankInfo> saved = roster_;
  for (int p = 0; p < size_; ++p) {
    roster_[p].mesh_port = static_cast<uint16_t>(WireReader(ports[p]).U32());
  }
  Status s = BuildMesh(std::move(*listener), /*reuse_rank0_links=*/false, deadline, &links);
  roster_ = std::move(saved);
  OCTET_RETURN_IF_ERROR(s);
  return links;
}

Result<std::unique_ptr<Bootstrap>> Bootstrap::Duplicate(Deadline deadline) {
  OCTET_ASSIGN_OR_RETURN(std::vector<Fd> links, OpenMesh(deadline));
  std::unique_ptr<Bootstrap> b(new Bootstrap);
  b->rank_ = rank_;
  b->size_ = size_;
  b->job_id_ = job_id_ ^ RandomId();  // only mixes into mesh tokens; need not agree
  b->listen_address_ = listen_address_;
  b->roster_ = roster_;
  b->links_.resize(size_);
  for (int p = 0; p < size_; ++p) b->links_[p].fd = std::move(links[p]);
  // Agree on a job id so the duplicate's own meshes have matching tokens.
  OCTET_ASSIGN_OR_RETURN(auto ids, b->AllGather(WireWriter().U64(b->job_id_).str(), deadline));
  b->job_id_ = WireReader(ids[0]).U64();
  return b;
}

void Bootstrap::RecordFailure(int rank, Status status) {
  if (failure_.status.ok()) failure_ = PeerFailure{rank, std::move(status)};
}

void Bootstrap::Pump(int peer) {
  Link& l = links_[peer];
  if (l.closed || !l.fd.valid()) return;
  char buf[16384];
  for (;;) {
    const ssize_t n = ::recv(l.fd.get(), buf, sizeof buf, 0);
    if (n > 0) {
      l.inbuf.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    l.closed = true;
    l.close_error = n == 0 ? "its connection closed" : std::string(std::strerror(errno));
    break;
  }
  // Parse complete frames.
  size_t pos = 0;
  while (l.inbuf.size() - pos >= sizeof(FrameHeader)) {
    FrameHeader h;
    std::memcpy(&h, l.inbuf.data() + pos, sizeof h);
    if (h.magic != kFrameMagic || h.length > kMaxFrameBytes) {
      l.closed = true;
      l.close_error = "it sent garbage on the control connection";
      l.inbuf.clear();
      pos = 0;
      break;
    }
    if (l.inbuf.size() - pos - sizeof h < h.length) break;
    std::string payload = l.inbuf.substr(pos + sizeof h, h.length);
    pos += sizeof h + h.length;
    if (h.kind == kBye) {
      l.said_bye = true;
    } else if (h.kind == kWaitQuery) {
      SendFrameNow(l.fd.get(), kWaitAnswer, WireWriter().I64(waiting_on_).str());
    } else if (h.kind == kWaitAnswer) {
      l.last_answer = static_cast<int>(WireReader(payload).I64());
      ++l.answers;
    } else if (h.kind == kAbort) {
      WireReader rd(payload);
      int64_t blamed = rd.I64();
      // A peer names only ranks of this communicator (-1: unknown).
      if (blamed < -1 || blamed >= size_) blamed = -1;
      const StatusCode code = WireStatusCode(rd.U32());
      const std::string reason = rd.Str();
      RecordFailure(static_cast<int>(blamed),
                    Status(code, reason + " (reported by " + RankName(peer) + ")"));
    } else if (h.kind == kBlob) {
      l.frames.push_back(Frame{h.kind, std::move(payload)});
    }
  }
  l.inbuf.erase(0, pos);
  if (l.closed && !l.said_bye) {
    RecordFailure(peer, UnavailableError(Describe(peer) + " died: " + l.close_error));
  }
}

PeerFailure Bootstrap::CheckPeers() {
  if (!failure_.status.ok() || size_ == 1) return failure_;
  std::vector<pollfd> fds;
  std::vector<int> who;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_ || links_[p].closed || !links_[p].fd.valid()) continue;
    fds.push_back(pollfd{links_[p].fd.get(), POLLIN, 0});
    who.push_back(p);
  }
  if (!fds.empty() && ::poll(fds.data(), fds.size(), 0) > 0) {
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents) Pump(who[i]);
    }
  }
  return failure_;
}

int Bootstrap::AskWaitingOn(int peer, Deadline deadline) {
  if (peer < 0 || peer >= size_ || peer == rank_) return -2;
  Link& l = links_[peer];
  if (l.closed || !l.fd.valid()) return -2;
  const uint64_t before = l.answers;
  SendFrameNow(l.fd.get(), kWaitQuery, {});
  // Serve every link meanwhile: the peer asked may itself be asking us (or
  // others) the same question, and must get its answer.
  std::vector<pollfd> fds;
  std::vector<int> who;
  while (!deadline.expired()) {
    fds.clear();
    who.clear();
    for (int p = 0; p < size_; ++p) {
      if (p == rank_ || links_[p].closed || !links_[p].fd.valid()) continue;
      fds.push_back(pollfd{links_[p].fd.get(), POLLIN, 0});
      who.push_back(p);
    }
    ::poll(fds.data(), fds.size(), std::min(deadline.poll_timeout_ms(), 10));
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents) Pump(who[i]);
    }
    if (l.answers != before) return l.last_answer;
    if (l.closed) return -2;
  }
  return -2;
}

bool Bootstrap::PeerLeft(int peer) const {
  return peer >= 0 && peer < size_ && peer != rank_ && links_[peer].said_bye;
}

void Bootstrap::AppendPollFds(std::vector<pollfd>* fds) const {
  for (int p = 0; p < size_; ++p) {
    if (p == rank_ || links_[p].closed || !links_[p].fd.valid()) continue;
    fds->push_back(pollfd{links_[p].fd.get(), POLLIN, 0});
  }
}

void Bootstrap::BroadcastAbort(int failed_rank, const Status& why) {
  const std::string payload =
      WireWriter().I64(failed_rank).U32(uint32_t(why.code())).Str(why.message()).str();
  for (int p = 0; p < size_; ++p) {
    if (p == rank_ || p == failed_rank || links_[p].closed || !links_[p].fd.valid()) continue;
    SendFrameNow(links_[p].fd.get(), kAbort, payload);
  }
}

Result<std::vector<std::string>> Bootstrap::AllGather(const std::string& mine, Deadline deadline) {
  std::vector<std::string> out(size_);
  out[rank_] = mine;
  if (size_ == 1) return out;
  if (!failure_.status.ok()) return failure_.status;
  const uint64_t round = ++gather_round_;
  const std::string frame = EncodeFrame(kBlob, WireWriter().U64(round).Str(mine).str());
  std::vector<size_t> sent(size_, 0);
  std::vector<bool> have(size_, false);
  have[rank_] = true;
  sent[rank_] = frame.size();
  for (;;) {
    // Take blobs of this round that already arrived.
    bool all = true;
    for (int p = 0; p < size_; ++p) {
      if (have[p]) continue;
      Link& l = links_[p];
      if (!l.frames.empty()) {
        WireReader rd(l.frames.front().payload);
        const uint64_t r = rd.U64();
        std::string blob = rd.Str();
        if (!rd.ok() || r != round) {
          return InternalError("control mesh out of step with " + Describe(p) + " (round " +
                               std::to_string(r) + ", expected " + std::to_string(round) + ")");
        }
        out[p] = std::move(blob);
        have[p] = true;
        l.frames.pop_front();
        continue;
      }
      all = false;
      if (l.closed) {
        if (!failure_.status.ok()) return failure_.status;
        return UnavailableError(Describe(p) + (l.said_bye ? " closed its communicator"
                                                           : " died: " + l.close_error));
      }
    }
    if (!failure_.status.ok()) return failure_.status;
    bool sends_done = true;
    for (int p = 0; p < size_; ++p) sends_done = sends_done && sent[p] == frame.size();
    if (all && sends_done) return out;
    if (deadline.expired()) {
      std::string who;
      for (int p = 0; p < size_; ++p) {
        if (!have[p]) who += (who.empty() ? "" : ", ") + RankName(p);
      }
      return DeadlineExceededError("set-up exchange: no answer from " +
                                   (who.empty() ? std::string("peers (sending)") : who) +
                                   " in time");
    }
    std::vector<pollfd> fds;
    std::vector<int> who;
    for (int p = 0; p < size_; ++p) {
      if (p == rank_ || links_[p].closed) continue;
      short ev = POLLIN;
      if (sent[p] < frame.size()) ev |= POLLOUT;
      fds.push_back(pollfd{links_[p].fd.get(), ev, 0});
      who.push_back(p);
    }
    int pr = ::poll(fds.data(), fds.size(), std::min(deadline.poll_timeout_ms(), 100));
    if (pr < 0 && errno != EINTR) return UnavailableError("poll: " + std::string(strerror(errno)));
    for (size_t i = 0; i < fds.size(); ++i) {
      const int p = who[i];
      if (fds[i].revents & POLLOUT) {
        const ssize_t n = ::send(fds[i].fd, frame.data() + sent[p], frame.size() - sent[p],
                                 MSG_NOSIGNAL);
        if (n > 0) sent[p] += static_cast<size_t>(n);
        else if (n < 0 && errno != EAGAIN && errno != EINTR) {
          sent[p] = frame.size();  // the read side will report the broken link
        }
      }
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) Pump(p);
    }
  }
}

Result<std::vector<std::string>> Bootstrap::AllGatherChecked(const Status& mine_status,
                                                             const std::string& mine,
                                                             Deadline deadline) {
  WireWriter w;
  w.U32(static_cast<uint32_t>(mine_status.code())).Str(mine_status.message()).Str(mine);
  OCTET_ASSIGN_OR_RETURN(std::vector<std::string> all, AllGather(w.str(), deadline));
  std::vector<std::string> out(size_);
  for (int p = 0; p < size_; ++p) {
    WireReader rd(all[p]);
    const auto code = static_cast<StatusCode>(rd.U32());
    std::string message = rd.Str();
    out[p] = rd.Str();
    if (!rd.ok()) return DataLossError(Describe(p) + " sent a malformed set-up message");
    if (code != StatusCode::kOk) return Status(code, RankName(p) + ": " + message);
  }
  return out;
}

}  // namespace octet::collectives
