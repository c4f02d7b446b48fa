// Cabling analysis: from what each node's agent hears on which interface
// (LinksReport), the cabling graph of the cluster and its classification.
//
// Two interfaces hearing each other's beacons are joined; interfaces joined
// transitively form a segment. A segment of exactly two interfaces is a
// direct cable; three or more share a broadcast domain (a switch). Then:
//
//   single       one node
//   direct-pair  two nodes joined only by direct cables
//   ring         N >= 3 nodes, direct cables only, each node cabled to exactly
//                two others, one cable per neighbour pair, one cycle through all
//   switch       all nodes on one shared segment and nothing else
//   mixed        every node connected, but none of the shapes above
//   partial      some node is not connected to the rest or not reachable, or
//                the nodes form a chain of direct cables (a ring missing a link)
//
// Problems are flagged with the nodes and interfaces involved: a ring missing
// one link (the nodes form a chain), a node reachable only through another
// (its single cable goes to a peer, not the switch), one-way links (A hears B,
// B does not hear A: a firewall or a half-down link), nodes hearing nothing,
// unreachable agents, duplicate node ids (a cloned image), and peers heard
// that are not in the cluster.
//
// Nodes of the local embedded cluster declare their cabling (loopback has no
// cables): a declared ring joins node i to node i+1 (mod N) in profile order,
// a declared switch puts every node on one segment, both among reachable
// nodes only, so a lost node shows as a broken ring or a partial switch.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "octet/app/cluster_types.h"

namespace octet::app {

struct CablingNodeInput {
  std::string name;        // the node's name in the profile
  bool reachable = false;  // its agent answered GetLinks
  std::string error;       // why not, when !reachable
  LinksReport links;       // valid when reachable
};

enum class CablingKind { kUnknown, kSingleNode, kDirectPair, kRing, kSwitch, kMixed, kPartial };
// "unknown", "single", "direct-pair", "ring", "switch", "mixed", "partial"
std::string_view CablingKindName(CablingKind kind);

struct CablingEdge {
  std::string a_node, a_interface;  // node names (profile order: a before b)
  std::string b_node, b_interface;
  std::string a_address;  // a's address on this link, as b heard it ("" when b hears nothing)
  std::string b_address;
  uint32_t a_probe_port = 0;
  uint32_t b_probe_port = 0;
  bool bidirectional = false;  // both directions heard
  int segment = 0;             // index into CablingReport::segments
};

struct CablingSegment {
  bool shared = false;                 // >= 3 interfaces: a switch or hub
  std::vector<std::string> endpoints;  // "node:interface"
};

struct CablingProblem {
  // "missing-ring-link", "ring-link-count", "only-through", "one-way", "no-links",
  // "unreachable", "duplicate-node-id", "unknown-peer", "not-on-switch"
  std::string kind;
  std::string message;
  std::vector<std::string> nodes;
};

struct CablingReport {
  CablingKind kind = CablingKind::kUnknown;
  bool declared = false;  // from declared cabling (local embedded cluster)
  std::string summary;    // one line: "ring of 4: a-b-c-d-a"
  std::vector<CablingEdge> edges;
  std::vector<CablingSegment> segments;
  std::vector<std::string> ring_order;  // node names around the ring (kind == ring)
  std::vector<CablingProblem> problems;
};

// `expected` is what the owner says was cabled ("", "pair", "ring", "switch").
CablingReport AnalyzeCabling(const std::vector<CablingNodeInput>& nodes,
                             const std::string& expected = "");

// ---- RoCE ports of one node, as the cabling view shows them ----------------
//
// The agent reports each RDMA port and what looks wrong (RoceWarning); this
// joins the two for display. Only RoCE ports (Ethernet link layer) are listed,
// in physical-port order: the PCIe halves of one ConnectX-7 port side by side
// (PCI address without its domain, then port number, then device name).

struct RocePortRow {
  std::string device;  // "rocep1s0f0"
  uint32_t port = 0;
  std::string netdev;  // "enp1s0f0np0"
  std::string state;   // "ACTIVE", "DOWN", ...
  std::string phys_state;
  uint32_t netdev_mtu = 0;
  uint32_t active_mtu = 0;
  std::string rate;
  int v2_gid_index = -1;              // first RoCE v2 GID of an IPv4 address; -1 none
  std::vector<RoceWarning> warnings;  // the agent's warnings about this device and port
};

struct RoceSummary {
  std::vector<RocePortRow> ports;
  // Warnings about the node as a whole, or about a device and port not listed.
  std::vector<RoceWarning> node_warnings;
  size_t warning_count = 0;  // all warnings, ports' and node's
};

RoceSummary SummarizeRoce(const NodeFacts& facts);

// A few words for a warning where a port row has room ("MTU 1500", "half down",
// "no v2 GID"); the message for kinds it does not know.
std::string RoceWarningShortText(const RoceWarning& warning, const RocePortRow* row = nullptr);

}  // namespace octet::app
