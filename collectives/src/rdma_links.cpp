#include "rdma_links.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "wire.h"

namespace octet::collectives {

namespace {

std::string Ipv4Text(uint32_t addr) {
  in_addr a{};
  a.s_addr = htonl(addr);
  char text[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &a, text, sizeof text);
  return text;
}

bool SameSubnet(uint32_t a, uint32_t b, int prefix_len) {
  if (prefix_len <= 0 || prefix_len > 32) return a == b;
  const uint32_t mask = prefix_len == 32 ? ~0u : ~0u << (32 - prefix_len);
  return (a & mask) == (b & mask);
}

std::string DescribePorts(const std::vector<RdmaPort>& ports) {
  if (ports.empty()) return "no RDMA port";
  std::string s;
  for (const RdmaPort& p : ports) s += (s.empty() ? "" : ", ") + DescribeRdmaPort(p);
  return s;
}

}  // namespace

std::string DescribeRdmaPort(const RdmaPort& p) {
  std::string s = p.device + " port " + std::to_string(p.port);
  if (p.ipv4 != 0) {
    s += " (" + Ipv4Text(p.ipv4);
    if (p.prefix_len > 0) s += "/" + std::to_string(p.prefix_len);
    s += ")";
  }
  return s;
}

uint32_t KernelSourceAddress(uint32_t dst) {
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(4791);  // RoCE v2's UDP port; connect() on UDP sends nothing
  to.sin_addr.s_addr = htonl(dst);
  uint32_t source = 0;
  if (connect(fd, reinterpret_cast<const sockaddr*>(&to), sizeof to) == 0) {
    sockaddr_in local{};
    socklen_t len = sizeof local;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      source = ntohl(local.sin_addr.s_addr);
    }
  }
  close(fd);
  return source;
}

int LocalPrefixLength(uint32_t addr) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return 0;
  int prefix = 0;
  for (ifaddrs* i = list; i != nullptr && prefix == 0; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !i->ifa_netmask) continue;
    if (ntohl(reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr) != addr) {
      continue;
    }
    const uint32_t mask =
        ntohl(reinterpret_cast<const sockaddr_in*>(i->ifa_netmask)->sin_addr.s_addr);
    prefix = __builtin_popcount(mask);
  }
  freeifaddrs(list);
  return prefix;
}

Result<std::vector<RdmaLink>> ChooseRdmaLinks(const std::vector<std::vector<RdmaPort>>& ports,
                                              int me, const SourceAddressFn& source) {
  const int n = static_cast<int>(ports.size());
  if (me < 0 || me >= n) return InvalidArgumentError("ChooseRdmaLinks: rank out of range");
  std::vector<RdmaLink> links(n);
  const std::vector<RdmaPort>& mine = ports[me];
  for (int peer = me + 1; peer < n; ++peer) {
    const std::vector<RdmaPort>& theirs = ports[peer];
    RdmaLink& link = links[peer];
    // 1. A shared subnet: a cable or a switch between the two ports. Both
    // ends' prefixes must agree that it is one subnet.
    for (size_t i = 0; i < mine.size() && link.local_port < 0; ++i) {
      for (size_t j = 0; j < theirs.size(); ++j) {
        const RdmaPort& a = mine[i];
        const RdmaPort& b = theirs[j];
        if (a.ipv4 == 0 || b.ipv4 == 0) continue;
        if (SameSubnet(a.ipv4, b.ipv4, a.prefix_len) && SameSubnet(a.ipv4, b.ipv4, b.prefix_len)) {
          link = {static_cast<int>(i), static_cast<int>(j), false};
          break;
        }
      }
    }
    // 2. Routed: the peer address whose route leaves through one of our ports.
    for (size_t j = 0; j < theirs.size() && link.local_port < 0; ++j) {
      if (theirs[j].ipv4 == 0) continue;
      const uint32_t from = source ? source(theirs[j].ipv4) : 0;
      if (from == 0) continue;
      for (size_t i = 0; i < mine.size(); ++i) {
        if (mine[i].ipv4 == from) {
          link = {static_cast<int>(i), static_cast<int>(j), true};
          break;
        }
      }
    }
    // 3. InfiniBand: ports without IPv4 are addressed by LID on one fabric.
    for (size_t i = 0; i < mine.size() && link.local_port < 0; ++i) {
      if (mine[i].ipv4 != 0) continue;
      for (size_t j = 0; j < theirs.size(); ++j) {
        if (theirs[j].ipv4 == 0) {
          link = {static_cast<int>(i), static_cast<int>(j), false};
          break;
        }
      }
    }
    if (link.local_port < 0) {
      return UnavailableError("RDMA: rank " + std::to_string(me) + " [" + DescribePorts(mine) +
                              "] shares no subnet with rank " + std::to_string(peer) + " [" +
                              DescribePorts(theirs) +
                              "] and has no route to it through one of its RDMA ports");
    }
  }
  return links;
}

Result<std::vector<RdmaLink>> AgreedRdmaLinks(const std::vector<std::vector<RdmaLink>>& choices,
                                              int me) {
  const int n = static_cast<int>(choices.size());
  if (me < 0 || me >= n) return InvalidArgumentError("AgreedRdmaLinks: rank out of range");
  std::vector<RdmaLink> links(n);
  for (int peer = 0; peer < n; ++peer) {
    if (peer == me) continue;
    const int low = std::min(me, peer), high = std::max(me, peer);
    if (static_cast<int>(choices[low].size()) != n) {
      return DataLossError("RDMA: rank " + std::to_string(low) + " sent " +
                           std::to_string(choices[low].size()) + " link choices for " +
                           std::to_string(n) + " ranks");
    }
    const RdmaLink& c = choices[low][high];
    if (c.local_port < 0 || c.peer_port < 0) {
      return DataLossError("RDMA: rank " + std::to_string(low) + " chose no link to rank " +
                           std::to_string(high));
    }
    links[peer] = me == low ? c : RdmaLink{c.peer_port, c.local_port, c.routed};
  }
  return links;
}

std::string EncodeRdmaPorts(const std::vector<RdmaPort>& ports) {
  WireWriter w;
  w.U32(static_cast<uint32_t>(ports.size()));
  for (const RdmaPort& p : ports) {
    w.Str(p.device)
        .U32(static_cast<uint32_t>(p.port))
        .U32(p.ipv4)
        .U32(static_cast<uint32_t>(p.prefix_len));
  }
  return w.Take();
}

Result<std::vector<RdmaPort>> DecodeRdmaPorts(std::string_view blob) {
  WireReader r(blob);
  const uint32_t count = r.U32();
  if (!r.ok() || count > 64)
    return DataLossError("RDMA: a bad port list (" + std::to_string(count) + " ports)");
  std::vector<RdmaPort> ports(count);
  for (RdmaPort& p : ports) {
    p.device = r.Str();
    p.port = static_cast<int>(r.U32());
    p.ipv4 = r.U32();
    p.prefix_len = static_cast<int>(r.U32());
  }
  if (!r.ok() || !r.at_end()) return DataLossError("RDMA: a truncated port list");
  return ports;
}

std::string EncodeRdmaLinks(const std::vector<RdmaLink>& links) {
  WireWriter w;
  w.U32(static_cast<uint32_t>(links.size()));
  for (const RdmaLink& l : links) {
    w.U32(static_cast<uint32_t>(l.local_port)).U32(static_cast<uint32_t>(l.peer_port)).U8(l.routed);
  }
  return w.Take();
}

Result<std::vector<RdmaLink>> DecodeRdmaLinks(std::string_view blob, int ranks) {
  WireReader r(blob);
  const uint32_t count = r.U32();
  if (!r.ok() || count != static_cast<uint32_t>(ranks)) {
    return DataLossError("RDMA: a link list for " + std::to_string(count) + " ranks, not " +
                         std::to_string(ranks));
  }
  std::vector<RdmaLink> links(count);
  for (RdmaLink& l : links) {
    l.local_port = static_cast<int>(r.U32());
    l.peer_port = static_cast<int>(r.U32());
    l.routed = r.U8() != 0;
  }
  if (!r.ok() || !r.at_end()) return DataLossError("RDMA: a truncated link list");
  return links;
}

}  // namespace octet::collectives
