// Shared-memory transport: ranks on one host share one mapped region.
//
// Region layout (every part 64-byte aligned, slots 4 KiB aligned):
//   Header
//   PublishCtl[n]          step flag of each rank (own cache line)
//   Bell[n]                futex doorbell + "asleep" flag of each rank
//   ChannelCtl[n][n]       head/tail counters of the point-to-point channel src->dst
//   publish slots[n][2]    slot_bytes each: rank r's contribution to steps of parity s
//   channel slots[n][n][K] (64-byte piece header + chunk_bytes) each
//
// Fast path: plain stores into the slot, then a release store of a counter;
// the reader's acquire load of that counter orders its reads after the data.
// No syscalls unless a peer is asleep on its doorbell.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>

#include "bootstrap.h"
#include "octet/base/deadline.h"
#include "transport.h"
#include "wire.h"

namespace octet::collectives {

namespace {

constexpr uint64_t kShmMagic = 0x31534d4854434f;  // "OCTHMS1"
constexpr uint32_t kChannelSlots = 4;
constexpr size_t kPieceHeaderBytes = 64;

struct alignas(64) Header {
  uint64_t magic;
  uint64_t region_bytes;
  uint64_t slot_bytes;
  uint64_t chunk_bytes;
  uint32_t world_size;
  std::atomic<uint32_t> attached;
};

struct alignas(64) PublishCtl {
  std::atomic<uint32_t> seq;  // low 32 bits of the last step this rank contributed to
  uint32_t unused;
  uint64_t bytes[2];          // contribution size per slot parity
  uint64_t block_bytes[2];    // per-peer block size, 0 when peers read the whole message
};

struct alignas(64) Bell {
  std::atomic<uint32_t> word;
  std::atomic<uint32_t> sleeping;
};

struct alignas(64) ChannelCtl {
  std::atomic<uint32_t> head;  // pieces written by the sender
  alignas(64) std::atomic<uint32_t> tail;  // pieces consumed by the receiver
};

struct PieceHeader {
  uint64_t message;    // per-pair message number, from 1
  uint64_t msg_bytes;  // whole message size
  uint64_t offset;     // of this piece in the message
  uint64_t len;        // of this piece
};
static_assert(sizeof(PieceHeader) <= kPieceHeaderBytes);

size_t AlignUp(size_t v, size_t a) { return (v + a - 1) / a * a; }

// True when step `have` is at or past step `want` (32-bit wrapping).
inline bool Reached(uint32_t have, uint32_t want) {
  return static_cast<int32_t>(have - want) >= 0;
}

struct Layout {
  size_t publish_ctl, bells, channel_ctl, publish_slots, channels, total;
  size_t slot_bytes, channel_slot_bytes;
  Layout(int n, size_t slot, size_t chunk) {
    const size_t nn = static_cast<size_t>(n);
    slot_bytes = AlignUp(slot, 4096);
    channel_slot_bytes = AlignUp(kPieceHeaderBytes + chunk, 4096);
    publish_ctl = AlignUp(sizeof(Header), 4096);
    bells = publish_ctl + nn * sizeof(PublishCtl);
    channel_ctl = bells + nn * sizeof(Bell);
    publish_slots = AlignUp(channel_ctl + nn * nn * sizeof(ChannelCtl), 4096);
    channels = publish_slots + nn * 2 * slot_bytes;
    total = channels + nn * nn * kChannelSlots * channel_slot_bytes;
  }
};

class ShmTransport final : public Transport {
 public:
  ShmTransport(int rank, int size, const TransportConfig& config, uint8_t* base, size_t bytes)
      : Transport(rank, size, config.slot_bytes),
        layout_(size, config.slot_bytes, config.chunk_bytes),
        chunk_bytes_(config.chunk_bytes),
        base_(base),
        mapped_bytes_(bytes),
        sent_messages_(size, 0),
        received_messages_(size, 0) {}

  ~ShmTransport() override { ::munmap(base_, mapped_bytes_); }

  TransportKind kind() const override { return TransportKind::kShm; }

  Status Publish(uint64_t seq, const PublishSpec& spec, Waiter& w) override {
    const int s = static_cast<int>(seq & 1);
    uint8_t* dst = PublishSlot(rank_, s);
    const auto* src = static_cast<const uint8_t*>(spec.base);
    for (int b = 0; b < spec.blocks; ++b) {
      std::memcpy(dst + b * spec.block_bytes, src + b * spec.block_stride, spec.block_bytes);
    }
    PublishCtl& ctl = Ctl(rank_);
    ctl.bytes[s] = spec.bytes();
    ctl.block_bytes[s] = spec.per_peer_block ? spec.block_bytes : 0;
    // seq_cst: the store must be ordered before the loads of the peers'
    // "asleep" flags below (see Doorbell).
    ctl.seq.store(static_cast<uint32_t>(seq), std::memory_order_seq_cst);
    for (int p = 0; p < size_; ++p) {
      if (p != rank_) RingDoorbell(BellOf(p));
    }
    return Status::Ok();
  }

  Result<const uint8_t*> WaitPublished(int peer, uint64_t seq, size_t expect_bytes,
                                       Waiter& w) override {
    PublishCtl& ctl = Ctl(peer);
    const uint32_t want = static_cast<uint32_t>(seq);
    if (peer != rank_) {
      const Doorbell bell = BellOf(rank_);
      OCTET_RETURN_IF_ERROR(w.Wait(
          [&] { return Reached(ctl.seq.load(std::memory_order_acquire), want); }, peer,
          "its one-shot data", &bell));
    }
    const int s = static_cast<int>(seq & 1);
    const uint8_t* data = PublishSlot(peer, s);
    size_t bytes = ctl.bytes[s];
    if (ctl.block_bytes[s] != 0) {
      data += static_cast<size_t>(rank_) * ctl.block_bytes[s];
      bytes = ctl.block_bytes[s];
    }
    if (bytes != expect_bytes) return SizeMismatch(w, peer, bytes, expect_bytes, "one-shot step");
    return data;
  }

  Status SendRecv(int send_peer, const void* send_data, size_t send_bytes, int recv_peer,
                  size_t recv_bytes, PieceFn on_piece, Waiter& w) override {
    // Sender state.
    const auto* src = static_cast<const uint8_t*>(send_data);
    size_t sent = 0;
    bool send_done = send_peer < 0;
    uint64_t send_message = 0;
    ChannelCtl* out = nullptr;
    if (!send_done) {
      send_message = ++sent_messages_[send_peer];
      out = &Channel(rank_, send_peer);
    }
    // Receiver state.
    size_t received = 0;
    bool recv_done = recv_peer < 0;
    uint64_t recv_message = 0;
    ChannelCtl* in = nullptr;
    if (!recv_done) {
      recv_message = ++received_messages_[recv_peer];
      in = &Channel(recv_peer, rank_);
    }
    const Doorbell my_bell = BellOf(rank_);
    while (!send_done || !recv_done) {
      bool moved = false;
      if (!send_done) {
        uint32_t head = out->head.load(std::memory_order_relaxed);
        while (!send_done &&
               head - out->tail.load(std::memory_order_acquire) < kChannelSlots) {
          uint8_t* slot = ChannelSlot(rank_, send_peer, head % kChannelSlots);
          const size_t len = std::min(chunk_bytes_, send_bytes - sent);
          PieceHeader h{send_message, send_bytes, sent, len};
          std::memcpy(slot, &h, sizeof h);
          if (len) std::memcpy(slot + kPieceHeaderBytes, src + sent, len);
          sent += len;
          out->head.store(++head, std::memory_order_seq_cst);
          RingDoorbell(BellOf(send_peer));
          send_done = sent == send_bytes;
          moved = true;
        }
      }
      if (!recv_done) {
        uint32_t tail = in->tail.load(std::memory_order_relaxed);
        while (!recv_done && in->head.load(std::memory_order_acquire) != tail) {
          const uint8_t* slot = ChannelSlot(recv_peer, rank_, tail % kChannelSlots);
          PieceHeader h;
          std::memcpy(&h, slot, sizeof h);
          if (h.message != recv_message || h.msg_bytes != recv_bytes || h.offset != received) {
            return SizeMismatch(w, recv_peer, h.msg_bytes, recv_bytes, "point-to-point message");
          }
          OCTET_RETURN_IF_ERROR(on_piece(h.offset, slot + kPieceHeaderBytes, h.len));
          received += h.len;
          in->tail.store(++tail, std::memory_order_seq_cst);
          RingDoorbell(BellOf(recv_peer));
          recv_done = received == recv_bytes;
          moved = true;
        }
      }
      if (moved || (send_done && recv_done)) continue;
      // Nothing moved: wait until a slot frees up or a piece arrives.
      const bool blocked_on_recv = !recv_done;
      const int peer = blocked_on_recv ? recv_peer : send_peer;
      OCTET_RETURN_IF_ERROR(w.Wait(
          [&] {
            return (!send_done && out->head.load(std::memory_order_relaxed) -
                                          out->tail.load(std::memory_order_acquire) <
                                      kChannelSlots) ||
                   (!recv_done && in->head.load(std::memory_order_acquire) !=
                                      in->tail.load(std::memory_order_relaxed));
          },
          peer, blocked_on_recv ? "its point-to-point data" : "it to take point-to-point data",
          &my_bell));
    }
    return Status::Ok();
  }

 private:
  PublishCtl& Ctl(int r) {
    return reinterpret_cast<PublishCtl*>(base_ + layout_.publish_ctl)[r];
  }
  Doorbell BellOf(int r) {
    Bell& b = reinterpret_cast<Bell*>(base_ + layout_.bells)[r];
    return Doorbell{&b.word, &b.sleeping};
  }
  ChannelCtl& Channel(int src, int dst) {
    return reinterpret_cast<ChannelCtl*>(base_ + layout_.channel_ctl)[src * size_ + dst];
  }
  uint8_t* PublishSlot(int r, int parity) {
    return base_ + layout_.publish_slots + (static_cast<size_t>(r) * 2 + parity) * layout_.slot_bytes;
  }
  uint8_t* ChannelSlot(int src, int dst, uint32_t i) {
    const size_t index = (static_cast<size_t>(src) * size_ + dst) * kChannelSlots + i;
    return base_ + layout_.channels + index * layout_.channel_slot_bytes;
  }

  Layout layout_;
  size_t chunk_bytes_;
  uint8_t* base_;
  size_t mapped_bytes_;
  std::vector<uint64_t> sent_messages_;
  std::vector<uint64_t> received_messages_;
};

std::string RandomSuffix() {
  std::random_device rd;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%08x%08x", rd(), rd());
  return buf;
}

}  // namespace

Result<std::unique_ptr<Transport>> ConnectShm(Bootstrap& bootstrap, const TransportConfig& config) {
  const int n = bootstrap.size();
  const int rank = bootstrap.rank();
  const Deadline deadline = Deadline::AfterMs(config.connect_timeout_ms);
  if (!bootstrap.AllOnOneHost()) {
    for (int p = 0; p < n; ++p) {
      if (bootstrap.roster()[p].host_id != bootstrap.roster()[0].host_id) {
        return UnavailableError("shared memory needs every rank on one host; rank " +
                                std::to_string(p) + " runs on another host than rank 0");
      }
    }
  }
  const Layout layout(n, config.slot_bytes, config.chunk_bytes);
  std::string name;
  Status local;
  uint8_t* base = nullptr;
  // Rank 0 creates and sizes the region; the others open it by name.
  if (rank == 0) {
    name = "/octet-coll-" + std::to_string(::getpid()) + "-" + RandomSuffix();
    const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) {
      local = UnavailableError("shm_open " + name + ": " + std::strerror(errno));
    } else {
      if (::ftruncate(fd, static_cast<off_t>(layout.total)) != 0) {
        local = UnavailableError("sizing shared memory " + name + " to " +
                                 std::to_string(layout.total) + " bytes: " + std::strerror(errno));
      } else {
        void* m = ::mmap(nullptr, layout.total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED) {
          local = UnavailableError("mmap " + name + ": " + std::strerror(errno));
        } else {
          base = static_cast<uint8_t*>(m);
          auto* h = new (base) Header;
          h->magic = kShmMagic;
          h->region_bytes = layout.total;
          h->slot_bytes = config.slot_bytes;
          h->chunk_bytes = config.chunk_bytes;
          h->world_size = static_cast<uint32_t>(n);
          h->attached.store(1);
          // The rest of the region is zero (a fresh shm object): every flag
          // and counter starts at 0.
        }
      }
      ::close(fd);
    }
  }
  auto names = bootstrap.AllGatherChecked(local, name, deadline);
  if (!names.ok()) {
    if (base) ::munmap(base, layout.total);
    if (rank == 0 && !name.empty()) ::shm_unlink(name.c_str());
    return names.status();
  }
  name = (*names)[0];
  if (rank != 0) {
    const int fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0600);
    struct stat st{};
    if (fd < 0) {
      local = UnavailableError("cannot open rank 0's shared memory " + name + ": " +
                               std::strerror(errno));
    } else if (::fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != layout.total) {
      local = UnavailableError("shared memory " + name + " has an unexpected size");
    } else {
      void* m = ::mmap(nullptr, layout.total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (m == MAP_FAILED) {
        local = UnavailableError("mmap " + name + ": " + std::strerror(errno));
      } else {
        base = static_cast<uint8_t*>(m);
        auto* h = reinterpret_cast<Header*>(base);
        if (h->magic != kShmMagic || h->world_size != static_cast<uint32_t>(n) ||
            h->slot_bytes != config.slot_bytes || h->chunk_bytes != config.chunk_bytes) {
          local = UnavailableError("shared memory " + name + " was made for another layout");
        } else {
          h->attached.fetch_add(1);
        }
      }
    }
    if (fd >= 0) ::close(fd);
  }
  // Once everyone has it mapped the name is no longer needed: unlink it now so
  // nothing is left in /dev/shm even if every rank is killed later.
  auto attached = bootstrap.AllGatherChecked(local, {}, deadline);
  if (rank == 0) ::shm_unlink(name.c_str());
  if (!attached.ok()) {
    if (base) ::munmap(base, layout.total);
    return attached.status();
  }
  return std::unique_ptr<Transport>(new ShmTransport(rank, n, config, base, layout.total));
}

Status SizeMismatch(const Waiter& w, int peer, size_t theirs, size_t ours, const char* what) {
  return InvalidArgumentError("rank " + std::to_string(peer) + " sent " + std::to_string(theirs) +
                              " bytes for a " + what + " where this rank expected " +
                              std::to_string(ours) +
                              " (ranks called different collectives or sizes; " +
                              w.label().ToString() + ")");
}

}  // namespace octet::collectives
