// TCP transport: a full mesh of non-blocking TCP_NODELAY connections (one per
// pair of ranks, separate from the control mesh), driven by one poll() loop.
//
// Frames: a 16-byte header {kind, step, bytes} and the payload.
//   PUBLISH  a one-shot contribution; lands in the sender's slot of parity
//            step & 1 at the receiver (the one-step-ahead invariant of
//            transport.h keeps two slots enough).
//   MESSAGE  a point-to-point message; handed to the posted receive in
//            chunk_bytes pieces, or, if the receiver has not posted it yet,
//            buffered whole so that no connection ever stalls.
// Sends go straight from the caller's buffer (writev); FinishPublish and
// SendRecv return only when the bytes have left it.
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include "bootstrap.h"
#include "octet/base/deadline.h"
#include "transport.h"

namespace octet::collectives {

namespace {

enum FrameKind : uint32_t { kPublish = 0x50554231, kMessage = 0x4d534731 };

// Per-peer input buffer: a small frame (header and payload) arrives with one
// recv(); bodies at least this large are received in place instead.
constexpr size_t kInBufBytes = 64 << 10;
// How a Drive() wait passes the time before it sleeps in poll(), in three
// phases counted from the start of the wait (the shm waiter's rule, wait.cpp):
//  1. busy-poll (poll with timeout 0) for kTcpSpinNs, unless this host has
//     more ranks than CPUs: a peer's answer is a round trip, shorter than a
//     sleep and wake-up (2 ranks on 2 idle cores, 8-byte one-shot p50: 23 us
//     blocking at once, 8.3 us with the spin, OpenMPI's TCP BTL 8.4 us);
//  2. poll with timeout 0 and sched_yield() between polls until kTcpYieldNs:
//     with more ranks than CPUs the peer we wait for may need this very CPU,
//     and a yield hands it over without letting the CPU go idle. Blocking at
//     once instead costs a wake-up per message, and on a VM an idle vCPU's
//     wake-up is an IPI through the hypervisor: 4 ranks on 2 cores, 8-byte
//     one-shot blocked at once at ~2x OpenMPI's time (its ob1 progress loop
//     polls and yields the same way while oversubscribed);
//  3. block in poll() in slices of at most 100 ms until the peer timeout.
// So a wait burns at most kTcpYieldNs of CPU before it sleeps. A yield on
// Linux's fair scheduler passes the CPU only within the caller's scheduling
// group, but a CPU-bound task there (a compile in the same session, a
// compute thread of the same process) may then run a whole slice. So a
// sched_yield() that takes over kYieldStallNs (a stall) turns yielding off for
// a while, and waits block at once as before: for kFirstBackoffNs, doubling
// with every stall up to kMaxBackoffNs, and back to kFirstBackoffNs after
// kCleanYieldWaits waits that yielded without a stall. Stalls also come
// without such a task (ranks sharing a core on a VM: a few in a thousand
// waits, in bursts, and during large steps), and the rule before (a whole
// second of blocking at every stall) kept 4 ranks on 2 cores blocking most of
// the time. `octet_bench_collectives --ranks 4 --transports tcp`, the two
// builds alternating: one-shot p50 at 8 B-8 KiB 25-57 us against 82-120 us
// (OpenMPI's TCP 35-61 us); next to two niced CPU-bound loops in the same
// group (`--max-bytes 8 --iters 1000`) 2.0-2.2 s in all against 1.9-2.2 s,
// and 5.7 s with no back-off. Measured before that, next to a niced build:
// without a back-off p99 3-4 ms and 2.3-4.3 s in all against 0.2 ms and
// 1.6-2.0 s blocking at once.
constexpr int64_t kTcpSpinNs = 10'000;
constexpr int64_t kTcpYieldNs = 50'000;
constexpr int64_t kYieldStallNs = 1'000'000;
constexpr int64_t kFirstBackoffNs = 5'000'000;
constexpr int64_t kMaxBackoffNs = 200'000'000;
constexpr int kCleanYieldWaits = 64;

struct FrameHeader {
  uint32_t kind;
  uint32_t seq;    // PUBLISH: step number (low 32 bits)
  uint64_t bytes;  // payload size
};
static_assert(sizeof(FrameHeader) == 16);

class TcpTransport final : public Transport {
 public:
  TcpTransport(int rank, int size, const TransportConfig& config, std::vector<Fd> links, bool spin)
      : Transport(rank, size, config.slot_bytes),
        spin_(spin),
        chunk_bytes_(config.chunk_bytes),
        peers_(size),
        staging_(new uint8_t[config.chunk_bytes]) {
    for (int p = 0; p < size; ++p) {
      if (p == rank) continue;
      peers_[p].fd = std::move(links[p]);
      // Uninitialised: pages are only committed when a contribution lands.
      peers_[p].slot[0].reset(new uint8_t[slot_bytes_]);
      peers_[p].slot[1].reset(new uint8_t[slot_bytes_]);
      peers_[p].inbuf.reset(new uint8_t[kInBufBytes]);
    }
  }

  TransportKind kind() const override { return TransportKind::kTcp; }

  Status Publish(uint64_t seq, const PublishSpec& spec, Waiter& w) override {
    self_spec_ = spec;
    for (int i = 1; i < size_; ++i) {
      const int p = (rank_ + i) % size_;
      Peer& peer = peers_[p];
      const auto* base = static_cast<const uint8_t*>(spec.base);
      if (spec.per_peer_block) {
        QueueFrame(peer, FrameHeader{kPublish, static_cast<uint32_t>(seq), spec.block_bytes});
        peer.publish_payload_at = peer.queued_total;
        QueueBytes(peer, base + p * spec.block_stride, spec.block_bytes);
      } else {
        QueueFrame(peer, FrameHeader{kPublish, static_cast<uint32_t>(seq), spec.bytes()});
        peer.publish_payload_at = peer.queued_total;
        for (int b = 0; b < spec.blocks; ++b) {
          QueueBytes(peer, base + b * spec.block_stride, spec.block_bytes);
        }
      }
      OCTET_RETURN_IF_ERROR(Flush(p, w));
    }
    return Status::Ok();
  }

  Result<const uint8_t*> WaitPublished(int peer, uint64_t seq, size_t expect_bytes,
                                       Waiter& w) override {
    if (peer == rank_) {
      const auto* base = static_cast<const uint8_t*>(self_spec_.base);
      if (self_spec_.per_peer_block) {
        if (self_spec_.block_bytes != expect_bytes) {
          return SizeMismatch(w, peer, self_spec_.block_bytes, expect_bytes, "one-shot step");
        }
        return base + rank_ * self_spec_.block_stride;
      }
      if (self_spec_.bytes() != expect_bytes) {
        return SizeMismatch(w, peer, self_spec_.bytes(), expect_bytes, "one-shot step");
      }
      if (self_spec_.blocks > 1) {
        return InternalError("tcp: a multi-block contribution cannot be read back in place");
      }
      return base;
    }
    Peer& p = peers_[peer];
    const int s = static_cast<int>(seq & 1);
    const uint32_t want = static_cast<uint32_t>(seq);
    OCTET_RETURN_IF_ERROR(Drive(
        w, [&] { return p.slot_seq[s] == want; }, peer, "its one-shot data"));
    if (p.slot_len[s] != expect_bytes) {
      return SizeMismatch(w, peer, p.slot_len[s], expect_bytes, "one-shot step");
    }
    return p.slot[s].get();
  }

  bool lands_in_pieces() const override { return true; }

  Result<const uint8_t*> WaitPublishedPrefix(int peer, uint64_t seq, size_t expect_bytes,
                                             size_t landed_bytes, Waiter& w) override {
    if (peer == rank_ || landed_bytes >= expect_bytes) {
      return WaitPublished(peer, seq, expect_bytes, w);
    }
    Peer& p = peers_[peer];
    const int s = static_cast<int>(seq & 1);
    const uint32_t want = static_cast<uint32_t>(seq);
    // The frame of step `seq` being read now (its header known).
    auto reading = [&] { return p.in == Peer::In::kPublish && p.hdr.seq == want; };
    OCTET_RETURN_IF_ERROR(Drive(
        w,
        [&] {
          return p.slot_seq[s] == want || (reading() && p.hdr.bytes - p.body_left >= landed_bytes);
        },
        peer, "its one-shot data"));
    const uint64_t theirs = p.slot_seq[s] == want ? p.slot_len[s] : p.hdr.bytes;
    if (theirs != expect_bytes) return SizeMismatch(w, peer, theirs, expect_bytes, "one-shot step");
    return p.slot[s].get();
  }

  Status FinishPublishPrefix(uint64_t seq, size_t bytes, Waiter& w) override {
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      Peer& peer = peers_[p];
      OCTET_RETURN_IF_ERROR(Drive(
          w,
          [&] {
            return peer.iov_next == peer.iov.size() ||
                   peer.sent_total >= peer.publish_payload_at + bytes;
          },
          p, "it to take our data"));
    }
    return Status::Ok();
  }

  Status FinishPublish(uint64_t seq, Waiter& w) override {
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      Peer& peer = peers_[p];
      OCTET_RETURN_IF_ERROR(Drive(
          w, [&] { return peer.iov_next == peer.iov.size(); }, p, "it to take our data"));
    }
    return Status::Ok();
  }

  Status SendRecv(int send_peer, const void* send_data, size_t send_bytes, int recv_peer,
                  size_t recv_bytes, PieceFn on_piece, Waiter& w) override {
    if (send_peer >= 0) {
      Peer& sp = peers_[send_peer];
      QueueFrame(sp, FrameHeader{kMessage, 0, send_bytes});
      QueueBytes(sp, static_cast<const uint8_t*>(send_data), send_bytes);
      OCTET_RETURN_IF_ERROR(Flush(send_peer, w));
    }
    if (recv_peer >= 0) {
      Recv& r = recv_;
      r = Recv{};
      r.peer = recv_peer;
      r.bytes = recv_bytes;
      r.on_piece = &on_piece;
      r.active = true;
      OCTET_RETURN_IF_ERROR(MatchBuffered(w));
    }
    auto sent = [&] {
      return send_peer < 0 || peers_[send_peer].iov_next == peers_[send_peer].iov.size();
    };
    Status s = Drive(
        w, [&] { return !recv_.active && sent(); }, recv_.active ? recv_peer : send_peer,
        recv_.active ? "its point-to-point data" : "it to take point-to-point data");
    recv_.active = false;
    recv_.on_piece = nullptr;
    return s;
  }

 private:
  struct Peer {
    Fd fd;
    bool closed = false;
    // Outgoing: iovecs into callers' buffers and the headers stored here.
    std::deque<FrameHeader> headers;
    std::vector<iovec> iov;
    size_t iov_next = 0;
    // Bytes ever queued / sent on this connection, and where the payload of
    // the latest PUBLISH starts in that count (FinishPublishPrefix).
    uint64_t queued_total = 0, sent_total = 0, publish_payload_at = 0;
    // Incoming frame being parsed.
    enum class In { kHeader, kPublish, kMessage, kBuffered } in = In::kHeader;
    FrameHeader hdr{};
    size_t hdr_got = 0;
    uint8_t* body = nullptr;  // kPublish / kBuffered destination
    size_t body_left = 0;
    // Bytes received but not parsed yet: [in_begin, in_end) of inbuf.
    std::unique_ptr<uint8_t[]> inbuf;
    size_t in_begin = 0, in_end = 0;
    // One-shot slots by step parity, with the step and size that filled them.
    std::unique_ptr<uint8_t[]> slot[2];
    uint32_t slot_seq[2] = {0, 0};
    uint64_t slot_len[2] = {0, 0};
    // Messages that arrived before their receive was posted, oldest first.
    std::deque<std::vector<uint8_t>> buffered;
    std::vector<uint8_t> partial;  // the one being read into kBuffered
  };
  // The receive posted by the current SendRecv.
  struct Recv {
    bool active = false;
    bool started = false;  // its frame header has been read
    int peer = -1;
    size_t bytes = 0;
    size_t got = 0;        // bytes read into staging or delivered
    size_t delivered = 0;  // bytes passed to on_piece
    const PieceFn* on_piece = nullptr;
  };

  void QueueFrame(Peer& p, const FrameHeader& h) {
    p.headers.push_back(h);
    p.iov.push_back(iovec{&p.headers.back(), sizeof(FrameHeader)});
    p.queued_total += sizeof(FrameHeader);
  }
  void QueueBytes(Peer& p, const uint8_t* data, size_t n) {
    if (n > 0) p.iov.push_back(iovec{const_cast<uint8_t*>(data), n});
    p.queued_total += n;
  }

  // Writes what the socket takes now. Returns an error only for a broken
  // connection.
  Status Flush(int peer, Waiter& w, bool* moved = nullptr) {
    Peer& p = peers_[peer];
    while (p.iov_next < p.iov.size()) {
      const int cnt = static_cast<int>(std::min<size_t>(p.iov.size() - p.iov_next, 64));
      msghdr m{};
      m.msg_iov = &p.iov[p.iov_next];
      m.msg_iovlen = cnt;
      const ssize_t n = ::sendmsg(p.fd.get(), &m, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return Status::Ok();
        return Broken(peer, w, std::strerror(errno));
      }
      if (moved && n > 0) *moved = true;
      p.sent_total += static_cast<uint64_t>(n);
      size_t left = static_cast<size_t>(n);
      while (left > 0) {
        iovec& v = p.iov[p.iov_next];
        if (left >= v.iov_len) {
          left -= v.iov_len;
          ++p.iov_next;
        } else {
          v.iov_base = static_cast<uint8_t*>(v.iov_base) + left;
          v.iov_len -= left;
          left = 0;
        }
      }
    }
    p.iov.clear();
    p.iov_next = 0;
    p.headers.clear();
    return Status::Ok();
  }

  // Hands the oldest buffered message of the posted receive's peer to it.
  Status MatchBuffered(Waiter& w) {
    Recv& r = recv_;
    if (!r.active || r.started) return Status::Ok();
    Peer& p = peers_[r.peer];
    if (p.buffered.empty()) return Status::Ok();
    std::vector<uint8_t> msg = std::move(p.buffered.front());
    p.buffered.pop_front();
    if (msg.size() != r.bytes) {
      return SizeMismatch(w, r.peer, msg.size(), r.bytes, "point-to-point message");
    }
    for (size_t off = 0; off < msg.size(); off += chunk_bytes_) {
      const size_t len = std::min(chunk_bytes_, msg.size() - off);
      OCTET_RETURN_IF_ERROR((*r.on_piece)(off, msg.data() + off, len));
    }
    r.active = false;
    return Status::Ok();
  }

  // Where the body of the frame being read goes next, and how much of it.
  std::pair<uint8_t*, size_t> BodyWindow(Peer& p) {
    if (p.in == Peer::In::kMessage) {
      const size_t fill = recv_.got - recv_.delivered;
      return {staging_.get() + fill, std::min(chunk_bytes_ - fill, recv_.bytes - recv_.got)};
    }
    return {p.body, p.body_left};
  }

  // Records that `n` body bytes landed at BodyWindow(p).
  Status BodyAdvanced(Peer& p, size_t n, Waiter& w) {
    switch (p.in) {
      case Peer::In::kPublish:
        p.body += n;
        p.body_left -= n;
        if (p.body_left == 0) FinishPublishFrame(p);
        return Status::Ok();
      case Peer::In::kBuffered:
        p.body += n;
        p.body_left -= n;
        if (p.body_left == 0) {
          p.buffered.push_back(std::move(p.partial));
          p.partial = {};
          p.in = Peer::In::kHeader;
          return MatchBuffered(w);
        }
        return Status::Ok();
      case Peer::In::kMessage:
        recv_.got += n;
        return DeliverStaged(p);
      case Peer::In::kHeader:
        break;
    }
    return Status::Ok();
  }

  // Parses what sits in the peer's input buffer: headers, and body bytes
  // copied to where they belong.
  Status Consume(int peer, Waiter& w) {
    Peer& p = peers_[peer];
    while (p.in_begin < p.in_end) {
      const size_t avail = p.in_end - p.in_begin;
      const uint8_t* src = p.inbuf.get() + p.in_begin;
      if (p.in == Peer::In::kHeader) {
        const size_t k = std::min(avail, sizeof p.hdr - p.hdr_got);
        std::memcpy(reinterpret_cast<uint8_t*>(&p.hdr) + p.hdr_got, src, k);
        p.hdr_got += k;
        p.in_begin += k;
        if (p.hdr_got == sizeof p.hdr) OCTET_RETURN_IF_ERROR(StartFrame(peer, w));
        continue;
      }
      auto [dst, room] = BodyWindow(p);
      const size_t k = std::min(avail, room);
      if (k) std::memcpy(dst, src, k);
      p.in_begin += k;
      OCTET_RETURN_IF_ERROR(BodyAdvanced(p, k, w));
    }
    p.in_begin = p.in_end = 0;
    return Status::Ok();
  }

  // Reads everything available from `peer` into slots, the posted receive or
  // the buffer of early messages. Small frames arrive whole with one recv()
  // into the peer's input buffer; a large body is received in place.
  // A recv() that returns less than asked has emptied the socket for now: the
  // loop stops there instead of spending another syscall on EAGAIN (bytes
  // that arrive later show up in the next poll()).
  Status Read(int peer, Waiter& w, bool* moved) {
    Peer& p = peers_[peer];
    for (bool drained = false;;) {
      OCTET_RETURN_IF_ERROR(Consume(peer, w));
      if (drained) return Status::Ok();
      uint8_t* dst = p.inbuf.get();
      size_t want = kInBufBytes;
      bool direct = false;
      if (p.in != Peer::In::kHeader) {
        auto [body, room] = BodyWindow(p);
        if (room >= kInBufBytes) {
          dst = body;
          want = room;
          direct = true;
        }
      }
      const ssize_t n = ::recv(p.fd.get(), dst, want, 0);
      if (n <= 0) {
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Status::Ok();
        // The connection ended. That is only this rank's problem if it still
        // needs the peer (a frame half read, bytes to send, a posted receive);
        // a peer that finished and closed cleanly is fine, and one that died
        // is reported by the control mesh.
        p.closed = true;
        const bool needed = p.in != Peer::In::kHeader || p.hdr_got > 0 ||
                            p.iov_next < p.iov.size() || (recv_.active && recv_.peer == peer);
        if (!needed) return Status::Ok();
        return Broken(peer, w, n == 0 ? "connection closed" : std::strerror(errno));
      }
      *moved = true;
      drained = static_cast<size_t>(n) < want;
      if (direct) {
        OCTET_RETURN_IF_ERROR(BodyAdvanced(p, static_cast<size_t>(n), w));
      } else {
        p.in_begin = 0;
        p.in_end = static_cast<size_t>(n);
      }
    }
  }

  Status StartFrame(int peer, Waiter& w) {
    Peer& p = peers_[peer];
    p.hdr_got = 0;
    if (p.hdr.kind == kPublish) {
      if (p.hdr.bytes > slot_bytes_) {
        return SizeMismatch(w, peer, p.hdr.bytes, slot_bytes_, "one-shot step (over the slot)");
      }
      p.in = Peer::In::kPublish;
      p.body = p.slot[p.hdr.seq & 1].get();
      p.body_left = p.hdr.bytes;
      if (p.body_left == 0) FinishPublishFrame(p);
      return Status::Ok();
    }
    if (p.hdr.kind == kMessage) {
      Recv& r = recv_;
      if (r.active && !r.started && r.peer == peer && p.buffered.empty()) {
        if (p.hdr.bytes != r.bytes) {
          return SizeMismatch(w, peer, p.hdr.bytes, r.bytes, "point-to-point message");
        }
        r.started = true;
        p.in = Peer::In::kMessage;
        return DeliverStaged(p);
      }
      p.partial.assign(p.hdr.bytes, 0);
      p.body = p.partial.data();
      p.body_left = p.hdr.bytes;
      p.in = Peer::In::kBuffered;
      if (p.body_left == 0) {
        p.buffered.push_back({});
        p.in = Peer::In::kHeader;
        return MatchBuffered(w);
      }
      return Status::Ok();
    }
    return Broken(peer, w, "it sent garbage on the data connection");
  }

  void FinishPublishFrame(Peer& p) {
    const int s = static_cast<int>(p.hdr.seq & 1);
    p.slot_seq[s] = p.hdr.seq;
    p.slot_len[s] = p.hdr.bytes;
    p.in = Peer::In::kHeader;
  }

  // Passes a full staging buffer (or the message's last bytes) to on_piece.
  Status DeliverStaged(Peer& p) {
    Recv& r = recv_;
    const size_t fill = r.got - r.delivered;
    if (fill == chunk_bytes_ || r.got == r.bytes) {
      if (fill > 0) OCTET_RETURN_IF_ERROR((*r.on_piece)(r.delivered, staging_.get(), fill));
      r.delivered = r.got;
    }
    if (r.got == r.bytes) {
      r.active = false;
      p.in = Peer::In::kHeader;
    }
    return Status::Ok();
  }

  Status Broken(int peer, Waiter& w, const std::string& why) {
    peers_[peer].closed = true;
    // A peer that died shows up on the control mesh as well; prefer its
    // verdict (it knows about aborts reported by others).
    OCTET_RETURN_IF_ERROR(w.CheckPeers());
    w.Blame(peer);
    if (w.bootstrap() && w.bootstrap()->PeerLeft(peer)) return w.LeftError(peer, "its data");
    const std::string who =
        w.bootstrap() ? w.bootstrap()->Describe(peer) : "rank " + std::to_string(peer);
    return UnavailableError(who + " died or became unreachable: tcp " + why + " (" +
                            w.label().ToString() + ")");
  }

  // Moves bytes on every connection until ready() holds. Gives up when no
  // byte moves for the peer timeout (blaming `peer`) or the control mesh
  // reports a failure.
  template <typename Ready>
  Status Drive(Waiter& w, Ready ready, int peer, const char* what) {
    const int64_t start = NowNs();
    int64_t last_progress = start;
    std::vector<pollfd>& fds = pollfds_;
    struct Mark {
      Waiter& w;
      ~Mark() { w.SetWaitingOn(-1); }
    } mark{w};
    w.SetWaitingOn(peer);
    bool yielded = false;  // this wait has yielded (counted once in clean_yield_waits_)
    for (;;) {
      if (ready()) return Status::Ok();
      fds.clear();
      for (int p = 0; p < size_; ++p) {
        if (p == rank_) continue;
        Peer& pr = peers_[p];
        if (pr.closed) {
          if (p == peer) return Broken(p, w, "connection closed");
          continue;
        }
        short ev = POLLIN;
        if (pr.iov_next < pr.iov.size()) ev |= POLLOUT;
        fds.push_back(pollfd{pr.fd.get(), ev, 0});
      }
      const size_t data_fds = fds.size();
      if (w.bootstrap()) w.bootstrap()->AppendPollFds(&fds);
      const int64_t left_ns = last_progress + w.peer_timeout_ns() - NowNs();
      if (left_ns <= 0) return w.Silence(peer, what);
      const int64_t waited = NowNs() - start;
      const bool spinning = spin_ && waited < kTcpSpinNs;
      const bool yielding = !spinning && waited < kTcpYieldNs && start >= no_yield_until_ns_;
      if (yielding) {
        const int64_t before = NowNs();
        ::sched_yield();
        const int64_t after = NowNs();
        if (after - before > kYieldStallNs) {
          no_yield_until_ns_ = after + backoff_ns_;
          backoff_ns_ = std::min(2 * backoff_ns_, kMaxBackoffNs);
          clean_yield_waits_ = 0;
        } else if (!yielded && ++clean_yield_waits_ >= kCleanYieldWaits) {
          backoff_ns_ = kFirstBackoffNs;
        }
        yielded = true;
      }
      const int timeout_ms = spinning || yielding
                                 ? 0
                                 : static_cast<int>(std::min<int64_t>(left_ns / 1'000'000 + 1, 100));
      const int pr = ::poll(fds.data(), fds.size(), timeout_ms);
      if (pr < 0 && errno != EINTR)
        return UnavailableError(std::string("poll: ") + strerror(errno));
      if (pr <= 0) continue;
      bool moved = false;
      size_t i = 0;
      for (int p = 0; p < size_ && i < data_fds; ++p) {
        if (p == rank_ || peers_[p].closed) continue;
        const short re = fds[i++].revents;
        if (re & POLLOUT) OCTET_RETURN_IF_ERROR(Flush(p, w, &moved));
        if (re & (POLLIN | POLLHUP | POLLERR)) OCTET_RETURN_IF_ERROR(Read(p, w, &moved));
      }
      for (; i < fds.size(); ++i) {
        if (fds[i].revents) {
          OCTET_RETURN_IF_ERROR(w.CheckPeers());
          break;
        }
      }
      if (moved) last_progress = NowNs();
    }
  }

  bool spin_;  // busy-poll before yielding (no more ranks on this host than CPUs)
  int64_t no_yield_until_ns_ = 0;  // a yield stalled: waits block at once until then
  int64_t backoff_ns_ = kFirstBackoffNs;  // how long the next stall turns yielding off
  int clean_yield_waits_ = 0;             // waits that yielded since the last stall
  size_t chunk_bytes_;
  std::vector<Peer> peers_;
  std::unique_ptr<uint8_t[]> staging_;
  Recv recv_;
  PublishSpec self_spec_;
  std::vector<pollfd> pollfds_;
};

}  // namespace

Result<std::unique_ptr<Transport>> ConnectTcp(Bootstrap& bootstrap, const TransportConfig& config) {
  auto links = bootstrap.OpenMesh(Deadline::AfterMs(config.connect_timeout_ms));
  if (!links.ok()) return links.status().WithContext("tcp transport");
  const unsigned cpus = std::max(1u, std::thread::hardware_concurrency());
  const bool oversubscribed = static_cast<unsigned>(bootstrap.LocalRankCount()) > cpus;
  return std::unique_ptr<Transport>(new TcpTransport(bootstrap.rank(), bootstrap.size(), config,
                                                     std::move(*links), !oversubscribed));
}

}  // namespace octet::collectives
