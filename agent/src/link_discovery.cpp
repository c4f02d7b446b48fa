#include "octet/agent/link_discovery.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <thread>

#include "octet/agent/cluster_token.h"
#include "octet/base/clock.h"
#include "octet/base/deadline.h"
#include "octet/base/log.h"

namespace octet::agent {
namespace {

constexpr std::string_view kMagic = "octet-beacon/1";

bool Printable(std::string_view s) {
  if (s.empty() || s.size() > 64) return false;
  for (char c : s) {
    if (c <= ' ' || c > '~') return false;
  }
  return true;
}

std::string Errno(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

}  // namespace

std::string EncodeBeacon(const BeaconMessage& b, std::string_view token) {
  const std::string body = std::string(kMagic) + " " + b.node_id + " " + b.interface + " " +
                           std::to_string(b.probe_port);
  return body + " " + HmacSha256Hex(token, body);
}

Result<BeaconMessage> DecodeBeacon(std::string_view d, std::string_view token) {
  if (d.size() > 512) return InvalidArgumentError("beacon: too long");
  const size_t last = d.rfind(' ');
  if (last == std::string_view::npos) return InvalidArgumentError("beacon: no signature");
  const std::string_view body = d.substr(0, last);
  const std::string_view mac = d.substr(last + 1);
  if (!ConstantTimeEquals(HmacSha256Hex(token, body), mac)) {
    return UnauthenticatedError("beacon: bad signature (another cluster, or a different token)");
  }
  std::vector<std::string_view> words;
  size_t p = 0;
  while (p <= body.size()) {
    size_t e = body.find(' ', p);
    if (e == std::string_view::npos) e = body.size();
    words.push_back(body.substr(p, e - p));
    p = e + 1;
  }
  if (words.size() != 4 || words[0] != kMagic) return InvalidArgumentError("beacon: bad format");
  BeaconMessage b;
  if (!Printable(words[1]) || !Printable(words[2]))
    return InvalidArgumentError("beacon: bad names");
  b.node_id = std::string(words[1]);
  b.interface = std::string(words[2]);
  unsigned port = 0;
  auto r = std::from_chars(words[3].data(), words[3].data() + words[3].size(), port);
  if (r.ec != std::errc() || r.ptr != words[3].data() + words[3].size() || port > 65535) {
    return InvalidArgumentError("beacon: bad probe port");
  }
  b.probe_port = static_cast<uint16_t>(port);
  return b;
}

void LinkTable::Record(const std::string& local_interface, const BeaconMessage& beacon,
                       const std::string& peer_address, bool via_ipv4) {
  std::lock_guard<std::mutex> lock(mu_);
  for (Entry& e : entries_) {
    LinkObservationRecord& r = e.record;
    if (r.local_interface == local_interface && r.peer_node_id == beacon.node_id &&
        r.peer_interface == beacon.interface) {
      r.last_heard_unix_ms = UnixMs();
      r.last_heard_mono_ns = NowNs();
      r.peer_probe_port = beacon.probe_port;
      // An IPv4 address is the one to probe when the link has both.
      if (via_ipv4 || !e.via_ipv4) {
        r.peer_address = peer_address;
        e.via_ipv4 = via_ipv4;
      }
      return;
    }
  }
  Entry e;
  e.record = {local_interface,   beacon.node_id, beacon.interface, peer_address,
              beacon.probe_port, UnixMs(),       NowNs()};
  e.via_ipv4 = via_ipv4;
  entries_.push_back(std::move(e));
}

std::vector<LinkObservationRecord> LinkTable::Current(int64_t stale_after_ms) const {
  const int64_t now = NowNs();
  std::vector<LinkObservationRecord> out;
  std::lock_guard<std::mutex> lock(mu_);
  for (const Entry& e : entries_) {
    if (now - e.record.last_heard_mono_ns <= stale_after_ms * 1'000'000) out.push_back(e.record);
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return std::tie(a.local_interface, a.peer_node_id, a.peer_interface) <
           std::tie(b.local_interface, b.peer_node_id, b.peer_interface);
  });
  return out;
}

struct LinkDiscovery::Thread {
  std::thread thread;
};

Result<std::unique_ptr<LinkDiscovery>> LinkDiscovery::Start(LinkDiscoveryOptions options) {
  if (options.node_id.empty() || options.token.empty()) {
    return InvalidArgumentError("link discovery: node id and token are required");
  }
  std::unique_ptr<LinkDiscovery> d(new LinkDiscovery);
  d->options_ = std::move(options);
  const int one = 1;

  // IPv4: one socket for sending and receiving, with the arrival interface reported.
  d->fd4_ = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (d->fd4_ < 0) return UnavailableError(Errno("beacon socket"));
  ::setsockopt(d->fd4_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  ::setsockopt(d->fd4_, SOL_SOCKET, SO_BROADCAST, &one, sizeof one);
  ::setsockopt(d->fd4_, IPPROTO_IP, IP_PKTINFO, &one, sizeof one);
  sockaddr_in a4{};
  a4.sin_family = AF_INET;
  a4.sin_addr.s_addr = htonl(INADDR_ANY);
  a4.sin_port = htons(d->options_.port);
  if (::bind(d->fd4_, reinterpret_cast<sockaddr*>(&a4), sizeof a4) != 0) {
    return UnavailableError(
        Errno(("beacon bind UDP port " + std::to_string(d->options_.port)).c_str()));
  }
  socklen_t len = sizeof a4;
  ::getsockname(d->fd4_, reinterpret_cast<sockaddr*>(&a4), &len);
  d->port_ = ntohs(a4.sin_port);

  // IPv6 on the same port; optional (IPv6 may be disabled on the host).
  d->fd6_ = ::socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (d->fd6_ >= 0) {
    ::setsockopt(d->fd6_, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    ::setsockopt(d->fd6_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    ::setsockopt(d->fd6_, IPPROTO_IPV6, IPV6_RECVPKTINFO, &one, sizeof one);
    sockaddr_in6 a6{};
    a6.sin6_family = AF_INET6;
    a6.sin6_addr = in6addr_any;
    a6.sin6_port = htons(d->port_);
    if (::bind(d->fd6_, reinterpret_cast<sockaddr*>(&a6), sizeof a6) != 0) {
      OCTET_LOG(WARNING) << "link discovery: no IPv6 beacons (" << std::strerror(errno) << ")";
      ::close(d->fd6_);
      d->fd6_ = -1;
    }
  }
  if (::pipe2(d->stop_pipe_, O_CLOEXEC) != 0) return UnavailableError(Errno("pipe"));
  d->thread_ = std::make_unique<Thread>();
  LinkDiscovery* self = d.get();
  d->thread_->thread = std::thread([self] { self->Run(); });
  return d;
}

LinkDiscovery::~LinkDiscovery() {
  if (thread_ && thread_->thread.joinable()) {
    const char c = 1;
    (void)!::write(stop_pipe_[1], &c, 1);
    thread_->thread.join();
  }
  for (int fd : {fd4_, fd6_, stop_pipe_[0], stop_pipe_[1]}) {
    if (fd >= 0) ::close(fd);
  }
}

std::vector<std::string> LinkDiscovery::BeaconInterfaces() const {
  std::lock_guard<std::mutex> lock(mu_);
  return beacon_interfaces_;
}

void LinkDiscovery::Run() {
  Deadline next_send = Deadline::AfterMs(0);
  for (;;) {
    if (next_send.expired()) {
      SendBeacons();
      next_send = Deadline::AfterMs(options_.interval_ms);
    }
    pollfd fds[3] = {{stop_pipe_[0], POLLIN, 0}, {fd4_, POLLIN, 0}, {fd6_, POLLIN, 0}};
    const int n = ::poll(fds, fd6_ >= 0 ? 3 : 2, next_send.poll_timeout_ms());
    if (n < 0 && errno != EINTR) {
      OCTET_LOG(ERROR) << "link discovery: " << Errno("poll");
      return;
    }
    if (n <= 0) continue;
    if (fds[0].revents) return;
    if (fds[1].revents & POLLIN) Receive(fd4_, true);
    if (fd6_ >= 0 && (fds[2].revents & POLLIN)) Receive(fd6_, false);
  }
}

void LinkDiscovery::SendBeacons() {
  auto nics = ListInterfaces(options_.filter);
  if (!nics.ok()) {
    OCTET_LOG(WARNING) << "link discovery: " << nics.status().ToString();
    return;
  }
  std::vector<std::string> sent_on;
  for (const InterfaceInfo& nic : *nics) {
    if (!nic.discovery || nic.ifindex <= 0) continue;
    const std::string msg =
        EncodeBeacon({options_.node_id, nic.name, options_.probe_port}, options_.token);
    bool sent = false;
    if (!nic.ipv4.empty()) {
      sockaddr_in to{};
      to.sin_family = AF_INET;
      to.sin_addr.s_addr = htonl(INADDR_BROADCAST);
      to.sin_port = htons(port_);
      alignas(cmsghdr) char control[CMSG_SPACE(sizeof(in_pktinfo))] = {};
      iovec iov{const_cast<char*>(msg.data()), msg.size()};
      msghdr mh{};
      mh.msg_name = &to;
      mh.msg_namelen = sizeof to;
      mh.msg_iov = &iov;
      mh.msg_iovlen = 1;
      mh.msg_control = control;
      mh.msg_controllen = sizeof control;
      cmsghdr* c = CMSG_FIRSTHDR(&mh);
      c->cmsg_level = IPPROTO_IP;
      c->cmsg_type = IP_PKTINFO;
      c->cmsg_len = CMSG_LEN(sizeof(in_pktinfo));
      in_pktinfo pi{};
      pi.ipi_ifindex = nic.ifindex;
      std::memcpy(CMSG_DATA(c), &pi, sizeof pi);
      if (::sendmsg(fd4_, &mh, 0) >= 0) {
        sent = true;
      } else {
        OCTET_LOG(DEBUG) << "beacon on " << nic.name << " (IPv4): " << std::strerror(errno);
      }
    }
    if (fd6_ >= 0 && !nic.ipv6.empty()) {
      sockaddr_in6 to{};
      to.sin6_family = AF_INET6;
      ::inet_pton(AF_INET6, "ff02::1", &to.sin6_addr);
      to.sin6_port = htons(port_);
      to.sin6_scope_id = static_cast<uint32_t>(nic.ifindex);
      if (::sendto(fd6_, msg.data(), msg.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof to) >=
          0) {
        sent = true;
      } else {
        OCTET_LOG(DEBUG) << "beacon on " << nic.name << " (IPv6): " << std::strerror(errno);
      }
    }
    if (sent) sent_on.push_back(nic.name);
  }
  std::lock_guard<std::mutex> lock(mu_);
  beacon_interfaces_ = std::move(sent_on);
}

void LinkDiscovery::Receive(int fd, bool ipv4) {
  for (;;) {
    char buf[600];
    sockaddr_storage from{};
    alignas(cmsghdr) char control[256];
    iovec iov{buf, sizeof buf};
    msghdr mh{};
    mh.msg_name = &from;
    mh.msg_namelen = sizeof from;
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = control;
    mh.msg_controllen = sizeof control;
    const ssize_t n = ::recvmsg(fd, &mh, 0);
    if (n < 0) return;  // EAGAIN: drained
    int ifindex = 0;
    for (cmsghdr* c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
      if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_PKTINFO) {
        in_pktinfo pi{};
        std::memcpy(&pi, CMSG_DATA(c), sizeof pi);
        ifindex = pi.ipi_ifindex;
      } else if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_PKTINFO) {
        in6_pktinfo pi{};
        std::memcpy(&pi, CMSG_DATA(c), sizeof pi);
        ifindex = static_cast<int>(pi.ipi6_ifindex);
      }
    }
    auto beacon = DecodeBeacon(std::string_view(buf, static_cast<size_t>(n)), options_.token);
    if (!beacon.ok()) {
      OCTET_LOG(DEBUG) << "link discovery: dropped a datagram: " << beacon.status().message();
      continue;
    }
    if (beacon->node_id == options_.node_id) continue;  // our own beacon, looped back
    char ifname[IF_NAMESIZE] = {};
    if (ifindex <= 0 || !::if_indextoname(static_cast<unsigned>(ifindex), ifname)) continue;
    char addr[INET6_ADDRSTRLEN] = {};
    std::string address;
    if (ipv4) {
      ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&from)->sin_addr, addr, sizeof addr);
      address = addr;
    } else {
      const auto* s6 = reinterpret_cast<sockaddr_in6*>(&from);
      ::inet_ntop(AF_INET6, &s6->sin6_addr, addr, sizeof addr);
      address = addr;
      if (IN6_IS_ADDR_LINKLOCAL(&s6->sin6_addr)) address += std::string("%") + ifname;
    }
    table_.Record(ifname, *beacon, address, ipv4);
  }
}

}  // namespace octet::agent
