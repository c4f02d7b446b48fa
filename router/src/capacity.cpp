#include "octet/router/capacity.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace octet::router {

Result<CapacityPlan> PlanCapacity(const CapacityPool& large, const CapacityPool& small,
                                  const std::vector<double>& fractions, int total_nodes) {
  auto check = [](const CapacityPool& p) -> Status {
    if (p.replicas < 0 || p.nodes_per_replica < 1)
      return InvalidArgumentError("pool '" + p.name +
                                  "': replicas must be >= 0 and nodes_per_replica >= 1");
    if (!(p.requests_per_s > 0) || !std::isfinite(p.requests_per_s))
      return InvalidArgumentError(
          "pool '" + p.name +
          "': per-replica request rate unknown (set capacity.requests_per_s "
          "in the policy or pass --rate " +
          p.name + "=R)");
    return Status();
  };
  OCTET_RETURN_IF_ERROR(check(large));
  OCTET_RETURN_IF_ERROR(check(small));
  if (large.replicas < 1) return InvalidArgumentError("pool '" + large.name + "' has no replicas");
  CapacityPlan plan;
  plan.large = large;
  plan.small = small;
  plan.total_nodes = total_nodes > 0 ? total_nodes : large.nodes() + small.nodes();
  if (plan.total_nodes < large.nodes() + small.nodes())
    return InvalidArgumentError("the pools use " + std::to_string(large.nodes() + small.nodes()) +
                                " nodes, more than the " + std::to_string(plan.total_nodes) +
                                " given");
  plan.baseline_replicas = plan.total_nodes / large.nodes_per_replica;
  plan.baseline_rps = plan.baseline_replicas * large.requests_per_s;
  if (plan.baseline_replicas < 1)
    return InvalidArgumentError("not one large replica fits the nodes: no baseline");
  const double inf = std::numeric_limits<double>::infinity();
  for (double f : fractions) {
    if (!(f >= 0 && f <= 1))
      return InvalidArgumentError("fraction " + std::to_string(f) + " is outside [0, 1]");
    CapacityPoint p;
    p.fraction_large = f;
    const double by_large = f > 0 ? large.capacity() / f : inf;
    const double by_small = f < 1 ? (small.replicas > 0 ? small.capacity() / (1 - f) : 0) : inf;
    p.lambda_max = std::min(by_large, by_small);
    p.bottleneck = by_large <= by_small ? large.name : small.name;
    p.gain = p.lambda_max / plan.baseline_rps;
    // C_small / (1 - f) >= C_large / f  <=>  r_small >= C_large (1 - f) / (f n_small).
    p.small_speed_needed =
        (f > 0 && small.replicas > 0)
            ? large.capacity() * (1 - f) / (f * small.replicas) / large.requests_per_s
            : 0;
    plan.points.push_back(p);
  }
  return plan;
}

nlohmann::json CapacityPlan::ToJson() const {
  auto pool = [](const CapacityPool& p) {
    return nlohmann::json{{"name", p.name},
                          {"replicas", p.replicas},
                          {"nodes_per_replica", p.nodes_per_replica},
                          {"requests_per_s_per_replica", p.requests_per_s},
                          {"capacity_rps", p.capacity()}};
  };
  nlohmann::json pts = nlohmann::json::array();
  for (const auto& p : points)
    pts.push_back({{"fraction_large", p.fraction_large},
                   {"lambda_max_rps", p.lambda_max},
                   {"gain", p.gain},
                   {"bottleneck", p.bottleneck},
                   {"small_speed_needed", p.small_speed_needed}});
  return {{"large", pool(large)},
          {"small", pool(small)},
          {"total_nodes", total_nodes},
          {"baseline", {{"replicas", baseline_replicas}, {"rps", baseline_rps}}},
          {"points", pts}};
}

std::string CapacityPlan::ToText() const {
  std::string out;
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "large pool '%s': %d x %d-node replicas at %.3g req/s each = %.3g req/s\n",
                large.name.c_str(), large.replicas, large.nodes_per_replica, large.requests_per_s,
                large.capacity());
  out += buf;
  std::snprintf(buf, sizeof buf,
                "small pool '%s': %d x %d-node replicas at %.3g req/s each = %.3g req/s "
                "(%.2fx a large replica)\n",
                small.name.c_str(), small.replicas, small.nodes_per_replica, small.requests_per_s,
                small.capacity(), small.requests_per_s / large.requests_per_s);
  out += buf;
  std::snprintf(buf, sizeof buf, "baseline: large only on %d nodes = %d replicas = %.3g req/s\n\n",
                total_nodes, baseline_replicas, baseline_rps);
  out += buf;
  out += "  f(large)  lambda_max req/s   gain   bottleneck   small speed needed\n";
  for (const auto& p : points) {
    char needed[32] = "-";
    if (p.small_speed_needed > 0)
      std::snprintf(needed, sizeof needed, "%.2fx large", p.small_speed_needed);
    std::snprintf(buf, sizeof buf, "  %8.3f  %16.4g  %5.2fx   %-12s %s\n", p.fraction_large,
                  p.lambda_max, p.gain, p.bottleneck.c_str(), needed);
    out += buf;
  }
  return out;
}

}  // namespace octet::router
