// Capacity model for a two-pool routing policy (large and small model pools).
//
// A pool's capacity is C = replicas x per-replica request rate (requests/s,
// measured with `octet bench` or given). Sending a fraction f of requests to
// the large pool and 1 - f to the small one, the highest total arrival rate
// both pools sustain is
//     lambda_max(f) = min(C_large / f, C_small / (1 - f)),
// and the pool whose term is smaller is the bottleneck. The gain is
// lambda_max(f) over the large-only baseline on the same nodes:
// floor(total_nodes / nodes_per_large_replica) large replicas.
#pragma once

#include <string>
#include <vector>

#include "octet/base/json.h"
#include "octet/base/status.h"

namespace octet::router {

struct CapacityPool {
  std::string name;
  int replicas = 0;
  int nodes_per_replica = 1;
  double requests_per_s = 0;  // per replica
  double capacity() const { return replicas * requests_per_s; }
  int nodes() const { return replicas * nodes_per_replica; }
};

struct CapacityPoint {
  double fraction_large = 0;  // f
  double lambda_max = 0;      // requests/s the routed setup sustains
  double gain = 0;            // lambda_max / baseline
  std::string bottleneck;     // the pool that saturates first
  // The per-replica rate the small pool needs, as a multiple of a large
  // replica's, for the large pool to stay the bottleneck at this f.
  double small_speed_needed = 0;
};

struct CapacityPlan {
  CapacityPool large, small;
  int total_nodes = 0;
  int baseline_replicas = 0;
  double baseline_rps = 0;
  std::vector<CapacityPoint> points;
  nlohmann::json ToJson() const;
  std::string ToText() const;  // the table `octet route plan` prints
};

// `total_nodes` 0 means the nodes the two pools use together.
Result<CapacityPlan> PlanCapacity(const CapacityPool& large, const CapacityPool& small,
                                  const std::vector<double>& fractions, int total_nodes = 0);

}  // namespace octet::router
