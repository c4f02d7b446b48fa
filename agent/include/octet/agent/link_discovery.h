// Cabling discovery: every agent announces itself on every discovery interface
// (see node_facts.h) with a small UDP beacon once a second, and records which
// peer interface it hears on which local interface. The union of what all
// agents hear is the cabling graph (app/ classifies it).
//
// A beacon goes out as an IPv4 limited broadcast (255.255.255.255, pinned to
// the interface with IP_PKTINFO) when the interface has an IPv4 address, and
// as an IPv6 all-nodes link-local multicast (ff02::1%if) when it has IPv6, so
// back-to-back cables without configured addresses are found too. Neither
// needs privileges. Beacons are text, HMAC-SHA256-signed with the cluster
// token: another cluster's beacons on the same switch, or forgeries, are
// dropped. Interfaces are re-listed every period, so cables plugged in or
// pulled and links set up or down show within a few seconds.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "octet/agent/node_facts.h"
#include "octet/base/status.h"

namespace octet::agent {

inline constexpr uint16_t kDefaultBeaconPort = 47101;

struct BeaconMessage {
  std::string node_id;
  std::string interface;    // the sender's interface the beacon left on
  uint16_t probe_port = 0;  // the sender's link-probe TCP port
};

// "octet-beacon/1 <node_id> <interface> <probe_port> <hmac-hex>"
std::string EncodeBeacon(const BeaconMessage& beacon, std::string_view token);
// Errors for anything that is not a well-formed beacon signed with `token`.
Result<BeaconMessage> DecodeBeacon(std::string_view datagram, std::string_view token);

struct LinkObservationRecord {
  std::string local_interface;
  std::string peer_node_id;
  std::string peer_interface;
  std::string peer_address;  // beacon source: "10.0.0.2", or "fe80::1%ring0" (scoped)
  uint16_t peer_probe_port = 0;
  int64_t last_heard_unix_ms = 0;
  int64_t last_heard_mono_ns = 0;
};

// What this agent has heard, keyed by (local interface, peer node, peer interface).
// Thread-safe.
class LinkTable {
 public:
  void Record(const std::string& local_interface, const BeaconMessage& beacon,
              const std::string& peer_address, bool via_ipv4);
  // Observations heard within the last `stale_after_ms`, sorted.
  std::vector<LinkObservationRecord> Current(int64_t stale_after_ms) const;

 private:
  struct Entry {
    LinkObservationRecord record;
    bool via_ipv4 = false;
  };
  mutable std::mutex mu_;
  std::vector<Entry> entries_;  // guarded by mu_
};

struct LinkDiscoveryOptions {
  std::string node_id;
  std::string token;                   // HMAC key
  uint16_t port = kDefaultBeaconPort;  // 0: any free port (tests)
  int interval_ms = 1000;
  uint16_t probe_port = 0;  // advertised in beacons
  InterfaceFilter filter;
};

// Sends and receives beacons on one background thread until destroyed.
class LinkDiscovery {
 public:
  static Result<std::unique_ptr<LinkDiscovery>> Start(LinkDiscoveryOptions options);
  ~LinkDiscovery();
  LinkDiscovery(const LinkDiscovery&) = delete;
  LinkDiscovery& operator=(const LinkDiscovery&) = delete;

  std::vector<LinkObservationRecord> Observations(int64_t stale_after_ms) const {
    return table_.Current(stale_after_ms);
  }
  // The interfaces beacons went out on in the last period.
  std::vector<std::string> BeaconInterfaces() const;
  uint16_t port() const { return port_; }

 private:
  LinkDiscovery() = default;
  void Run();
  void SendBeacons();
  void Receive(int fd, bool ipv4);

  LinkDiscoveryOptions options_;
  uint16_t port_ = 0;
  int fd4_ = -1;
  int fd6_ = -1;
  int stop_pipe_[2] = {-1, -1};
  LinkTable table_;
  mutable std::mutex mu_;
  std::vector<std::string> beacon_interfaces_;  // guarded by mu_
  struct Thread;
  std::unique_ptr<Thread> thread_;
};

}  // namespace octet::agent
