// RDMA verbs transport (rdma-core): RoCE v2 or InfiniBand, RC queue pairs.
//
// One RC QP per peer, on the port that reaches it (rdma_links.h: a ring's
// neighbours sit behind different ports of a Spark's ConnectX-7); per port in
// use a protection domain, a completion queue and the one region registered
// on it. The region holds, per sending peer, two one-shot
// slots and K point-to-point piece slots (the receive side), plus this rank's
// staging for what it sends. Every transfer is one RDMA WRITE-WITH-IMMEDIATE
// straight into the peer's slot: the payload and the notification arrive as
// one work request, and the immediate's completion at the receiver is only
// generated after the payload is in place (guaranteed by the spec, unlike a
// separate flag write). The immediate says what landed:
//   kind 0: one-shot contribution, low 30 bits = step number
//   kind 1: a point-to-point piece (its header sits in front of the data)
//   kind 2: credits: the receiver freed that many piece slots
// Point-to-point is credit based: a sender has at most K pieces in flight per
// peer, so it never overwrites a slot the receiver has not consumed.
//
// QP settings follow common practice: timeout 14, retry_cnt 7, rnr_retry 7;
// for RoCE v2 the GID index is the first RoCE v2 entry with an IPv4 address
// unless configured.
//
// Verified here only to compile and to probe cleanly without a device (this
// development machine has no RDMA NIC); its data path has not been run on
// hardware yet. A review against the verbs API fixed the path MTU (both
// ends'), the ranks' agreement that every QP is ready before the first
// write, per-slot staging, the drain of in-flight writes before the QPs are
// destroyed, and the limits (largest message, RLIMIT_MEMLOCK).
#include <arpa/inet.h>
#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "bootstrap.h"
#include "octet/base/deadline.h"
#include "octet/base/log.h"
#include "rdma_links.h"
#include "transport.h"
#include "wire.h"

#if OCTET_HAVE_VERBS
#include "octet/collectives/verbs_api.h"
#endif

namespace octet::collectives {

#if !OCTET_HAVE_VERBS

Status ProbeVerbs(const TransportConfig&) {
  return UnavailableError(
      "RDMA verbs support is not compiled in (libibverbs-dev was missing at build time)");
}

Result<std::unique_ptr<Transport>> ConnectVerbs(Bootstrap& bootstrap,
                                                const TransportConfig& config) {
  // Every rank reports through the bootstrap so all ranks fail alike.
  auto agreed = bootstrap.AllGatherChecked(ProbeVerbs(config), {},
                                           Deadline::AfterMs(config.connect_timeout_ms));
  if (!agreed.ok()) return agreed.status();
  return UnavailableError("RDMA verbs support is not compiled in");
}

#else  // OCTET_HAVE_VERBS

namespace {

constexpr uint32_t kPieceSlots = 4;           // point-to-point slots per sending peer
constexpr size_t kPieceHeaderBytes = 64;
constexpr uint32_t kRecvDepth = 2 * kPieceSlots + 8;  // posted receives per QP
constexpr uint32_t kSendDepth = 4 * kPieceSlots + 16;
constexpr uint32_t kImmPublish = 0u << 30, kImmPiece = 1u << 30, kImmCredit = 2u << 30;
constexpr uint32_t kImmKindMask = 3u << 30, kImmValueMask = ~kImmKindMask;
// How long closing waits for this rank's writes still on the wire.
constexpr int64_t kDrainMs = 2000;

struct PieceHeader {
  uint64_t message;
  uint64_t msg_bytes;
  uint64_t offset;
  uint64_t len;
};

size_t AlignUp(size_t v, size_t a) { return (v + a - 1) / a * a; }

// libibverbs, loaded by OpenDevice before any other call here.
const VerbsApi& V() { return **LoadVerbs(); }

std::string DeviceError(const std::string& what) {
  return what + ": " + std::strerror(errno);
}

// ibv_reg_mr pins the region: above RLIMIT_MEMLOCK (8 MiB by default on
// Ubuntu, less than the region of two ranks) the kernel refuses with ENOMEM.
std::string RegisterError(size_t bytes) {
  const int err = errno;
  std::string msg =
      "ibv_reg_mr of the RDMA region (" + std::to_string(bytes) + " bytes): " + std::strerror(err);
  rlimit lim{};
  if (err == ENOMEM && getrlimit(RLIMIT_MEMLOCK, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY &&
      lim.rlim_cur < bytes) {
    msg += "; the locked-memory limit (ulimit -l) is " + std::to_string(lim.rlim_cur) +
           " bytes: raise it (the octet-agent unit sets LimitMEMLOCK=infinity for its jobs)";
  }
  return msg;
}

// The device, port and GID a rank offers its peers.
struct PortChoice {
  std::string device;
  int port = 1;
  int gid_index = 0;
  bool roce = false;  // Ethernet link layer: address by GID, not LID
  ibv_port_attr attr{};
  ibv_gid gid{};
  uint32_t ipv4 = 0;  // the GID's IPv4 address (RoCE v2), host order; 0: none
  int prefix_len = 0;
};

// One opened device context; closed when the last owner lets go.
using Context = std::shared_ptr<ibv_context>;

struct OpenedPort {
  PortChoice choice;
  Context ctx;
};

bool IsIpv4MappedGid(const ibv_gid& g) {
  for (int i = 0; i < 10; ++i) {
    if (g.raw[i] != 0) return false;
  }
  return g.raw[10] == 0xff && g.raw[11] == 0xff;
}

// The names in a comma-separated list ("" = none).
std::vector<std::string> SplitNames(const std::string& list) {
  std::vector<std::string> names;
  size_t at = 0;
  while (at <= list.size() && !list.empty()) {
    const size_t comma = std::min(list.find(',', at), list.size());
    if (comma > at) names.push_back(list.substr(at, comma - at));
    at = comma + 1;
  }
  return names;
}

// Opens every usable port: each device's configured port when it is active
// and has the GID (config.verbs_device, a comma-separated list, limits the
// devices), in the library's device order. On failure says why, starting
// with "no RDMA device" when there is none at all.
Result<std::vector<OpenedPort>> ListPorts(const TransportConfig& config) {
  if (auto api = LoadVerbs(); !api.ok()) {
    return UnavailableError("no RDMA device (" + api.status().message() + ")");
  }
  int num = 0;
  ibv_device** list = V().get_device_list(&num);
  if (list == nullptr) {
    return UnavailableError("no RDMA device (ibv_get_device_list: " +
                            std::string(std::strerror(errno)) + ")");
  }
  struct FreeList {
    ibv_device** l;
    ~FreeList() { V().free_device_list(l); }
  } free_list{list};
  if (num == 0) return UnavailableError("no RDMA device");
  const std::vector<std::string> wanted = SplitNames(config.verbs_device);
  std::vector<OpenedPort> ports;
  std::string tried;
  for (int d = 0; d < num; ++d) {
    const std::string name = V().get_device_name(list[d]);
    if (!wanted.empty() && std::find(wanted.begin(), wanted.end(), name) == wanted.end()) continue;
    Context ctx(V().open_device(list[d]), [](ibv_context* c) {
      if (c) V().close_device(c);
    });
    if (!ctx) {
      tried += " " + name + " (cannot open)";
      continue;
    }
    PortChoice c;
    c.device = name;
    c.port = config.verbs_port;
    if (V().query_port(ctx.get(), static_cast<uint8_t>(c.port), &c.attr) != 0 ||
        c.attr.state != IBV_PORT_ACTIVE) {
      tried += " " + name + " port " + std::to_string(c.port) + " (not active)";
      continue;
    }
    c.roce = c.attr.link_layer == IBV_LINK_LAYER_ETHERNET;
    c.gid_index = config.verbs_gid_index >= 0 ? config.verbs_gid_index : 0;
    if (c.roce && config.verbs_gid_index < 0) {
      // Prefer a RoCE v2 GID carrying an IPv4 address, then any RoCE v2 GID.
      int any_v2 = -1, v2_ipv4 = -1;
      for (int i = 0; i < c.attr.gid_tbl_len && v2_ipv4 < 0; ++i) {
        ibv_gid_entry e{};
        if (!V().query_gid_ex || V().query_gid_ex(ctx.get(), static_cast<uint32_t>(c.port),
                                                  static_cast<uint32_t>(i), &e, 0, sizeof e) != 0) {
          continue;
        }
        if (e.gid_type != IBV_GID_TYPE_ROCE_V2) continue;
        if (any_v2 < 0) any_v2 = i;
        if (IsIpv4MappedGid(e.gid)) v2_ipv4 = i;
      }
      c.gid_index = v2_ipv4 >= 0 ? v2_ipv4 : (any_v2 >= 0 ? any_v2 : 0);
    }
    if (V().query_gid(ctx.get(), static_cast<uint8_t>(c.port), c.gid_index, &c.gid) != 0) {
      tried += " " + name + " (no GID " + std::to_string(c.gid_index) + ")";
      continue;
    }
    if (c.roce && IsIpv4MappedGid(c.gid)) {
      c.ipv4 = (uint32_t{c.gid.raw[12]} << 24) | (uint32_t{c.gid.raw[13]} << 16) |
               (uint32_t{c.gid.raw[14]} << 8) | c.gid.raw[15];
      c.prefix_len = LocalPrefixLength(c.ipv4);
    }
    ports.push_back({std::move(c), std::move(ctx)});
  }
  if (!ports.empty()) return ports;
  if (!wanted.empty() && tried.empty()) {
    return UnavailableError("no RDMA device named '" + config.verbs_device + "'");
  }
  return UnavailableError("no usable RDMA device:" + tried);
}

RdmaPort AsRdmaPort(const PortChoice& c) { return {c.device, c.port, c.ipv4, c.prefix_len}; }

// One port in use: its context and what is registered on it. The region is
// registered once per port (a memory region belongs to one protection
// domain); each port has its own completion queue.
struct Nic {
  PortChoice port;
  Context ctx;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  ibv_mr* mr = nullptr;
};

// Owns what ibv_* handed out; destroys it in reverse order.
struct VerbsResources {
  uint8_t* buffer = nullptr;
  std::vector<Nic> nics;
  std::vector<ibv_qp*> qps;  // per peer, on the peer's Nic
  ~VerbsResources() {
    for (ibv_qp* q : qps) {
      if (q) V().destroy_qp(q);
    }
    for (Nic& n : nics) {
      if (n.mr) V().dereg_mr(n.mr);
      if (n.cq) V().destroy_cq(n.cq);
      if (n.pd) V().dealloc_pd(n.pd);
      n.ctx.reset();
    }
    std::free(buffer);
  }
};

// What a peer needs to reach this rank's QP for it and its region.
struct Endpoint {
  uint32_t qpn = 0;
  uint32_t psn = 0;
  uint16_t lid = 0;
  ibv_gid gid{};
  uint64_t addr = 0;
  uint32_t rkey = 0;
  uint32_t mtu = 0;  // the port's active MTU (enum ibv_mtu): a path takes the smaller end's
};

class VerbsTransport final : public Transport {
 public:
  VerbsTransport(int rank, int size, const TransportConfig& config)
      : Transport(rank, size, config.slot_bytes),
        chunk_bytes_(config.chunk_bytes),
        piece_slot_bytes_(AlignUp(kPieceHeaderBytes + config.chunk_bytes, 64)),
        peers_(size) {
    // Region: [recv publish n*2*slot][recv pieces n*K*piece][send publish 2*slot][send pieces K*piece]
    recv_publish_ = 0;
    recv_pieces_ = recv_publish_ + static_cast<size_t>(size) * 2 * slot_bytes_;
    send_publish_ = recv_pieces_ + static_cast<size_t>(size) * kPieceSlots * piece_slot_bytes_;
    send_pieces_ = send_publish_ + 2 * slot_bytes_;
    region_bytes_ = send_pieces_ + kPieceSlots * piece_slot_bytes_;
  }

  ~VerbsTransport() override { Drain(); }

  TransportKind kind() const override { return TransportKind::kVerbs; }

  // Allocates and registers everything and creates one QP per peer, on the
  // port its link uses (links: AgreedRdmaLinks, indexes into ports).
  Status Open(std::vector<OpenedPort> ports, const std::vector<RdmaLink>& links) {
    if (posix_memalign(reinterpret_cast<void**>(&res_.buffer), 4096, region_bytes_) != 0) {
      return ResourceExhaustedError("cannot allocate " + std::to_string(region_bytes_) +
                                    " bytes for the RDMA region");
    }
    std::memset(res_.buffer, 0, region_bytes_);
    // One message is a one-shot slot, or a piece with its header.
    const uint64_t largest = std::max<uint64_t>(slot_bytes_, kPieceHeaderBytes + chunk_bytes_);
    std::vector<int> nic_of_port(ports.size(), -1);
    peer_nic_.assign(size_, -1);
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      const int port = links[p].local_port;
      if (port < 0 || port >= static_cast<int>(ports.size())) {
        return DataLossError("RDMA: the link to rank " + std::to_string(p) + " names port " +
                             std::to_string(port) + " of " + std::to_string(ports.size()));
      }
      if (nic_of_port[port] < 0) {
        nic_of_port[port] = static_cast<int>(res_.nics.size());
        Nic& n = res_.nics.emplace_back();
        n.port = ports[port].choice;
        n.ctx = ports[port].ctx;
      }
      peer_nic_[p] = nic_of_port[port];
    }
    ports.clear();  // closes the contexts of the ports no link uses
    for (Nic& n : res_.nics) {
      const std::string& dev = n.port.device;
      if (n.port.attr.max_msg_sz != 0 && largest > n.port.attr.max_msg_sz) {
        return InvalidArgumentError("RDMA: a message of " + std::to_string(largest) +
                                    " bytes (slot or chunk) is over " + dev + "'s largest, " +
                                    std::to_string(n.port.attr.max_msg_sz) + " bytes");
      }
      n.pd = V().alloc_pd(n.ctx.get());
      if (!n.pd) return UnavailableError(DeviceError("ibv_alloc_pd on " + dev));
      const int peers_here = static_cast<int>(
          std::count(peer_nic_.begin(), peer_nic_.end(), static_cast<int>(&n - res_.nics.data())));
      const int cqe =
          static_cast<int>((kRecvDepth + kSendDepth) * static_cast<uint32_t>(peers_here));
      n.cq = V().create_cq(n.ctx.get(), cqe, nullptr, nullptr, 0);
      if (!n.cq) return UnavailableError(DeviceError("ibv_create_cq on " + dev));
      n.mr = V().reg_mr(n.pd, res_.buffer, region_bytes_,
                        IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
      if (!n.mr) return UnavailableError(RegisterError(region_bytes_) + " on " + dev);
    }
    res_.qps.assign(size_, nullptr);
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      Nic& n = res_.nics[peer_nic_[p]];
      ibv_qp_init_attr a{};
      a.send_cq = n.cq;
      a.recv_cq = n.cq;
      a.qp_type = IBV_QPT_RC;
      a.cap.max_send_wr = kSendDepth;
      a.cap.max_recv_wr = kRecvDepth;
      a.cap.max_send_sge = 1;
      a.cap.max_recv_sge = 1;
      a.cap.max_inline_data = 0;
      res_.qps[p] = V().create_qp(n.pd, &a);
      if (!res_.qps[p]) {
        return UnavailableError(DeviceError("ibv_create_qp on " + n.port.device));
      }
      qp_to_peer_.push_back({peer_nic_[p], res_.qps[p]->qp_num, p});
      ibv_qp_attr init{};
      init.qp_state = IBV_QPS_INIT;
      init.pkey_index = 0;
      init.port_num = static_cast<uint8_t>(n.port.port);
      init.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
      if (V().modify_qp(res_.qps[p], &init,
                        IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) !=
          0) {
        return UnavailableError(DeviceError("QP to rank " + std::to_string(p) + " -> INIT"));
      }
      for (uint32_t i = 0; i < kRecvDepth; ++i) OCTET_RETURN_IF_ERROR(PostRecv(p));
    }
    return Status::Ok();
  }

  // This rank's endpoint for each peer, serialised for the bootstrap.
  std::string LocalEndpoints() {
    std::random_device rd;
    WireWriter w;
    for (int p = 0; p < size_; ++p) {
      Endpoint e;  // our own entry stays empty: nobody reads it
      if (p != rank_) {
        const Nic& n = res_.nics[peer_nic_[p]];
        e.qpn = res_.qps[p]->qp_num;
        e.psn = rd() & 0xffffff;  // initial packet sequence number
        peers_[p].local_psn = e.psn;
        e.lid = n.port.attr.lid;
        e.gid = n.port.gid;
        e.addr = reinterpret_cast<uint64_t>(res_.buffer);
        e.rkey = n.mr->rkey;
        e.mtu = static_cast<uint32_t>(n.port.attr.active_mtu);
      }
      w.U32(e.qpn).U32(e.psn).U32(e.lid).Raw(e.gid.raw, 16).U64(e.addr).U32(e.rkey).U32(e.mtu);
    }
    return w.Take();
  }

  // "rank 1 rocep1s0f0 -> rocep1s0f1 (10.0.0.2/30); rank 2 ... (routed)", for the log.
  std::string DescribeLinks(const std::vector<std::vector<RdmaPort>>& all_ports,
                            const std::vector<RdmaLink>& links) const {
    std::string s;
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      if (!s.empty()) s += "; ";
      s += "rank " + std::to_string(p) + " " + res_.nics[peer_nic_[p]].port.device + " -> " +
           DescribeRdmaPort(all_ports[p][links[p].peer_port]) +
           (links[p].routed ? " (routed)" : "");
    }
    return s;
  }

  // Moves every QP to RTR and RTS using the peers' endpoints.
  Status ConnectQps(const std::vector<std::string>& all) {
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      // Peer p's blob lists its endpoint for each rank; take the one for us.
      WireReader rd(all[p]);
      Endpoint e;
      for (int q = 0; q <= rank_; ++q) {
        e.qpn = rd.U32();
        e.psn = rd.U32();
        e.lid = static_cast<uint16_t>(rd.U32());
        rd.Raw(e.gid.raw, 16);
        e.addr = rd.U64();
        e.rkey = rd.U32();
        e.mtu = rd.U32();
      }
      if (!rd.ok() || e.mtu < IBV_MTU_256 || e.mtu > IBV_MTU_4096) {
        return DataLossError("rank " + std::to_string(p) + " sent a bad RDMA endpoint");
      }
      peers_[p].remote_addr = e.addr;
      peers_[p].rkey = e.rkey;
      const PortChoice& port = res_.nics[peer_nic_[p]].port;
      ibv_qp_attr rtr{};
      rtr.qp_state = IBV_QPS_RTR;
      // Both ends' MTU (a 9000-byte Ethernet MTU is IB 4096, 1500 is 1024):
      // packets above the smaller one are dropped, and the QP fails with
      // retries exceeded.
      rtr.path_mtu = std::min(port.attr.active_mtu, static_cast<ibv_mtu>(e.mtu));
      rtr.dest_qp_num = e.qpn;
      rtr.rq_psn = e.psn;
      rtr.max_dest_rd_atomic = 1;
      rtr.min_rnr_timer = 12;
      rtr.ah_attr.port_num = static_cast<uint8_t>(port.port);
      if (port.roce) {
        rtr.ah_attr.is_global = 1;
        rtr.ah_attr.grh.dgid = e.gid;
        rtr.ah_attr.grh.sgid_index = static_cast<uint8_t>(port.gid_index);
        rtr.ah_attr.grh.hop_limit = 64;
      } else {
        rtr.ah_attr.dlid = e.lid;
      }
      if (V().modify_qp(res_.qps[p], &rtr,
                        IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                            IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) !=
          0) {
        return UnavailableError(DeviceError("QP to rank " + std::to_string(p) + " -> RTR"));
      }
      ibv_qp_attr rts{};
      rts.qp_state = IBV_QPS_RTS;
      rts.timeout = 14;
      rts.retry_cnt = 7;
      rts.rnr_retry = 7;
      rts.sq_psn = peers_[p].local_psn;
      rts.max_rd_atomic = 1;
      if (V().modify_qp(res_.qps[p], &rts,
                        IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                            IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC) != 0) {
        return UnavailableError(DeviceError("QP to rank " + std::to_string(p) + " -> RTS"));
      }
    }
    return Status::Ok();
  }

  Status Publish(uint64_t seq, const PublishSpec& spec, Waiter& w) override {
    const int s = static_cast<int>(seq & 1);
    // The staging slot of this parity was last used two steps ago; its
    // writes must have completed before it is refilled.
    OCTET_RETURN_IF_ERROR(WaitFor(w, [&] { return publish_in_flight_[s] == 0; }, -1,
                                  "our earlier RDMA writes to complete"));
    uint8_t* staging = res_.buffer + send_publish_ + s * slot_bytes_;
    const auto* src = static_cast<const uint8_t*>(spec.base);
    for (int b = 0; b < spec.blocks; ++b) {
      std::memcpy(staging + b * spec.block_bytes, src + b * spec.block_stride, spec.block_bytes);
    }
    self_spec_ = spec;
    self_data_ = staging;
    for (int i = 1; i < size_; ++i) {
      const int p = (rank_ + i) % size_;
      const size_t off = spec.per_peer_block ? p * spec.block_bytes : 0;
      const size_t len = spec.per_peer_block ? spec.block_bytes : spec.bytes();
      const uint64_t remote = peers_[p].remote_addr + recv_publish_ +
                              (static_cast<size_t>(rank_) * 2 + s) * slot_bytes_;
      OCTET_RETURN_IF_ERROR(PostWrite(p, staging + off, len, remote,
                                      kImmPublish | (static_cast<uint32_t>(seq) & kImmValueMask),
                                      WrId(kWrPublish, s)));
      ++publish_in_flight_[s];
    }
    return Status::Ok();
  }

  Result<const uint8_t*> WaitPublished(int peer, uint64_t seq, size_t expect_bytes,
                                       Waiter& w) override {
    if (peer == rank_) {
      const size_t bytes = self_spec_.per_peer_block ? self_spec_.block_bytes : self_spec_.bytes();
      if (bytes != expect_bytes) return SizeMismatch(w, peer, bytes, expect_bytes, "one-shot step");
      return self_data_ + (self_spec_.per_peer_block ? rank_ * self_spec_.block_bytes : 0);
    }
    const int s = static_cast<int>(seq & 1);
    const uint32_t want = static_cast<uint32_t>(seq) & kImmValueMask;
    Peer& p = peers_[peer];
    OCTET_RETURN_IF_ERROR(WaitFor(w, [&] { return p.slot_seq[s] == want && p.slot_valid[s]; },
                                  peer, "its one-shot data"));
    if (p.slot_len[s] != expect_bytes) {
      return SizeMismatch(w, peer, p.slot_len[s], expect_bytes, "one-shot step");
    }
    return res_.buffer + recv_publish_ + (static_cast<size_t>(peer) * 2 + s) * slot_bytes_;
  }

  Status SendRecv(int send_peer, const void* send_data, size_t send_bytes, int recv_peer,
                  size_t recv_bytes, PieceFn on_piece, Waiter& w) override {
    const auto* src = static_cast<const uint8_t*>(send_data);
    size_t sent = 0, received = 0;
    bool send_done = send_peer < 0, recv_done = recv_peer < 0;
    const uint64_t send_message = send_done ? 0 : ++peers_[send_peer].sent_messages;
    const uint64_t recv_message = recv_done ? 0 : ++peers_[recv_peer].received_messages;
    while (!send_done || !recv_done) {
      OCTET_RETURN_IF_ERROR(PollCq(w));
      bool moved = false;
      if (!send_done) {
        Peer& p = peers_[send_peer];
        while (!send_done && p.pieces_sent - p.credits < kPieceSlots &&
               piece_staging_busy_ < kPieceSlots) {
          // A free staging slot: completions come in order per QP only, so
          // after sends to several peers the oldest slot may still be on
          // the wire.
          uint32_t i = 0;
          while (staging_busy_[i]) ++i;
          uint8_t* staging = res_.buffer + send_pieces_ + i * piece_slot_bytes_;
          const size_t len = std::min(chunk_bytes_, send_bytes - sent);
          PieceHeader h{send_message, send_bytes, sent, len};
          std::memcpy(staging, &h, sizeof h);
          if (len) std::memcpy(staging + kPieceHeaderBytes, src + sent, len);
          const uint64_t remote =
              p.remote_addr + recv_pieces_ +
              (static_cast<size_t>(rank_) * kPieceSlots + p.pieces_sent % kPieceSlots) *
                  piece_slot_bytes_;
          OCTET_RETURN_IF_ERROR(PostWrite(send_peer, staging, kPieceHeaderBytes + len, remote,
                                          kImmPiece, WrId(kWrPiece, i)));
          staging_busy_[i] = true;
          ++piece_staging_busy_;
          ++p.pieces_sent;
          sent += len;
          send_done = sent == send_bytes;
          moved = true;
        }
      }
      if (!recv_done) {
        Peer& p = peers_[recv_peer];
        while (!recv_done && p.pieces_consumed < p.pieces_arrived) {
          const uint8_t* slot =
              res_.buffer + recv_pieces_ +
              (static_cast<size_t>(recv_peer) * kPieceSlots + p.pieces_consumed % kPieceSlots) *
                  piece_slot_bytes_;
          PieceHeader h;
          std::memcpy(&h, slot, sizeof h);
          if (h.message != recv_message || h.msg_bytes != recv_bytes || h.offset != received) {
            return SizeMismatch(w, recv_peer, h.msg_bytes, recv_bytes, "point-to-point message");
          }
          OCTET_RETURN_IF_ERROR(on_piece(h.offset, slot + kPieceHeaderBytes, h.len));
          received += h.len;
          ++p.pieces_consumed;
          // Give the slot back to the sender.
          OCTET_RETURN_IF_ERROR(PostWrite(recv_peer, nullptr, 0, p.remote_addr, kImmCredit | 1,
                                          WrId(kWrCredit, 0)));
          ++credits_in_flight_;
          recv_done = received == recv_bytes;
          moved = true;
        }
      }
      if (moved || (send_done && recv_done)) continue;
      const bool on_recv = !recv_done;
      const int peer = on_recv ? recv_peer : send_peer;
      OCTET_RETURN_IF_ERROR(WaitFor(
          w,
          [&] {
            return (!recv_done && peers_[recv_peer].pieces_consumed <
                                      peers_[recv_peer].pieces_arrived) ||
                   (!send_done &&
                    peers_[send_peer].pieces_sent - peers_[send_peer].credits < kPieceSlots &&
                    piece_staging_busy_ < kPieceSlots);
          },
          peer, on_recv ? "its point-to-point data" : "credits for point-to-point data"));
    }
    return Status::Ok();
  }

 private:
  enum WrKind : uint64_t { kWrPublish = 1, kWrPiece = 2, kWrCredit = 3 };
  static uint64_t WrId(WrKind k, uint64_t index) { return (uint64_t{k} << 32) | index; }

  struct Peer {
    uint64_t remote_addr = 0;
    uint32_t rkey = 0;
    uint32_t local_psn = 0;
    uint32_t slot_seq[2] = {kImmValueMask, kImmValueMask};
    bool slot_valid[2] = {false, false};
    uint64_t slot_len[2] = {0, 0};
    uint64_t pieces_sent = 0, credits = 0;         // to this peer
    uint64_t pieces_arrived = 0, pieces_consumed = 0;  // from this peer
    uint64_t sent_messages = 0, received_messages = 0;
  };

  Status PostRecv(int peer) {
    ibv_recv_wr wr{};
    wr.wr_id = static_cast<uint64_t>(peer);
    wr.num_sge = 0;  // write-with-immediate consumes a receive but carries no data into it
    ibv_recv_wr* bad = nullptr;
    if (ibv_post_recv(res_.qps[peer], &wr, &bad) != 0) {
      return UnavailableError(DeviceError("ibv_post_recv for rank " + std::to_string(peer)));
    }
    return Status::Ok();
  }

  Status PostWrite(int peer, const uint8_t* local, size_t len, uint64_t remote, uint32_t imm,
                   uint64_t wr_id) {
    ibv_sge sge{};
    sge.addr = reinterpret_cast<uint64_t>(local);
    sge.length = static_cast<uint32_t>(len);
    sge.lkey = res_.nics[peer_nic_[peer]].mr->lkey;
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.imm_data = htonl(imm);
    wr.sg_list = len ? &sge : nullptr;
    wr.num_sge = len ? 1 : 0;
    wr.wr.rdma.remote_addr = remote;
    wr.wr.rdma.rkey = peers_[peer].rkey;
    ibv_send_wr* bad = nullptr;
    if (ibv_post_send(res_.qps[peer], &wr, &bad) != 0) {
      return UnavailableError(DeviceError("ibv_post_send to rank " + std::to_string(peer)));
    }
    return Status::Ok();
  }

  // QP numbers are unique per device only.
  int PeerOfQp(int nic, uint32_t qpn) const {
    for (const QpOwner& o : qp_to_peer_) {
      if (o.nic == nic && o.qpn == qpn) return o.peer;
    }
    return -1;
  }

  // Reaps completions: arrivals update the per-peer state, send completions
  // free staging. A failed work request poisons with the peer named.
  Status PollCq(Waiter& w) {
    for (int nic = 0; nic < static_cast<int>(res_.nics.size()); ++nic) {
      OCTET_RETURN_IF_ERROR(PollNic(nic, w));
    }
    return Status::Ok();
  }

  Status PollNic(int nic, Waiter& w) {
    ibv_wc wc[32];
    for (;;) {
      const int n = ibv_poll_cq(res_.nics[nic].cq, 32, wc);
      if (n < 0) return UnavailableError("ibv_poll_cq failed on " + res_.nics[nic].port.device);
      for (int i = 0; i < n; ++i) {
        const int peer = PeerOfQp(nic, wc[i].qp_num);
        if (wc[i].status != IBV_WC_SUCCESS) {
          w.Blame(peer);
          const std::string who = w.bootstrap() ? w.bootstrap()->Describe(peer)
                                                : "rank " + std::to_string(peer);
          return UnavailableError("RDMA transfer with " + who +
                                  " failed: " + V().wc_status_str(wc[i].status) + " (" +
                                  w.label().ToString() + ")");
        }
        if (wc[i].opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
          if (peer < 0) continue;
          const uint32_t imm = ntohl(wc[i].imm_data);
          Peer& p = peers_[peer];
          switch (imm & kImmKindMask) {
            case kImmPublish: {
              const uint32_t seq = imm & kImmValueMask;
              p.slot_seq[seq & 1] = seq;
              p.slot_len[seq & 1] = wc[i].byte_len;
              p.slot_valid[seq & 1] = true;
              break;
            }
            case kImmPiece: ++p.pieces_arrived; break;
            case kImmCredit: p.credits += imm & kImmValueMask; break;
            default: break;
          }
          OCTET_RETURN_IF_ERROR(PostRecv(peer));
        } else {
          WriteCompleted(wc[i].wr_id);
        }
      }
      if (n < 32) return Status::Ok();
    }
  }

  // One of this rank's writes is done (the peer's adapter has it, or it
  // failed): its staging is free again.
  void WriteCompleted(uint64_t wr_id) {
    const uint64_t kind = wr_id >> 32, index = wr_id & 0xffffffffu;
    if (kind == kWrPublish) --publish_in_flight_[index & 1];
    if (kind == kWrPiece) {
      staging_busy_[index % kPieceSlots] = false;
      --piece_staging_busy_;
    }
    if (kind == kWrCredit) --credits_in_flight_;
  }

  // Collectives and SendRecv return once their writes are posted; an RC
  // write's completion at the sender says the peer's adapter has the data.
  // Destroying the QPs before that drops what is still on the wire (unlike a
  // TCP socket's close), so the peer would wait for data that never comes:
  // reap this rank's writes first, for at most kDrainMs. Failed or flushed
  // work requests count as done.
  void Drain() {
    const Deadline deadline = Deadline::AfterMs(kDrainMs);
    ibv_wc wc[32];
    while ((publish_in_flight_[0] > 0 || publish_in_flight_[1] > 0 || piece_staging_busy_ > 0 ||
            credits_in_flight_ > 0) &&
           !deadline.expired()) {
      int reaped = 0;
      for (Nic& nic : res_.nics) {
        if (!nic.cq) return;  // opening failed before the writes could start
        const int n = ibv_poll_cq(nic.cq, 32, wc);
        if (n < 0) return;
        reaped += n;
        for (int i = 0; i < n; ++i) {
          if (wc[i].opcode != IBV_WC_RECV_RDMA_WITH_IMM) WriteCompleted(wc[i].wr_id);
        }
      }
      if (reaped == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  // Waits for cond(), reaping completions while it waits.
  template <typename Cond>
  Status WaitFor(Waiter& w, Cond cond, int peer, const char* what) {
    OCTET_RETURN_IF_ERROR(PollCq(w));
    Status error;
    OCTET_RETURN_IF_ERROR(w.Wait(
        [&] {
          if (!error.ok()) return true;
          error = PollCq(w);
          return !error.ok() || cond();
        },
        peer < 0 ? (rank_ + 1) % size_ : peer, what));
    return error;
  }

  size_t chunk_bytes_;
  size_t piece_slot_bytes_;
  size_t recv_publish_ = 0, recv_pieces_ = 0, send_publish_ = 0, send_pieces_ = 0;
  size_t region_bytes_ = 0;
  VerbsResources res_;
  std::vector<int> peer_nic_;  // index into res_.nics, per peer
  std::vector<Peer> peers_;
  struct QpOwner {
    int nic;
    uint32_t qpn;
    int peer;
  };
  std::vector<QpOwner> qp_to_peer_;
  int publish_in_flight_[2] = {0, 0};
  uint32_t piece_staging_busy_ = 0;      // staging slots whose write is not done
  bool staging_busy_[kPieceSlots] = {};  // which ones
  uint32_t credits_in_flight_ = 0;       // credit writes not done
  PublishSpec self_spec_;
  const uint8_t* self_data_ = nullptr;
};

}  // namespace

Status ProbeVerbs(const TransportConfig& config) { return ListPorts(config).status(); }

Result<std::unique_ptr<Transport>> ConnectVerbs(Bootstrap& bootstrap,
                                                const TransportConfig& config) {
  const Deadline deadline = Deadline::AfterMs(config.connect_timeout_ms);
  const int rank = bootstrap.rank(), size = bootstrap.size();
  // 1. Every rank lists its usable ports; if any has none, all stop here alike.
  auto ports = ListPorts(config);
  std::vector<RdmaPort> mine;
  if (ports.ok()) {
    for (const OpenedPort& p : *ports) mine.push_back(AsRdmaPort(p.choice));
  }
  OCTET_ASSIGN_OR_RETURN(
      std::vector<std::string> port_blobs,
      bootstrap.AllGatherChecked(ports.status(), EncodeRdmaPorts(mine), deadline));
  std::vector<std::vector<RdmaPort>> all_ports(size);
  for (int r = 0; r < size; ++r) {
    OCTET_ASSIGN_OR_RETURN(all_ports[r], DecodeRdmaPorts(port_blobs[r]));
  }
  // 2. Which port each pair uses (rdma_links.h): each rank decides for the
  // ranks above it, then all take the lower rank's choice.
  auto chosen = ChooseRdmaLinks(all_ports, rank, KernelSourceAddress);
  OCTET_ASSIGN_OR_RETURN(
      std::vector<std::string> link_blobs,
      bootstrap.AllGatherChecked(chosen.status(),
                                 chosen.ok() ? EncodeRdmaLinks(*chosen) : std::string(), deadline));
  std::vector<std::vector<RdmaLink>> choices(size);
  for (int r = 0; r < size; ++r) {
    OCTET_ASSIGN_OR_RETURN(choices[r], DecodeRdmaLinks(link_blobs[r], size));
  }
  // 3. Resources and QPs, then exchange endpoints. A rank that failed from
  // here on says so in the gather (the others would otherwise wait for it
  // until the deadline).
  auto links = AgreedRdmaLinks(choices, rank);
  Status opened = links.status();
  for (int p = 0; opened.ok() && p < size; ++p) {
    if (p != rank && (*links)[p].peer_port >= static_cast<int>(all_ports[p].size())) {
      opened = DataLossError("RDMA: the link to rank " + std::to_string(p) + " names its port " +
                             std::to_string((*links)[p].peer_port) + " of " +
                             std::to_string(all_ports[p].size()));
    }
  }
  auto t = std::make_unique<VerbsTransport>(rank, size, config);
  if (opened.ok()) opened = t->Open(std::move(*ports), *links);
  const std::string endpoints = opened.ok() ? t->LocalEndpoints() : std::string();
  auto all = bootstrap.AllGatherChecked(opened, endpoints, deadline);
  if (!all.ok()) return all.status();
  // 4. Connect, then agree that every rank did: a QP not yet ready to
  // receive drops what arrives, so no rank may write before all are (and a
  // rank that failed says so now, not as a timeout in the first collective).
  OCTET_RETURN_IF_ERROR(bootstrap.AllGatherChecked(t->ConnectQps(*all), {}, deadline).status());
  OCTET_LOG(INFO) << "collectives: RDMA links of rank " << rank << ": "
                  << t->DescribeLinks(all_ports, *links);
  return std::unique_ptr<Transport>(std::move(t));
}

#endif  // OCTET_HAVE_VERBS

}  // namespace octet::collectives
