// The deployment file (`octet deploy check|apply`) and the placement it
// drives: any bytes give a deployment or a list of FILE:LINE:COL errors, within
// bounded memory; a deployment that parses is placed on two clusters of eight
// nodes (a ring and a switch, with a memory estimate read from the instance),
// and a placement that succeeds must keep what `deploy apply` relies on: each
// replica TP ranks on distinct nodes of the cluster that are up, no node used
// twice, on the ring a TP 2 group on neighbours, every replica of every
// instance placed. A violation aborts (a finding).
//
// Placement reads nothing from disk; the capacity plan (which reads the router
// policy the file names) is left out so that a fuzzed path opens no file.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <set>
#include <string>
#include <string_view>

#include "octet/app/deployment.h"

namespace {

using namespace octet;
using namespace octet::app;

[[noreturn]] void Violated(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz_deployment: %s: %s\n", what, detail.c_str());
  std::abort();
}

PlacementInput Cluster(bool ring, std::string_view cabling) {
  PlacementInput in;
  for (int i = 1; i <= 8; ++i) {
    PlacementNode n;
    n.name = "spark" + std::to_string(i);
    n.memory_bytes = int64_t{128} << 30;
    n.up = i != 7;  // one node down: placement must go around it
    if (!n.up) n.down_reason = "lost";
    in.nodes.push_back(n);
    if (ring) in.ring_order.push_back(n.name);
  }
  in.cabling = std::string(cabling);
  // Per-rank memory from the model path's length: large paths do not fit,
  // a path ending in "missing" is a model this machine lacks (a warning).
  in.memory = [](const DeployInstanceSpec& i, int64_t node_memory) -> Result<ReplicaMemory> {
    if (i.model.size() >= 7 && i.model.compare(i.model.size() - 7, 7, "missing") == 0)
      return NotFoundError("no model folder " + i.model);
    ReplicaMemory m;
    const int64_t per_rank = static_cast<int64_t>(i.model.size()) * (int64_t{4} << 30) / i.tp;
    m.per_rank_bytes.assign(static_cast<size_t>(i.tp), per_rank);
    m.note = "fuzz: " + std::to_string(node_memory);
    return m;
  };
  return in;
}

void CheckPlacement(const Deployment& d, const PlacementInput& in, const Placement& p) {
  if (!p.ok()) return;
  std::set<std::string> cluster;
  for (const auto& n : in.nodes) {
    if (n.up) cluster.insert(n.name);
  }
  auto ring_pos = [&](const std::string& name) {
    for (size_t k = 0; k < in.ring_order.size(); ++k) {
      if (in.ring_order[k] == name) return k;
    }
    Violated("node off the ring", name);
  };
  std::set<std::string> used;
  size_t want = 0;
  for (const auto& i : d.instances) want += static_cast<size_t>(i.replicas);
  if (p.replicas.size() != want)
    Violated("replicas placed", std::to_string(p.replicas.size()) + " of " + std::to_string(want));
  for (const auto& r : p.replicas) {
    const DeployInstanceSpec* spec = d.Find(r.instance);
    if (spec == nullptr) Violated("unknown instance", r.instance);
    if (r.nodes.size() != static_cast<size_t>(spec->tp))
      Violated("ranks of a replica", r.replica + " has " + std::to_string(r.nodes.size()));
    for (const auto& n : r.nodes) {
      if (!cluster.count(n)) Violated("node outside the cluster or down", r.replica + " on " + n);
      if (!used.insert(n).second) Violated("node used twice", r.replica + " on " + n);
    }
    if (!in.ring_order.empty() && r.nodes.size() == 2) {
      const size_t a = ring_pos(r.nodes[0]), b = ring_pos(r.nodes[1]), n = in.ring_order.size();
      if ((a + 1) % n != b && (b + 1) % n != a)
        Violated("TP 2 group not on ring neighbours",
                 r.replica + " on " + r.nodes[0] + ", " + r.nodes[1]);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view yaml(reinterpret_cast<const char*>(data), size);
  const DeploymentParseResult r = ParseDeployment(yaml, "fuzz/deployment.yaml");
  for (const auto& e : r.errors) {
    if (e.line < 0 || e.column < 0 || e.message.empty()) Violated("error", e.ToString());
  }
  if (!r.ok()) {
    if (r.errors.empty()) Violated("parse", "no deployment and no error");
    return 0;
  }
  const Deployment& d = *r.deployment;
  if (d.instances.empty()) Violated("parse", "a deployment without instances");
  static const PlacementInput ring = Cluster(true, "ring");
  static const PlacementInput sw = Cluster(false, "switch");
  CheckPlacement(d, ring, PlaceDeployment(d, ring));
  CheckPlacement(d, sw, PlaceDeployment(d, sw));
  return 0;
}
