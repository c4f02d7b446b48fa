// Which RDMA port each pair of ranks talks over (verbs transport).
//
// A DGX Spark's ConnectX-7 shows several RDMA devices (each QSFP port, and
// each PCIe half of one). Two Sparks cabled directly or through a switch
// reach each other from one port; in a ring of three or more, each
// neighbour sits behind a different port, and the ranks across the ring are
// reached only through a neighbour that forwards (the ring's static routes).
// So the port is chosen per peer, the way rdma_cm resolves an address: for
// each pair of ranks,
//   1. a port of each on the same IPv4 subnet (a cable or a switch between
//      them), the first such pair in the ranks' port order;
//   2. else the peer address the kernel routes to through one of this rank's
//      ports (the source address it would pick is that port's);
//   3. else, for ports without an IPv4 address (InfiniBand, addressed by
//      LID), the first such port of each.
// Rule 2 need not give the same pair from both ends, so the lower rank of
// each pair decides and the higher one takes its choice (AgreedRdmaLinks).
//
// No verbs here: the planner is plain data, checked on the CPU
// (tests/unit/collectives/test_rdma_links.cpp); the kernel's answers come
// through a function so that a test can stand in for a ring's routing table.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "octet/base/status.h"

namespace octet::collectives {

// One usable RDMA port of a rank, in the order the rank lists them.
struct RdmaPort {
  std::string device;  // e.g. "rocep1s0f1"
  int port = 1;        // the device's port number
  uint32_t ipv4 = 0;   // of its GID, host byte order; 0: none (InfiniBand)
  int prefix_len = 0;  // of that address on its network interface; 0: unknown
};

// Which port of this rank and of the peer a pair's queue pair uses.
struct RdmaLink {
  int local_port = -1;  // index into this rank's ports; -1: none (self, or left to the peer)
  int peer_port = -1;   // index into the peer's ports
  bool routed = false;  // the peer is reached through a forwarding host (rule 2)
};

// The IPv4 source address the kernel would use to reach dst (host byte
// order), 0 when there is no route.
using SourceAddressFn = std::function<uint32_t(uint32_t dst)>;

// The kernel's answer: a UDP socket connected to dst (no packet is sent)
// and asked its local address.
uint32_t KernelSourceAddress(uint32_t dst);
// The prefix length of the local interface that holds addr, 0 if none does.
int LocalPrefixLength(uint32_t addr);

// Rank `me`'s choice for every higher rank (lower ranks decide for
// themselves; their entries and its own stay {-1, -1}). Fails, naming both
// ranks and their addresses, when a higher rank is out of reach.
Result<std::vector<RdmaLink>> ChooseRdmaLinks(const std::vector<std::vector<RdmaPort>>& ports,
                                              int me, const SourceAddressFn& source);

// The links rank `me` uses, from every rank's ChooseRdmaLinks: for each pair
// the lower rank's choice, seen from `me`'s end.
Result<std::vector<RdmaLink>> AgreedRdmaLinks(const std::vector<std::vector<RdmaLink>>& choices,
                                              int me);

// For the bootstrap's all-gathers.
std::string EncodeRdmaPorts(const std::vector<RdmaPort>& ports);
Result<std::vector<RdmaPort>> DecodeRdmaPorts(std::string_view blob);
std::string EncodeRdmaLinks(const std::vector<RdmaLink>& links);
Result<std::vector<RdmaLink>> DecodeRdmaLinks(std::string_view blob, int ranks);

// "rocep1s0f1 port 1 (10.0.0.1/30)", for messages.
std::string DescribeRdmaPort(const RdmaPort& p);

}  // namespace octet::collectives
