#include "octet/app/cabling.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <set>

namespace octet::app {
namespace {

struct Endpoint {
  size_t node = 0;
  std::string iface;
  bool operator<(const Endpoint& o) const {
    return std::tie(node, iface) < std::tie(o.node, o.iface);
  }
  bool operator==(const Endpoint& o) const { return node == o.node && iface == o.iface; }
};

struct Heard {
  std::string address;  // the speaker's address as the listener saw it
  uint32_t probe_port = 0;
};

std::string Join(const std::vector<std::string>& v, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}

}  // namespace

std::string_view CablingKindName(CablingKind kind) {
  switch (kind) {
    case CablingKind::kUnknown:
      return "unknown";
    case CablingKind::kSingleNode:
      return "single";
    case CablingKind::kDirectPair:
      return "direct-pair";
    case CablingKind::kRing:
      return "ring";
    case CablingKind::kSwitch:
      return "switch";
    case CablingKind::kMixed:
      return "mixed";
    case CablingKind::kPartial:
      return "partial";
  }
  return "unknown";
}

CablingReport AnalyzeCabling(const std::vector<CablingNodeInput>& nodes,
                             const std::string& expected) {
  CablingReport r;
  const size_t n = nodes.size();
  auto name = [&](size_t i) { return nodes[i].name; };
  auto problem = [&](std::string kind, std::string message, std::vector<std::string> who) {
    r.problems.push_back({std::move(kind), std::move(message), std::move(who)});
  };
  if (n == 0) {
    r.summary = "no nodes";
    return r;
  }

  // Identities.
  std::map<std::string, size_t> by_id;
  size_t reachable = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!nodes[i].reachable) {
      problem("unreachable",
              name(i) + ": agent unreachable" +
                  (nodes[i].error.empty() ? "" : " (" + nodes[i].error + ")"),
              {name(i)});
      continue;
    }
    ++reachable;
    const std::string& id = nodes[i].links.node_id;
    auto [it, fresh] = by_id.emplace(id, i);
    if (!fresh) {
      problem("duplicate-node-id",
              name(it->second) + " and " + name(i) + " report the same node id " + id +
                  " (a copied disk image?): delete node_id in the agent's state folder on one "
                  "of them and restart its agent",
              {name(it->second), name(i)});
    }
  }
  if (reachable == 0) {
    r.summary = "no agent reachable";
    return r;
  }

  // What was heard: listener endpoint -> speaker endpoint.
  std::map<std::pair<Endpoint, Endpoint>, Heard> heard;
  std::string declared;
  bool all_declared = true;
  for (size_t i = 0; i < n; ++i) {
    if (!nodes[i].reachable) continue;
    const std::string& d = nodes[i].links.declared_cabling;
    if (d.empty() || (!declared.empty() && d != declared)) all_declared = false;
    if (!d.empty()) declared = d;
  }
  r.declared = all_declared && !declared.empty();
  if (r.declared) {
    auto join = [&](size_t i, const std::string& if_i, size_t j, const std::string& if_j) {
      if (!nodes[i].reachable || !nodes[j].reachable || i == j) return;
      heard[{{i, if_i}, {j, if_j}}] = {"127.0.0.1", nodes[j].links.probe_port};
      heard[{{j, if_j}, {i, if_i}}] = {"127.0.0.1", nodes[i].links.probe_port};
    };
    if (declared == "ring") {
      for (size_t i = 0; i < n; ++i) {
        if (n == 2 && i == 1) break;  // a two-node "ring" is one cable
        join(i, "sim1", (i + 1) % n, "sim0");
      }
    } else {
      for (size_t i = 0; i < n; ++i) {
        for (size_t j = i + 1; j < n; ++j) join(i, "sim0", j, "sim0");
      }
    }
  } else {
    std::set<std::string> unknown;
    for (size_t i = 0; i < n; ++i) {
      if (!nodes[i].reachable) continue;
      for (const auto& o : nodes[i].links.observations) {
        auto it = by_id.find(o.peer_node_id);
        if (it == by_id.end()) {
          if (unknown.insert(o.peer_node_id).second) {
            problem("unknown-peer",
                    name(i) + " hears node " + o.peer_node_id + " on " + o.local_interface + " (" +
                        o.peer_address + "), which is not in this cluster (or is unreachable)",
                    {name(i)});
          }
          continue;
        }
        if (it->second == i) continue;
        heard[{{i, o.local_interface}, {it->second, o.peer_interface}}] = {o.peer_address,
                                                                           o.peer_probe_port};
      }
    }
  }

  // Segments: union-find over endpoints.
  std::map<Endpoint, Endpoint> parent;
  std::function<Endpoint(const Endpoint&)> find = [&](const Endpoint& e) -> Endpoint {
    auto it = parent.find(e);
    if (it == parent.end()) {
      parent[e] = e;
      return e;
    }
    if (it->second == e) return e;
    Endpoint root = find(it->second);
    parent[e] = root;
    return root;
  };
  for (const auto& [key, h] : heard) {
    Endpoint a = find(key.first), b = find(key.second);
    if (!(a == b)) parent[a] = b;
  }
  std::map<Endpoint, std::vector<Endpoint>> groups;
  for (const auto& [e, p] : parent) groups[find(e)].push_back(e);
  std::vector<std::vector<Endpoint>> segs;
  for (auto& [root, eps] : groups) {
    std::sort(eps.begin(), eps.end());
    segs.push_back(eps);
  }
  std::sort(segs.begin(), segs.end());

  // Edges and node adjacency.
  std::vector<std::set<size_t>> adj(n);
  std::map<std::pair<size_t, size_t>, int> direct_links;  // node pair -> direct cables
  std::vector<std::set<size_t>> shared_nodes;             // node set per shared segment
  for (size_t s = 0; s < segs.size(); ++s) {
    const auto& eps = segs[s];
    CablingSegment seg;
    seg.shared = eps.size() >= 3;
    for (const auto& e : eps) seg.endpoints.push_back(name(e.node) + ":" + e.iface);
    r.segments.push_back(seg);
    std::set<size_t> members;
    for (size_t x = 0; x < eps.size(); ++x) {
      members.insert(eps[x].node);
      for (size_t y = x + 1; y < eps.size(); ++y) {
        const Endpoint& a = eps[x];
        const Endpoint& b = eps[y];
        if (a.node == b.node) continue;
        auto ab = heard.find({a, b});  // a hears b
        auto ba = heard.find({b, a});
        if (ab == heard.end() && ba == heard.end()) continue;
        CablingEdge edge;
        edge.a_node = name(a.node);
        edge.a_interface = a.iface;
        edge.b_node = name(b.node);
        edge.b_interface = b.iface;
        if (ba != heard.end()) {
          edge.a_address = ba->second.address;
          edge.a_probe_port = ba->second.probe_port;
        }
        if (ab != heard.end()) {
          edge.b_address = ab->second.address;
          edge.b_probe_port = ab->second.probe_port;
        }
        edge.bidirectional = ab != heard.end() && ba != heard.end();
        edge.segment = static_cast<int>(s);
        if (!edge.bidirectional && !r.declared) {
          const Endpoint& speaker = ab != heard.end() ? b : a;
          const Endpoint& listener = ab != heard.end() ? a : b;
          problem("one-way",
                  "one-way link: " + name(listener.node) + " (" + listener.iface + ") hears " +
                      name(speaker.node) + " (" + speaker.iface + ") but not the reverse: check " +
                      name(listener.node) + "'s firewall for UDP beacons and the link state",
                  {name(listener.node), name(speaker.node)});
        }
        adj[a.node].insert(b.node);
        adj[b.node].insert(a.node);
        if (!seg.shared) ++direct_links[{std::min(a.node, b.node), std::max(a.node, b.node)}];
        r.edges.push_back(std::move(edge));
      }
    }
    if (seg.shared) shared_nodes.push_back(members);
  }

  // Shape.
  std::vector<size_t> component(n, n);
  size_t components = 0;
  for (size_t s = 0; s < n; ++s) {
    if (component[s] != n) continue;
    std::vector<size_t> stack{s};
    component[s] = components;
    while (!stack.empty()) {
      size_t u = stack.back();
      stack.pop_back();
      for (size_t v : adj[u]) {
        if (component[v] == n) {
          component[v] = components;
          stack.push_back(v);
        }
      }
    }
    ++components;
  }
  const bool connected = components == 1;
  size_t total_direct = 0;
  for (const auto& [pair, count] : direct_links) total_direct += static_cast<size_t>(count);
  const bool full_switch = std::any_of(shared_nodes.begin(), shared_nodes.end(),
                                       [&](const std::set<size_t>& s) { return s.size() == n; });
  bool all_degree_two = true;
  for (size_t i = 0; i < n; ++i) all_degree_two = all_degree_two && adj[i].size() == 2;
  bool single_cables = true;
  for (const auto& [pair, count] : direct_links) single_cables = single_cables && count == 1;

  // A chain of direct cables through all nodes: a ring with one link missing.
  std::vector<size_t> ends;
  bool chain = n >= 3 && shared_nodes.empty() && connected && single_cables;
  for (size_t i = 0; chain && i < n; ++i) {
    if (adj[i].size() == 1)
      ends.push_back(i);
    else if (adj[i].size() != 2)
      chain = false;
  }
  chain = chain && ends.size() == 2;
  if (n == 1) {
    r.kind = CablingKind::kSingleNode;
  } else if (full_switch) {
    r.kind =
        shared_nodes.size() == 1 && total_direct == 0 ? CablingKind::kSwitch : CablingKind::kMixed;
  } else if (n == 2 && shared_nodes.empty() && total_direct > 0) {
    r.kind = CablingKind::kDirectPair;
  } else if (n >= 3 && shared_nodes.empty() && all_degree_two && single_cables && connected) {
    r.kind = CablingKind::kRing;
  } else if (connected && reachable == n && !chain) {
    r.kind = CablingKind::kMixed;
  } else {
    r.kind = CablingKind::kPartial;
  }

  const bool ring_expected = expected == "ring" || (r.declared && declared == "ring");
  if (chain && (ring_expected || expected.empty())) {
    problem("missing-ring-link",
            "ring is missing the link between " + name(ends[0]) + " and " + name(ends[1]) +
                ": the nodes form a chain (" + name(ends[0]) + " ... " + name(ends[1]) +
                "); check that cable and both ports",
            {name(ends[0]), name(ends[1])});
  } else if (ring_expected && r.kind != CablingKind::kRing && n >= 3) {
    for (size_t i = 0; i < n; ++i) {
      if (adj[i].size() != 2) {
        problem("ring-link-count",
                "ring broken at " + name(i) + ": cabled to " + std::to_string(adj[i].size()) +
                    " other node(s), a ring needs 2",
                {name(i)});
      }
    }
  }
  // A node whose only neighbour is one peer, where the rest is more than a pair.
  if (!chain && !ring_expected && n >= 3) {
    for (size_t i = 0; i < n; ++i) {
      if (adj[i].size() != 1) continue;
      const size_t via = *adj[i].begin();
      if (adj[via].size() < 2) continue;  // an isolated pair, not a detour
      problem("only-through",
              name(i) + " is reachable only through " + name(via) +
                  (full_switch || !shared_nodes.empty() ? " (cabled to it instead of the switch?)"
                                                        : ""),
              {name(i), name(via)});
    }
  }
  if (expected == "switch" && !full_switch) {
    std::set<size_t> on_switch;
    for (const auto& s : shared_nodes) {
      if (s.size() > on_switch.size()) on_switch = s;
    }
    for (size_t i = 0; i < n; ++i) {
      if (nodes[i].reachable && !on_switch.count(i)) {
        problem("not-on-switch", name(i) + " is not on the switch segment", {name(i)});
      }
    }
  }
  if (!r.declared) {
    for (size_t i = 0; i < n; ++i) {
      if (!nodes[i].reachable || !adj[i].empty() || n == 1) continue;
      const auto& b = nodes[i].links.beacon_interfaces;
      problem("no-links",
              name(i) + " hears no peer and no peer hears it (beacons on " +
                  (b.empty() ? std::string("no interface") : Join(b, ", ")) +
                  "): no cable, link down, or UDP port " +
                  std::to_string(nodes[i].links.beacon_port) + " blocked",
              {name(i)});
    }
  }

  // Ring order and the summary line.
  if (r.kind == CablingKind::kRing) {
    size_t prev = n, cur = 0;
    for (size_t k = 0; k < n; ++k) {
      r.ring_order.push_back(name(cur));
      size_t next = n;
      for (size_t v : adj[cur]) {
        if (v != prev) {
          next = v;
          break;
        }
      }
      prev = cur;
      cur = next;
    }
  }
  const std::string prefix = r.declared ? "declared " : "";
  switch (r.kind) {
    case CablingKind::kSingleNode:
      r.summary = "single node";
      break;
    case CablingKind::kDirectPair: {
      r.summary = prefix + "direct pair: " + name(0) + "-" + name(1);
      if (total_direct > 1) r.summary += " (" + std::to_string(total_direct) + " cables)";
      break;
    }
    case CablingKind::kRing:
      r.summary = prefix + "ring of " + std::to_string(n) + ": " + Join(r.ring_order, "-") + "-" +
                  r.ring_order[0];
      break;
    case CablingKind::kSwitch:
      r.summary = prefix + "switch: " + std::to_string(n) + " nodes on one segment";
      break;
    case CablingKind::kMixed:
      r.summary = prefix + "mixed: " + std::to_string(shared_nodes.size()) +
                  " shared segment(s), " + std::to_string(total_direct) + " direct cable(s)";
      break;
    case CablingKind::kPartial: {
      r.summary = prefix + "partial: " + std::to_string(reachable) + " of " + std::to_string(n) +
                  " agents reachable, " + std::to_string(components) + " separate group(s)";
      if (!r.problems.empty()) r.summary += "; " + r.problems.front().message;
      break;
    }
    case CablingKind::kUnknown:
      r.summary = "unknown";
      break;
  }
  return r;
}

// ---- RoCE ports --------------------------------------------------------------

namespace {

// "0002:01:00.1" -> "01:00.1": both halves of a ConnectX-7 port sort together.
std::string PciSlot(const std::string& pci) {
  const size_t colon = pci.find(':');
  return colon == std::string::npos ? pci : pci.substr(colon + 1);
}

bool IsIpv4MappedGid(const std::string& gid) {
  return gid.rfind("::ffff:", 0) == 0 && gid.find('.') != std::string::npos;
}

}  // namespace

RoceSummary SummarizeRoce(const NodeFacts& facts) {
  RoceSummary out;
  std::vector<std::pair<std::string, RocePortRow>> keyed;  // sort key, row
  for (const RdmaDeviceFacts& d : facts.rdma_devices) {
    for (const RdmaPortFacts& p : d.ports) {
      if (p.link_layer != "Ethernet") continue;
      RocePortRow row;
      row.device = d.name;
      row.port = p.port;
      row.netdev = p.netdev.empty() ? d.netdev : p.netdev;
      row.state = p.state;
      row.phys_state = p.phys_state;
      row.netdev_mtu = p.netdev_mtu;
      row.active_mtu = p.active_mtu;
      row.rate = p.rate;
      for (const RdmaGidEntry& g : p.gid_table) {
        if (g.type == "RoCE v2" && IsIpv4MappedGid(g.gid)) {
          row.v2_gid_index = static_cast<int>(g.index);
          break;
        }
      }
      char port_key[16];
      std::snprintf(port_key, sizeof port_key, "%08u", p.port);
      keyed.emplace_back(PciSlot(d.pci_address) + "/" + port_key + "/" + d.name, std::move(row));
    }
  }
  std::stable_sort(keyed.begin(), keyed.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [key, row] : keyed) out.ports.push_back(std::move(row));
  for (const RoceWarning& w : facts.roce_warnings) {
    ++out.warning_count;
    auto it = std::find_if(out.ports.begin(), out.ports.end(), [&](const RocePortRow& r) {
      return !w.device.empty() && r.device == w.device && r.port == w.port;
    });
    if (it != out.ports.end()) {
      it->warnings.push_back(w);
    } else {
      out.node_warnings.push_back(w);
    }
  }
  return out;
}

std::string RoceWarningShortText(const RoceWarning& w, const RocePortRow* row) {
  if (w.kind == "mtu-below-9000") {
    return row && row->netdev_mtu ? "MTU " + std::to_string(row->netdev_mtu) : "MTU < 9000";
  }
  if (w.kind == "port-half-unused") {
    if (row && row->state != "ACTIVE") return "half down";
    return row && row->v2_gid_index < 0 ? "half: no IPv4" : "half unused";
  }
  if (w.kind == "no-rocev2-gid") return "no v2 GID";
  if (w.kind == "gid-index-mismatch") return "GID index";
  if (w.kind == "no-usable-port") return "no usable port";
  return w.message;
}

}  // namespace octet::app
