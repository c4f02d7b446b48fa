#include "octet/agent/node_facts.h"

#include <arpa/inet.h>
#include <fnmatch.h>
#include <ifaddrs.h>
#include <linux/ethtool.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>

#include "octet/base/file_util.h"

namespace octet::agent {
namespace {

std::string Trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t b = 0;
  while (b < s.size() && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  return s.substr(b);
}

std::string ReadSys(const std::string& path) {
  auto r = ReadFileToString(path);
  return r.ok() ? Trim(*r) : std::string();
}

int PrefixLength(const sockaddr* mask) {
  if (!mask) return 0;
  const uint8_t* p = nullptr;
  size_t n = 0;
  if (mask->sa_family == AF_INET) {
    p = reinterpret_cast<const uint8_t*>(&reinterpret_cast<const sockaddr_in*>(mask)->sin_addr);
    n = 4;
  } else if (mask->sa_family == AF_INET6) {
    p = reinterpret_cast<const uint8_t*>(&reinterpret_cast<const sockaddr_in6*>(mask)->sin6_addr);
    n = 16;
  }
  int bits = 0;
  for (size_t i = 0; i < n; ++i) bits += __builtin_popcount(p[i]);
  return bits;
}

// The driver name ethtool reports ("veth", "bridge", "tun", "mlx5_core"); "" when unknown.
std::string EthtoolDriver(const std::string& name) {
  int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "";
  ethtool_drvinfo info{};
  info.cmd = ETHTOOL_GDRVINFO;
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, name.c_str(), IFNAMSIZ - 1);
  ifr.ifr_data = reinterpret_cast<char*>(&info);
  std::string driver;
  if (::ioctl(fd, SIOCETHTOOL, &ifr) == 0) driver = info.driver;
  ::close(fd);
  return driver;
}

std::string KindOf(const std::string& sys, const std::string& driver, bool loopback) {
  if (loopback) return "loopback";
  if (PathExists(sys + "/bridge")) return "bridge";
  if (PathExists(sys + "/bonding")) return "bond";
  if (PathExists(sys + "/wireless") || PathExists(sys + "/phy80211")) return "wireless";
  const std::string uevent = ReadSys(sys + "/uevent");
  if (uevent.find("DEVTYPE=vlan") != std::string::npos) return "vlan";
  if (uevent.find("DEVTYPE=wlan") != std::string::npos) return "wireless";
  if (driver == "veth") return "veth";
  if (driver == "tun" || driver == "wireguard" || driver == "vxlan" || driver == "ipip" ||
      driver == "gre" || uevent.find("DEVTYPE=wireguard") != std::string::npos ||
      ReadSys(sys + "/type") == "65534") {
    return "tunnel";
  }
  if (ReadSys(sys + "/type") == "1") return "ethernet";
  return "other";
}

std::string ReadLinkTarget(const std::string& path) {
  char buf[4096];
  const ssize_t n = ::readlink(path.c_str(), buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

bool NameHasPrefix(const std::string& name, std::initializer_list<const char*> prefixes) {
  for (const char* p : prefixes) {
    if (name.rfind(p, 0) == 0) return true;
  }
  return false;
}

bool MatchesAny(const std::string& name, const std::vector<std::string>& patterns) {
  for (const auto& p : patterns) {
    if (::fnmatch(p.c_str(), name.c_str(), 0) == 0) return true;
  }
  return false;
}

}  // namespace

std::string DiscoveryExclusionReason(const InterfaceInfo& nic, const InterfaceFilter& filter) {
  if (nic.loopback) return "loopback";
  if (!nic.up) return "down";
  if (MatchesAny(nic.name, filter.ignore)) return "ignored by configuration";
  if (!filter.only.empty()) {
    return MatchesAny(nic.name, filter.only) ? "" : "not in the configured interface list";
  }
  if (!nic.master.empty()) {
    return (nic.kind == "veth" ? "container/VM link, member of " : "member of ") + nic.master;
  }
  // Container and VM networking the host manages: traffic on them never leaves the machine.
  if (NameHasPrefix(nic.name, {"docker", "br-", "virbr", "lxcbr", "lxdbr", "cni", "podman",
                               "flannel", "cali", "weave", "kube-", "cilium", "vnet", "vmnet"})) {
    return "container or VM network";
  }
  if (nic.kind == "tunnel") return "tunnel (not a cable)";
  return "";
}

Result<std::vector<InterfaceInfo>> ListInterfaces(const InterfaceFilter& filter) {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) {
    return UnavailableError(std::string("getifaddrs: ") + std::strerror(errno));
  }
  std::map<std::string, InterfaceInfo> by_name;
  for (ifaddrs* a = list; a; a = a->ifa_next) {
    if (!a->ifa_name) continue;
    InterfaceInfo& nic = by_name[a->ifa_name];
    nic.name = a->ifa_name;
    nic.up = (a->ifa_flags & IFF_UP) && (a->ifa_flags & IFF_RUNNING);
    nic.loopback = (a->ifa_flags & IFF_LOOPBACK) != 0;
    if (!a->ifa_addr) continue;
    char buf[INET6_ADDRSTRLEN] = {};
    if (a->ifa_addr->sa_family == AF_INET) {
      ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, buf, sizeof buf);
      nic.ipv4.push_back(std::string(buf) + "/" + std::to_string(PrefixLength(a->ifa_netmask)));
    } else if (a->ifa_addr->sa_family == AF_INET6) {
      ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(a->ifa_addr)->sin6_addr, buf,
                  sizeof buf);
      nic.ipv6.push_back(std::string(buf) + "/" + std::to_string(PrefixLength(a->ifa_netmask)));
    }
  }
  ::freeifaddrs(list);

  std::vector<InterfaceInfo> out;
  for (auto& [name, nic] : by_name) {
    const std::string sys = "/sys/class/net/" + name;
    nic.ifindex = static_cast<int>(::if_nametoindex(name.c_str()));
    nic.mac = ReadSys(sys + "/address");
    if (nic.mac == "00:00:00:00:00:00") nic.mac.clear();
    const std::string mtu = ReadSys(sys + "/mtu");
    nic.mtu = mtu.empty() ? 0 : static_cast<uint32_t>(std::strtoul(mtu.c_str(), nullptr, 10));
    // Reading `speed` fails (EINVAL) for links that are down or have none.
    const std::string speed = ReadSys(sys + "/speed");
    const long s = speed.empty() ? 0 : std::strtol(speed.c_str(), nullptr, 10);
    nic.speed_mbps = s > 0 ? static_cast<uint64_t>(s) : 0;
    nic.driver = nic.loopback ? "" : EthtoolDriver(name);
    nic.kind = KindOf(sys, nic.driver, nic.loopback);
    if (PathExists(sys + "/master")) nic.master = BaseName(ReadLinkTarget(sys + "/master"));
    nic.discovery_note = DiscoveryExclusionReason(nic, filter);
    nic.discovery = nic.discovery_note.empty();
    out.push_back(std::move(nic));
  }
  std::sort(out.begin(), out.end(),
            [](const InterfaceInfo& a, const InterfaceInfo& b) { return a.ifindex < b.ifindex; });
  return out;
}

std::string CpuModelFromCpuinfo(const std::string& cpuinfo) {
  // x86 and some Arm kernels: "model name : ...".
  size_t pos = 0;
  std::map<std::string, int> arm_parts;  // "implementer:part" -> count
  std::string implementer;
  while (pos < cpuinfo.size()) {
    size_t end = cpuinfo.find('\n', pos);
    if (end == std::string::npos) end = cpuinfo.size();
    const std::string line = cpuinfo.substr(pos, end - pos);
    pos = end + 1;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = Trim(line.substr(0, colon));
    const std::string value = Trim(line.substr(colon + 1));
    if (key == "model name" && !value.empty()) return value;
    if (key == "CPU implementer") implementer = value;
    if (key == "CPU part") ++arm_parts[implementer + ":" + value];
  }
  if (arm_parts.empty()) return "unknown";
  // Arm Ltd. (0x41) cores that DGX Spark (GB10) and Grace use; others by code.
  static const std::map<std::string, std::string> kArmNames = {
      {"0x41:0xd85", "Cortex-X925"}, {"0x41:0xd87", "Cortex-A725"}, {"0x41:0xd4f", "Neoverse-V2"},
      {"0x41:0xd0c", "Neoverse-N1"}, {"0x41:0xd40", "Neoverse-V1"}, {"0x41:0xd49", "Neoverse-N2"},
      {"0x41:0xd81", "Cortex-A720"}, {"0x41:0xd82", "Cortex-X4"}};
  std::string model;
  for (const auto& [code, count] : arm_parts) {
    auto it = kArmNames.find(code);
    if (!model.empty()) model += " + ";
    model +=
        std::to_string(count) + "x " + (it != kArmNames.end() ? it->second : "Arm core " + code);
  }
  return model;
}

CpuFacts ReadCpuFacts() {
  CpuFacts f;
  auto info = ReadFileToString("/proc/cpuinfo");
  f.model = info.ok() ? CpuModelFromCpuinfo(*info) : "unknown";
  const long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  f.cores = n > 0 ? static_cast<uint32_t>(n) : 0;
  utsname u{};
  if (::uname(&u) == 0) f.arch = u.machine;
  return f;
}

std::string ReadOsDescription() {
  std::string pretty;
  for (const char* path : {"/etc/os-release", "/usr/lib/os-release"}) {
    auto text = ReadFileToString(path);
    if (!text.ok()) continue;
    size_t p = text->find("PRETTY_NAME=");
    if (p == std::string::npos) continue;
    size_t e = text->find('\n', p);
    pretty = Trim(text->substr(p + 12, e == std::string::npos ? std::string::npos : e - p - 12));
    if (pretty.size() >= 2 && (pretty.front() == '"' || pretty.front() == '\'')) {
      pretty = pretty.substr(1, pretty.size() - 2);
    }
    break;
  }
  utsname u{};
  std::string kernel = ::uname(&u) == 0 ? std::string(u.sysname) + " " + u.release : "";
  if (pretty.empty()) return kernel;
  return pretty + ", kernel " + (::uname(&u) == 0 ? std::string(u.release) : "?");
}

std::string ReadHostname() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "";
  return buf;
}

}  // namespace octet::agent
