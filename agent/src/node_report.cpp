// What a node reports about itself: its facts (CPU, memory, GPUs, network
// interfaces, RDMA devices and the NCCL settings they call for) and its
// telemetry samples. Part of AgentServer::Impl (agent_state.h).
#include <algorithm>

#include "agent_state.h"
#include "octet/agent/roce.h"
#include "octet/base/clock.h"
#include "octet/v1/node.pb.h"
#include "octet/v1/telemetry.pb.h"
#include "octet/wire/proto_convert.h"

namespace octet::agent {

void AgentServer::Impl::FillRdma(v1::NodeFacts* f) const {
  const std::string root = RdmaSysRoot();
  if (root.empty()) {
    f->set_rdma_note("simulated node (no RDMA devices of its own)");
    return;
  }
  const RdmaProbe rdma = ReadRdmaSysfs(root);
  for (const auto& d : rdma.devices) {
    auto* pd = f->add_rdma_devices();
    pd->set_name(d.name);
    pd->set_netdev(d.netdev);
    pd->set_pci_address(d.pci_address);
    for (const auto& p : d.ports) {
      auto* pp = pd->add_ports();
      pp->set_port(p.port);
      pp->set_state(p.state);
      pp->set_phys_state(p.phys_state);
      pp->set_link_layer(p.link_layer);
      for (const auto& g : p.gids) pp->add_gids(g);
      pp->set_netdev(p.netdev);
      pp->set_netdev_mtu(static_cast<uint32_t>(std::max(p.mtu, 0)));
      pp->set_active_mtu(static_cast<uint32_t>(std::max(p.active_mtu, 0)));
      pp->set_rate(p.rate);
      for (const auto& g : p.gid_table) {
        auto* pg = pp->add_gid_table();
        pg->set_index(static_cast<uint32_t>(g.index));
        pg->set_gid(g.gid);
        pg->set_type(g.type);
        pg->set_netdev(g.netdev);
      }
    }
  }
  f->set_rdma_note(rdma.note);
  const NcclNetworkSettings nccl = NcclSettingsFor(rdma);
  auto* pn = f->mutable_nccl();
  for (const std::string& kv : nccl.env) {
    const size_t eq = kv.find('=');
    const std::string name = kv.substr(0, eq), value = kv.substr(eq + 1);
    if (name == "NCCL_IB_HCA") pn->set_ib_hca(value);
    if (name == "NCCL_SOCKET_IFNAME") pn->set_socket_ifname(value);
    if (name == "NCCL_IB_GID_INDEX") pn->set_ib_gid_index(value);
  }
  pn->set_applied(!simulated() && !nccl.env.empty());
  for (const RoceWarning& w : nccl.warnings) {
    auto* pw = f->add_roce_warnings();
    pw->set_kind(w.kind);
    pw->set_device(w.device);
    pw->set_port(w.port);
    pw->set_message(w.message);
  }
}

void AgentServer::Impl::FillMemory(uint64_t* total, uint64_t* available, uint64_t* used) const {
  if (simulated()) {
    uint64_t jobs = 0;
    for (const auto& f : supervisor->Figures()) jobs += f.memory_bytes;
    *total = config.memory_budget_bytes;
    *used = std::min(jobs, *total);
    *available = *total - *used;
    return;
  }
  auto m = ReadMemInfo();
  *total = m.ok() ? m->total_bytes : 0;
  *available = m.ok() ? m->available_bytes : 0;
  *used = *total > *available ? *total - *available : 0;
}

void AgentServer::Impl::FillFacts(v1::NodeFacts* f) const {
  f->set_node_id(node_id);
  f->set_hostname(hostname);
  f->set_os(os);
  f->set_agent_version(OCTET_VERSION);
  f->set_address(address);
  f->set_simulated(simulated());
  f->set_probe_port(probe_port);
  f->set_declared_cabling(config.declared_cabling);
  for (const auto& r : config.model_roots) f->add_model_roots(r);
  auto* c = f->mutable_cpu();
  c->set_model(cpu.model);
  c->set_cores(cpu.cores);
  c->set_arch(cpu.arch);

  const GpuProbe gpus = ProbeGpus();
  auto* m = f->mutable_memory();
  uint64_t total = 0, available = 0, used = 0;
  FillMemory(&total, &available, &used);
  m->set_total_bytes(total);
  m->set_available_bytes(available);
  m->set_budget_bytes(config.memory_budget_bytes);
  for (const auto& g : gpus.gpus) {
    auto* pg = f->add_gpus();
    pg->set_name(g.name);
    pg->set_cc_major(g.cc_major);
    pg->set_cc_minor(g.cc_minor);
    pg->set_memory_bytes(g.memory_bytes);
    pg->set_unified_memory(g.unified_memory);
  }
  if (!gpus.gpus.empty()) {
    m->set_unified(gpus.gpus[0].unified_memory);
    m->set_gpu_total_bytes(gpus.gpus[0].memory_bytes);
    m->set_gpu_free_bytes(gpus.gpus[0].free_bytes);
  }
  f->set_gpu_note(gpus.note);

  if (auto nics = ListInterfaces(config.interfaces); nics.ok()) {
    for (const auto& n : *nics) {
      if (n.loopback) continue;
      auto* pn = f->add_interfaces();
      pn->set_name(n.name);
      pn->set_mac(n.mac);
      for (const auto& a : n.ipv4) pn->add_addresses(a);
      for (const auto& a : n.ipv6) pn->add_addresses(a);
      pn->set_speed_mbps(n.speed_mbps);
      pn->set_mtu(n.mtu);
      pn->set_up(n.up);
      pn->set_kind(n.kind);
      pn->set_discovery(config.discovery && n.discovery);
      pn->set_discovery_note(!config.discovery ? "discovery off (simulated node)"
                                               : n.discovery_note);
    }
  }
  FillRdma(f);
}

void AgentServer::Impl::FillSample(v1::TelemetrySample* s, CpuTimes* cpu_prev) const {
  s->set_node_id(node_id);
  s->set_unix_ms(UnixMs());
  uint64_t total = 0, available = 0, used = 0;
  FillMemory(&total, &available, &used);
  s->set_mem_total_bytes(total);
  s->set_mem_used_bytes(used);
  s->set_mem_available_bytes(available);
  if (auto now = ReadCpuTimes(); now.ok()) {
    s->set_cpu_busy(cpu_prev->total ? CpuBusyFraction(*cpu_prev, *now) : 0.0);
    *cpu_prev = *now;
  }
  if (auto counters = ReadNetDev(); counters.ok()) {
    for (const auto& c : *counters) {
      if (c.name == "lo") continue;
      auto* pc = s->add_interfaces();
      pc->set_name(c.name);
      pc->set_rx_bytes(c.rx_bytes);
      pc->set_tx_bytes(c.tx_bytes);
    }
  }
  for (const auto& w : supervisor->Figures()) wire::ToProto(w, s->add_workers());
}

}  // namespace octet::agent
