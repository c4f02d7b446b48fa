// RoCE facts from sysfs, and the NCCL settings they call for.
//
// The settings users get wrong on ConnectX-7 clusters (DGX Spark): which RDMA
// devices NCCL may use (on a Spark each physical port is reached through two
// PCIe functions, "halves", that must both be named to get the port's full
// bandwidth), which GID index holds the RoCE v2 address on the cluster's IPv4
// network, and which Ethernet interfaces carry NCCL's own socket traffic. The
// agent derives them from /sys/class/infiniband and /sys/class/net and gives
// them to the jobs that use NCCL; what looks wrong (an MTU under 9000, a port
// half left out) comes back as warnings for the cluster view.
#pragma once

#include <string>
#include <vector>

#include "octet/agent/node_facts.h"

namespace octet::agent {

// The RDMA devices of the sysfs tree under `sys_root` ("/sys" on a node; tests
// pass a recorded tree): per device its PCI address, per port its state,
// physical state, link layer, rate, netdev, MTU (the netdev's, and the RoCE
// MTU it allows) and GID table with each entry's type. Unreadable entries are
// left out; a tree without devices gives an empty list and the note "none".
RdmaProbe ReadRdmaSysfs(const std::string& sys_root = "/sys");

// The RoCE path MTU (bytes) an Ethernet MTU allows, as the kernel derives a
// RoCE port's active MTU (iboe_get_mtu): the largest IB MTU of 256..4096 that
// fits the frame after the RoCE headers. 1500 -> 1024, 9000 -> 4096; 0 for 0.
int RoceActiveMtu(int netdev_mtu);

// Kinds of RoceWarning.
inline constexpr char kRoceMtuBelow9000[] = "mtu-below-9000";
inline constexpr char kRocePortHalfUnused[] = "port-half-unused";
inline constexpr char kRoceNoV2Gid[] = "no-rocev2-gid";
inline constexpr char kRoceGidIndexMismatch[] = "gid-index-mismatch";
inline constexpr char kRoceNoUsablePort[] = "no-usable-port";

// One thing that looks wrong, with the device and port it is about ("" and 0
// when it is about the node as a whole).
struct RoceWarning {
  std::string kind;
  std::string device;
  uint32_t port = 0;
  std::string message;  // one line: what is wrong and what to do
};

struct NcclNetworkSettings {
  std::vector<std::string> env;       // "NCCL_IB_HCA=...", "NCCL_IB_GID_INDEX=...", ...
  std::vector<RoceWarning> warnings;  // for logs and the cluster view
};

// The settings for NCCL over the active RoCE ports of `probe`: NCCL_IB_HCA
// (every active RoCE port, "=dev:port,..." so that mlx5_1 does not also match
// mlx5_10), NCCL_IB_GID_INDEX (the RoCE v2 entry of an IPv4 address),
// NCCL_SOCKET_IFNAME (those ports' interfaces). Empty env when there is no
// usable port (NCCL then chooses itself; a warning says why).
NcclNetworkSettings NcclSettingsFor(const RdmaProbe& probe);

}  // namespace octet::agent
