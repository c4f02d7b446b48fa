// What a node is: CPU, OS, memory, network interfaces, GPUs and RDMA devices,
// gathered from the kernel (/proc, /sys, getifaddrs), CUDA (when built with it
// and a driver is present) and rdma-core (when built with verbs).
//
// Interfaces also carry the link-discovery verdict: whether beacons go out on
// them. Loopback, down links, bridge/bond members and container or VM plumbing
// (docker0, br-<id>, virbr0, cni0, tunnels) are left out with a reason; plain
// veths that are not bridge members (our own network-namespace cabling, or a
// point-to-point link) are kept.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "octet/base/status.h"

namespace octet::agent {

struct InterfaceInfo {
  std::string name;
  int ifindex = 0;
  std::string mac;                // "aa:bb:cc:dd:ee:ff", "" when none
  std::vector<std::string> ipv4;  // "10.0.0.1/24"
  std::vector<std::string> ipv6;  // "fe80::1/64"
  uint64_t speed_mbps = 0;        // 0 when unknown (virtual links)
  uint32_t mtu = 0;
  bool up = false;  // IFF_UP and IFF_RUNNING
  bool loopback = false;
  std::string kind;  // "ethernet", "bridge", "veth", "bond", "vlan", "tunnel", "wireless", "other"
  std::string driver;          // from ethtool, "" when unknown
  std::string master;          // the bridge/bond it is enslaved to, "" when none
  bool discovery = false;      // beacons are sent and heard on it
  std::string discovery_note;  // why not, when !discovery
};

// Which interfaces link discovery uses, beyond the built-in policy above.
// Patterns are shell globs (fnmatch) on the interface name.
struct InterfaceFilter {
  std::vector<std::string> only;    // when non-empty, only these (still never loopback/down)
  std::vector<std::string> ignore;  // never these
};

// Every interface of this network namespace, with addresses and the discovery verdict.
Result<std::vector<InterfaceInfo>> ListInterfaces(const InterfaceFilter& filter = {});

// The discovery verdict for one interface: "" when beacons should go out on it,
// else the reason it is skipped. Pure (tests feed it made-up interfaces).
std::string DiscoveryExclusionReason(const InterfaceInfo& nic, const InterfaceFilter& filter);

struct CpuFacts {
  std::string model;   // "Intel(R) Xeon(R) ...", "10x Cortex-X925 + 10x Cortex-A725"
  uint32_t cores = 0;  // online logical CPUs
  std::string arch;    // uname machine
};
// `cpuinfo` is /proc/cpuinfo text; on Arm (no "model name") the core types are
// named from the implementer/part codes.
std::string CpuModelFromCpuinfo(const std::string& cpuinfo);
CpuFacts ReadCpuFacts();

// "Debian GNU/Linux 12 (bookworm), kernel 6.1.0-18-amd64".
std::string ReadOsDescription();
std::string ReadHostname();

struct GpuFacts {
  std::string name;
  uint32_t cc_major = 0;
  uint32_t cc_minor = 0;
  uint64_t memory_bytes = 0;    // cuDeviceTotalMem
  uint64_t free_bytes = 0;      // cuMemGetInfo (0 when a context could not be made)
  bool unified_memory = false;  // integrated GPU sharing system memory (GB10)
};
struct GpuProbe {
  std::vector<GpuFacts> gpus;
  std::string note;  // why `gpus` is empty: "not built with CUDA", "no CUDA driver (...)", ...
};
// Loads the CUDA driver at run time (dlopen libcuda.so.1), so a build with CUDA
// still runs on a node without a driver: that gives an empty list and a note.
GpuProbe ProbeGpus();

// One entry of a port's GID table.
struct RdmaGid {
  int index = 0;
  std::string gid;     // "fe80::...", "::ffff:10.0.0.1"
  std::string type;    // "RoCE v2", "IB/RoCE v1", "" when unknown
  std::string netdev;  // the interface the entry belongs to, when known
};
struct RdmaPortFacts {
  uint32_t port = 0;
  std::string state;       // "ACTIVE", "DOWN", ...
  std::string phys_state;  // "LinkUp", "Disabled", "Polling", ...; "" unknown (sysfs reader)
  std::string link_layer;  // "Ethernet" (RoCE) or "InfiniBand"
  std::vector<std::string> gids;   // "INDEX:GID" of the non-zero entries
  std::vector<RdmaGid> gid_table;  // the same with types (sysfs reader)
  std::string netdev;              // the port's Ethernet interface, when known
  int mtu = 0;                     // that interface's MTU in bytes; 0: unknown
  int active_mtu = 0;              // RoCE path MTU in bytes (256..4096); 0: unknown
  std::string rate;                // "200 Gb/sec (4X HDR)"; "" when unreadable
};
struct RdmaDeviceFacts {
  std::string name;         // "mlx5_0", "rocep1s0f0"
  std::string netdev;       // backing Ethernet interface, when known
  std::string pci_address;  // "0000:01:00.0", when known
  std::vector<RdmaPortFacts> ports;
};
struct RdmaProbe {
  std::vector<RdmaDeviceFacts> devices;
  std::string note;  // "none" when the build has verbs but there are no devices
};
// Through rdma-core (libibverbs) when built with it.
RdmaProbe ProbeRdma();

}  // namespace octet::agent
