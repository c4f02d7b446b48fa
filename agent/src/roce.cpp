#include "octet/agent/roce.h"

#include <arpa/inet.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <system_error>

#include "octet/base/file_util.h"

namespace octet::agent {
namespace {

namespace fs = std::filesystem;

// A sysfs attribute's first line, trimmed; "" when it cannot be read (an
// unpopulated GID type reads as EINVAL).
std::string Attr(const fs::path& p) {
  auto text = ReadFileToString(p.string());
  if (!text.ok()) return "";
  std::string s = *text;
  if (const size_t nl = s.find('\n'); nl != std::string::npos) s.resize(nl);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\r')) s.pop_back();
  return s;
}

std::vector<std::string> Entries(const fs::path& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    names.push_back(it->path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// "fe80:0000:...:0001" (sysfs's full form) -> "fe80::1"; "" for the zero GID
// or text that is not an IPv6 address.
std::string CompactGid(const std::string& full) {
  in6_addr a{};
  if (::inet_pton(AF_INET6, full.c_str(), &a) != 1) return "";
  bool zero = true;
  for (uint8_t b : a.s6_addr) zero = zero && b == 0;
  if (zero) return "";
  char buf[INET6_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET6, &a, buf, sizeof buf);
  return buf;
}

bool IsIpv4Mapped(const std::string& gid) {
  return gid.rfind("::ffff:", 0) == 0 && gid.find('.') != std::string::npos;
}

// "0000:01:00.0" -> "01:00.0": a ConnectX-7 port's two PCIe halves differ only
// in the PCI domain.
std::string WithoutDomain(const std::string& pci) {
  const size_t colon = pci.find(':');
  return colon == std::string::npos ? pci : pci.substr(colon + 1);
}

// "4: ACTIVE" -> "ACTIVE" (sysfs's state and phys_state carry the numeric code first).
std::string WithoutCode(std::string s) {
  if (const size_t colon = s.find(": "); colon != std::string::npos) s = s.substr(colon + 2);
  return s;
}

}  // namespace

int RoceActiveMtu(int netdev_mtu) {
  // Headers a RoCE packet carries besides its payload (GRH 40, UDP 8, BTH 12,
  // XRC ETH 4, atomic ETH 28, ICRC 4), as the kernel's iboe_get_mtu counts them.
  const int payload = netdev_mtu - (40 + 8 + 12 + 4 + 28 + 4);
  for (int mtu = 4096; mtu >= 256; mtu /= 2) {
    if (payload >= mtu) return mtu;
  }
  return 0;
}

RdmaProbe ReadRdmaSysfs(const std::string& sys_root) {
  RdmaProbe probe;
  const fs::path ib = fs::path(sys_root) / "class" / "infiniband";
  for (const std::string& name : Entries(ib)) {
    RdmaDeviceFacts dev;
    dev.name = name;
    std::error_code ec;
    const fs::path device_link = ib / name / "device";
    const fs::path target = fs::read_symlink(device_link, ec);
    if (!ec) dev.pci_address = target.filename().string();
    const std::vector<std::string> nets = Entries(device_link / "net");
    if (!nets.empty()) dev.netdev = nets.front();
    for (const std::string& port_name : Entries(ib / name / "ports")) {
      const fs::path pdir = ib / name / "ports" / port_name;
      RdmaPortFacts port;
      port.port = static_cast<uint32_t>(std::atoi(port_name.c_str()));
      port.state = WithoutCode(Attr(pdir / "state"));            // "4: ACTIVE"
      port.phys_state = WithoutCode(Attr(pdir / "phys_state"));  // "5: LinkUp"
      port.link_layer = Attr(pdir / "link_layer");
      port.rate = Attr(pdir / "rate");
      for (const std::string& idx : Entries(pdir / "gids")) {
        const std::string gid = CompactGid(Attr(pdir / "gids" / idx));
        if (gid.empty()) continue;
        RdmaGid g;
        g.index = std::atoi(idx.c_str());
        g.gid = gid;
        g.type = Attr(pdir / "gid_attrs" / "types" / idx);
        g.netdev = Attr(pdir / "gid_attrs" / "ndevs" / idx);
        port.gids.push_back(idx + ":" + gid);
        if (port.netdev.empty()) port.netdev = g.netdev;
        port.gid_table.push_back(std::move(g));
      }
      if (port.netdev.empty()) port.netdev = dev.netdev;
      if (!port.netdev.empty()) {
        port.mtu =
            std::atoi(Attr(fs::path(sys_root) / "class" / "net" / port.netdev / "mtu").c_str());
        // sysfs has no active_mtu; for RoCE the kernel derives it from the netdev's.
        if (port.link_layer == "Ethernet") port.active_mtu = RoceActiveMtu(port.mtu);
      }
      dev.ports.push_back(std::move(port));
    }
    probe.devices.push_back(std::move(dev));
  }
  if (probe.devices.empty()) probe.note = "none";
  return probe;
}

NcclNetworkSettings NcclSettingsFor(const RdmaProbe& probe) {
  NcclNetworkSettings out;
  auto warn = [&out](const char* kind, const std::string& device, uint32_t port,
                     std::string message) {
    out.warnings.push_back({kind, device, port, std::move(message)});
  };
  struct Used {
    const RdmaDeviceFacts* dev;
    const RdmaPortFacts* port;
    int gid_index;
  };
  std::vector<Used> used;
  // The RoCE ports of each physical port (PCI bus:dev.fn without the domain,
  // and the port number): on a ConnectX-7 of a Spark, its two PCIe halves.
  struct Half {
    const RdmaDeviceFacts* dev;
    const RdmaPortFacts* port;
    bool usable;
    std::string why_not;  // when !usable: "is DOWN", "has no RoCE v2 GID of an IPv4 address"
  };
  std::map<std::string, std::vector<Half>> halves_by_slot;
  for (const RdmaDeviceFacts& d : probe.devices) {
    const std::string slot = WithoutDomain(d.pci_address);
    for (const RdmaPortFacts& p : d.ports) {
      if (p.link_layer != "Ethernet") continue;
      std::vector<Half>& halves = halves_by_slot[slot + "/" + std::to_string(p.port)];
      if (p.state != "ACTIVE") {
        halves.push_back({&d, &p, false, "is " + (p.state.empty() ? "not active" : p.state)});
        continue;
      }
      int index = -1;
      for (const RdmaGid& g : p.gid_table) {
        if (g.type == "RoCE v2" && IsIpv4Mapped(g.gid)) {
          index = g.index;
          break;
        }
      }
      if (index < 0) {
        halves.push_back({&d, &p, false, "has no RoCE v2 GID of an IPv4 address"});
        continue;
      }
      halves.push_back({&d, &p, true, ""});
      used.push_back({&d, &p, index});
      if (p.mtu > 0 && p.mtu < 9000) {
        warn(kRoceMtuBelow9000, d.name, p.port,
             p.netdev + " (" + d.name + ") has MTU " + std::to_string(p.mtu) +
                 ": RoCE runs at a 4096-byte MTU only over jumbo frames; set MTU 9000 on both "
                 "ends");
      }
    }
  }
  for (const auto& [slot, halves] : halves_by_slot) {
    std::string in_use;
    for (const Half& h : halves) {
      if (h.usable) in_use += (in_use.empty() ? "" : ", ") + h.dev->name;
    }
    for (const Half& h : halves) {
      if (h.usable) continue;
      const std::string what = h.dev->name + " port " + std::to_string(h.port->port);
      const std::string netdev = h.port->netdev.empty() ? "its interface" : h.port->netdev;
      if (!in_use.empty()) {
        // The port is cabled (another half carries traffic): this half is missing.
        warn(kRocePortHalfUnused, h.dev->name, h.port->port,
             what + " " + h.why_not + " while " + in_use + " on the same physical port (" + slot +
                 ") is in use: NCCL gets half the port's bandwidth; bring " + netdev +
                 " up with an IPv4 address on the cluster network and MTU 9000");
      } else if (h.port->state == "ACTIVE") {
        warn(kRoceNoV2Gid, h.dev->name, h.port->port,
             what + " is active but has no RoCE v2 GID of an IPv4 address (give " + netdev +
                 " an IPv4 address on the cluster network)");
      }
      // Every half down: a port without a cable, nothing to say.
    }
  }
  if (used.empty()) {
    if (!probe.devices.empty()) {
      warn(kRoceNoUsablePort, "", 0,
           "no active RoCE port with a RoCE v2 IPv4 address: NCCL chooses its network itself");
    }
    return out;
  }
  std::map<int, int> index_count;
  for (const Used& u : used) ++index_count[u.gid_index];
  const int gid_index =
      std::max_element(index_count.begin(), index_count.end(), [](const auto& a, const auto& b) {
        return a.second < b.second;
      })->first;
  std::string hca = "=", ifnames = "=";
  std::vector<std::string> seen_if;
  for (const Used& u : used) {
    if (u.gid_index != gid_index) {
      warn(kRoceGidIndexMismatch, u.dev->name, u.port->port,
           u.dev->name + " port " + std::to_string(u.port->port) +
               " has its RoCE v2 IPv4 GID at index " + std::to_string(u.gid_index) + ", not " +
               std::to_string(gid_index) + " like the others: left out of NCCL_IB_HCA");
      continue;
    }
    hca += (hca.size() > 1 ? "," : "") + u.dev->name + ":" + std::to_string(u.port->port);
    if (!u.port->netdev.empty() &&
        std::find(seen_if.begin(), seen_if.end(), u.port->netdev) == seen_if.end()) {
      seen_if.push_back(u.port->netdev);
      ifnames += (ifnames.size() > 1 ? "," : "") + u.port->netdev;
    }
  }
  out.env.push_back("NCCL_IB_HCA=" + hca);
  out.env.push_back("NCCL_IB_GID_INDEX=" + std::to_string(gid_index));
  if (ifnames.size() > 1) out.env.push_back("NCCL_SOCKET_IFNAME=" + ifnames);
  return out;
}

}  // namespace octet::agent
