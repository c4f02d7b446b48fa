// RDMA devices through rdma-core (libibverbs, loaded at run time), when the
// build has verbs. A machine without RDMA hardware (or without the kernel
// modules) gives an empty list and the note "none"; one without libibverbs
// says so in the note.
#include <string>

#include "octet/agent/node_facts.h"
#include "octet/base/file_util.h"

#if OCTET_HAVE_VERBS
#include <arpa/inet.h>
#include <dirent.h>

#include "octet/collectives/verbs_api.h"
#endif

namespace octet::agent {

#if OCTET_HAVE_VERBS
namespace {

std::string PortState(ibv_port_state s) {
  switch (s) {
    case IBV_PORT_NOP:
      return "NOP";
    case IBV_PORT_DOWN:
      return "DOWN";
    case IBV_PORT_INIT:
      return "INIT";
    case IBV_PORT_ARMED:
      return "ARMED";
    case IBV_PORT_ACTIVE:
      return "ACTIVE";
    case IBV_PORT_ACTIVE_DEFER:
      return "ACTIVE_DEFER";
  }
  return "UNKNOWN";
}

// The Ethernet interface behind an RDMA device: /sys/class/infiniband/<dev>/device/net/<if>.
std::string BackingNetdev(const std::string& dev) {
  const std::string dir = "/sys/class/infiniband/" + dev + "/device/net";
  DIR* d = ::opendir(dir.c_str());
  if (!d) return "";
  std::string name;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    name = e->d_name;
    break;
  }
  ::closedir(d);
  return name;
}

}  // namespace

RdmaProbe ProbeRdma() {
  RdmaProbe probe;
  auto api = octet::collectives::LoadVerbs();
  if (!api.ok()) {
    probe.note = "none (" + api.status().message() + ")";
    return probe;
  }
  const octet::collectives::VerbsApi& v = **api;
  int n = 0;
  ibv_device** list = v.get_device_list(&n);
  if (!list || n == 0) {
    if (list) v.free_device_list(list);
    probe.note = "none";
    return probe;
  }
  for (int i = 0; i < n; ++i) {
    RdmaDeviceFacts dev;
    dev.name = v.get_device_name(list[i]);
    dev.netdev = BackingNetdev(dev.name);
    ibv_context* ctx = v.open_device(list[i]);
    if (ctx) {
      ibv_device_attr attr{};
      if (v.query_device(ctx, &attr) == 0) {
        for (uint8_t p = 1; p <= attr.phys_port_cnt; ++p) {
          ibv_port_attr pa{};
          if (v.query_port(ctx, p, &pa) != 0) continue;
          RdmaPortFacts port;
          port.port = p;
          port.state = PortState(pa.state);
          port.link_layer = pa.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "InfiniBand";
          for (int g = 0; g < pa.gid_tbl_len && g < 16; ++g) {
            ibv_gid gid{};
            if (v.query_gid(ctx, p, g, &gid) != 0) continue;
            bool zero = true;
            for (uint8_t b : gid.raw) zero = zero && b == 0;
            if (zero) continue;
            char buf[INET6_ADDRSTRLEN] = {};
            ::inet_ntop(AF_INET6, gid.raw, buf, sizeof buf);
            port.gids.push_back(std::to_string(g) + ":" + buf);
          }
          dev.ports.push_back(std::move(port));
        }
      }
      v.close_device(ctx);
    }
    probe.devices.push_back(std::move(dev));
  }
  v.free_device_list(list);
  return probe;
}

#else

RdmaProbe ProbeRdma() {
  RdmaProbe probe;
  probe.note = "not built with rdma-core (libibverbs-dev)";
  return probe;
}

#endif

}  // namespace octet::agent
