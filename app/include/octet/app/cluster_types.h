// Plain C++ values of what agents report: node facts, telemetry samples, link
// observations, probe results and jobs. The cluster client translates the wire
// messages into these, so nothing above app/ sees protobuf. All are copyable
// values: a GUI model can keep them, compare them and hand them across threads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "octet/wire/job.h"  // JobSpec, JobKind, WorkerFigures (plain structs)

namespace octet::app {

using wire::JobKind;
using wire::JobKindName;
using wire::JobSpec;
using wire::WorkerFigures;

struct InterfaceFacts {
  std::string name;
  std::string mac;
  std::vector<std::string> addresses;  // "10.0.0.1/24", "fe80::1/64"
  uint64_t speed_mbps = 0;             // 0: unknown (virtual)
  uint32_t mtu = 0;
  bool up = false;
  std::string kind;            // "ethernet", "veth", "bridge", ...
  bool discovery = false;      // beacons go out on it
  std::string discovery_note;  // why not
};

struct GpuFacts {
  std::string name;
  uint32_t cc_major = 0;
  uint32_t cc_minor = 0;
  uint64_t memory_bytes = 0;
  bool unified_memory = false;
};

// One non-zero entry of an RDMA port's GID table.
struct RdmaGidEntry {
  uint32_t index = 0;
  std::string gid;     // "fe80::a00:ff:fe00:1", "::ffff:10.0.0.1"
  std::string type;    // "RoCE v2", "IB/RoCE v1", "" unknown
  std::string netdev;  // the interface it belongs to
};

struct RdmaPortFacts {
  uint32_t port = 0;
  std::string state;              // "ACTIVE", "DOWN", ...
  std::string link_layer;         // "Ethernet" (RoCE) or "InfiniBand"
  std::vector<std::string> gids;  // "INDEX:GID"
  std::string phys_state;         // "LinkUp", "Disabled", ...; "" unknown
  std::string netdev;             // the port's Ethernet interface
  uint32_t active_mtu = 0;        // RoCE path MTU in bytes; 0 unknown
  uint32_t netdev_mtu = 0;        // the interface's MTU in bytes; 0 unknown
  std::string rate;               // "200 Gb/sec (4X HDR)"; "" unknown
  std::vector<RdmaGidEntry> gid_table;
};

struct RdmaDeviceFacts {
  std::string name;
  std::string netdev;
  std::string pci_address;  // "0000:01:00.0"
  std::vector<RdmaPortFacts> ports;
};

// What the agent finds wrong in its node's RoCE set-up (kinds as in
// agent/roce.h: "mtu-below-9000", "port-half-unused", "no-rocev2-gid",
// "gid-index-mismatch", "no-usable-port"; others may come from newer agents).
struct RoceWarning {
  std::string kind;
  std::string device;  // "" : the node as a whole
  uint32_t port = 0;
  std::string message;
};

// The NCCL network settings the agent gives (or would give) a node's NCCL jobs:
// each the value after "NAME=", "" when unset.
struct NcclNetworkFacts {
  std::string ib_hca;         // NCCL_IB_HCA
  std::string socket_ifname;  // NCCL_SOCKET_IFNAME
  std::string ib_gid_index;   // NCCL_IB_GID_INDEX
  bool applied = false;       // given to the node's --algo nccl jobs
};

struct MemoryFacts {
  uint64_t total_bytes = 0;  // kernel MemTotal, or the simulated budget
  uint64_t available_bytes = 0;
  uint64_t budget_bytes = 0;     // 0 on a real node
  bool unified = false;          // CPU and GPU share it (GB10)
  uint64_t gpu_total_bytes = 0;  // from CUDA
  uint64_t gpu_free_bytes = 0;
};

struct NodeFacts {
  std::string node_id;
  std::string hostname;
  std::string os;
  std::string cpu_model;
  uint32_t cpu_cores = 0;
  std::string cpu_arch;
  MemoryFacts memory;
  std::vector<GpuFacts> gpus;
  std::string gpu_note;  // why gpus is empty
  std::vector<InterfaceFacts> interfaces;
  std::vector<RdmaDeviceFacts> rdma_devices;
  std::string rdma_note;  // why rdma_devices is empty ("none")
  NcclNetworkFacts nccl;
  std::vector<RoceWarning> roce_warnings;
  std::string agent_version;
  std::vector<std::string> model_roots;
  bool simulated = false;  // a node of the local embedded cluster
  std::string address;     // the agent's own listening address
  uint32_t probe_port = 0;
  std::string declared_cabling;  // "ring"/"switch" for simulated nodes
};

struct InterfaceCounters {
  std::string name;
  uint64_t rx_bytes = 0;
  uint64_t tx_bytes = 0;
};

struct TelemetrySample {
  std::string node_id;
  int64_t unix_ms = 0;
  uint64_t mem_total_bytes = 0;
  uint64_t mem_used_bytes = 0;
  uint64_t mem_available_bytes = 0;
  double cpu_busy = 0;  // 0..1, all CPUs, since the previous sample of the stream
  std::vector<InterfaceCounters> interfaces;
  std::vector<WorkerFigures> workers;
};

struct LinkObservation {
  std::string local_interface;
  std::string peer_node_id;
  std::string peer_interface;
  std::string peer_address;  // where the peer's beacon came from on this link
  uint32_t peer_probe_port = 0;
  int64_t last_heard_unix_ms = 0;
};

struct LinksReport {
  std::string node_id;
  std::vector<LinkObservation> observations;
  std::string declared_cabling;
  std::vector<std::string> beacon_interfaces;
  uint32_t beacon_port = 0;
  uint32_t probe_port = 0;
};

struct LinkProbeResult {
  double rtt_us_p50 = 0;
  double rtt_us_p99 = 0;
  double throughput_gbps = 0;
  uint32_t round_trips = 0;
  uint64_t bytes = 0;
};

struct JobStartResult {
  std::string job_id;
  uint32_t pid = 0;
  std::string rendezvous;  // as the worker got it (rank 0's resolved port)
};

struct JobStatus {
  JobSpec spec;
  std::string state;  // "running", "exited", "failed", "stopped"
  int32_t exit_code = 0;
  int32_t signal = 0;
  std::string exit_reason;  // "exit code 3: error: ..."
  std::string last_error_line;
  int64_t started_unix_ms = 0;
  int64_t ended_unix_ms = 0;
  uint32_t pid = 0;
  std::vector<std::string> argv;
};

}  // namespace octet::app
