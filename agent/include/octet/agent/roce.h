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
// pass a recorded tree): per device its PCI address, per port its state, link
// layer, netdev, MTU and GID table with each entry's type. Unreadable entries
// are left out; a tree without devices gives an empty list and the note "none".
RdmaProbe ReadRdmaSysfs(const std::string& sys_root = "/sys");

struct NcclNetworkSettings {
  std::vector<std::string> env;       // "NCCL_IB_HCA=...", "NCCL_IB_GID_INDEX=...", ...
  std::vector<std::string> warnings;  // one line each, for logs and the cluster view
};

// The settings for NCCL over the active RoCE ports of `probe`: NCCL_IB_HCA
// (every active RoCE port, "=dev:port,..." so that mlx5_1 does not also match
// mlx5_10), NCCL_IB_GID_INDEX (the RoCE v2 entry of an IPv4 address),
// NCCL_SOCKET_IFNAME (those ports' interfaces). Empty env when there is no
// usable port (NCCL then chooses itself; a warning says why).
NcclNetworkSettings NcclSettingsFor(const RdmaProbe& probe);

}  // namespace octet::agent
