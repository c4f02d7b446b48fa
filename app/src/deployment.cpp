// Placement and capacity of a deployment; see deployment.h.
#include "octet/app/deployment.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>

#include "octet/app/bench_store.h"
#include "octet/base/args.h"
#include "octet/base/file_util.h"
#include "octet/base/json.h"
#include "octet/engine/memory_plan.h"
#include "octet/router/capacity.h"
#include "octet/router/policy.h"

namespace octet::app {

// ---- placement ----------------------------------------------------------------------

namespace {

std::string Bytes(int64_t b) { return FormatBytes(static_cast<double>(b)); }

std::string NodeList(const std::vector<std::string>& nodes) {
  std::string s;
  for (const auto& n : nodes) s += (s.empty() ? "" : ", ") + n;
  return s;
}

}  // namespace

Placement PlaceDeployment(const Deployment& d, const PlacementInput& in) {
  Placement out;
  std::map<std::string, size_t> index;  // node name -> position in in.nodes
  for (size_t i = 0; i < in.nodes.size(); ++i) index[in.nodes[i].name] = i;
  const std::string where = d.source_file.empty() ? std::string("the deployment") : d.source_file;

  // Nodes: enough of them at all?
  const int need = d.node_count();
  if (need > static_cast<int>(in.nodes.size())) {
    std::string parts;
    for (const auto& i : d.instances) {
      parts += (parts.empty() ? "" : ", ") + i.name + " " + std::to_string(i.replicas) + " x TP " +
               std::to_string(i.tp) + " = " + std::to_string(i.replicas * i.tp);
    }
    out.errors.push_back("the deployment needs " + std::to_string(need) + " nodes (" + parts +
                         ": each rank of each replica on a node of its own), but the cluster has " +
                         std::to_string(in.nodes.size()));
    return out;
  }
  for (const auto& i : d.instances) {
    for (const auto& n : i.nodes) {
      if (!index.count(n)) {
        std::vector<std::string> names;
        for (const auto& node : in.nodes) names.push_back(node.name);
        out.errors.push_back("instance '" + i.name + "' names node '" + n +
                             "', which is not in the cluster (" + NodeList(names) + ")");
      }
    }
  }
  if (!out.ok()) return out;

  // Cabling: which groups of nodes can carry a TP group.
  const bool ring = in.cabling == "ring" && in.ring_order.size() == in.nodes.size();
  std::map<std::string, size_t> ring_pos;
  for (size_t i = 0; i < in.ring_order.size(); ++i) ring_pos[in.ring_order[i]] = i;
  const size_t ring_n = in.ring_order.size();
  auto adjacent = [&](const std::string& a, const std::string& b) {
    const size_t pa = ring_pos[a], pb = ring_pos[b];
    return (pa + 1) % ring_n == pb || (pb + 1) % ring_n == pa;
  };
  // Whether a ring carries a TP group on `nodes` (rank order), and why not.
  auto ring_carries = [&](const std::vector<std::string>& nodes, std::string* why) {
    if (!ring || nodes.size() <= 1) return true;
    if (nodes.size() == ring_n) return true;  // the whole ring
    if (nodes.size() == 2) {
      if (adjacent(nodes[0], nodes[1])) return true;
      *why = "nodes " + nodes[0] + " and " + nodes[1] +
             " are not neighbours on the ring, so their ranks would talk through other nodes";
      return false;
    }
    *why = "a TP group of " + std::to_string(nodes.size()) + " on part of a ring of " +
           std::to_string(ring_n) +
           " needs links between nodes that are not neighbours (any-to-any); the ring only "
           "cables each node to two others";
    return false;
  };
  if (in.cabling != "ring" && in.cabling != "switch" && in.cabling != "direct-pair" &&
      in.cabling != "single" && need > 1) {
    out.warnings.push_back("the cabling is " + (in.cabling.empty() ? "unknown" : in.cabling) +
                           ": TP groups are placed without checking their links");
  }
  if (in.cabling == "ring" && !ring) {
    out.warnings.push_back("the ring's order is unknown: TP groups placed without it");
  }

  // Memory per rank of each instance (per node memory: the smallest node's,
  // then checked on the nodes chosen).
  std::map<std::string, ReplicaMemory> mem;
  auto memory_of = [&](const DeployInstanceSpec& i, int64_t node_memory) -> const ReplicaMemory* {
    if (!in.memory) return nullptr;
    const std::string key = i.name + "@" + std::to_string(node_memory);
    if (auto it = mem.find(key); it != mem.end()) return &it->second;
    auto m = in.memory(i, node_memory);
    if (!m.ok()) {
      // A model folder that is not on this machine leaves memory unchecked;
      // one that cannot run at this TP degree is an error.
      if (m.status().code() == StatusCode::kNotFound) {
        out.warnings.push_back("instance '" + i.name +
                               "': memory not checked: " + m.status().message());
      } else {
        const std::string e = "instance '" + i.name + "': " + m.status().message();
        if (std::find(out.errors.begin(), out.errors.end(), e) == out.errors.end())
          out.errors.push_back(e);
      }
      mem[key] = ReplicaMemory{};
      return &mem[key];
    }
    if (out.memory_note.empty()) out.memory_note = m->note;
    mem[key] = *m;
    return &mem[key];
  };
  if (!in.memory) out.warnings.push_back("memory not checked (no estimator)");

  std::vector<bool> used(in.nodes.size(), false);
  // The shortfall of `replica` on `nodes`: "" when it fits.
  auto check_memory = [&](const DeployInstanceSpec& i, const std::string& replica,
                          const std::vector<std::string>& nodes, std::vector<int64_t>* bytes,
                          std::vector<int64_t>* node_mem) {
    std::string short_of;
    bytes->assign(nodes.size(), 0);
    node_mem->assign(nodes.size(), 0);
    for (size_t r = 0; r < nodes.size(); ++r) {
      const PlacementNode& n = in.nodes[index[nodes[r]]];
      (*node_mem)[r] = n.memory_bytes;
      if (!n.up && short_of.empty()) {
        short_of = "node " + n.name + " is not up" +
                   (n.down_reason.empty() ? std::string() : " (" + n.down_reason + ")");
      }
      const ReplicaMemory* m = memory_of(i, n.memory_bytes);
      if (!m || m->per_rank_bytes.size() != nodes.size()) continue;
      (*bytes)[r] = m->per_rank_bytes[r];
      if (n.memory_bytes > 0 && m->per_rank_bytes[r] > n.memory_bytes && short_of.empty()) {
        short_of = "instance '" + i.name + "' (" + replica + " rank " + std::to_string(r) +
                   ") does not fit node " + n.name + ": it needs " + Bytes(m->per_rank_bytes[r]) +
                   " (weights + KV + workspace + reserve), the node has " + Bytes(n.memory_bytes) +
                   ", short by " + Bytes(m->per_rank_bytes[r] - n.memory_bytes);
      }
    }
    return short_of;
  };

  // Instances with named nodes and kept replicas first, then the rest by TP
  // degree (largest first: contiguous ring blocks are the scarce thing).
  std::vector<const DeployInstanceSpec*> order;
  for (const auto& i : d.instances) order.push_back(&i);
  std::stable_sort(order.begin(), order.end(), [](const auto* a, const auto* b) {
    if (a->nodes.empty() != b->nodes.empty()) return !a->nodes.empty();
    return a->tp > b->tp;
  });
  std::map<std::string, ReplicaPlacement> placed;
  // Kept and named replicas take their nodes first.
  for (const DeployInstanceSpec* i : order) {
    for (int r = 0; r < i->replicas; ++r) {
      const std::string replica = i->name + "-" + std::to_string(r);
      std::vector<std::string> nodes;
      if (!i->nodes.empty()) {
        nodes.assign(i->nodes.begin() + r * i->tp, i->nodes.begin() + (r + 1) * i->tp);
      } else if (auto it = in.fixed.find(replica); it != in.fixed.end()) {
        nodes = it->second;
      } else {
        continue;
      }
      std::string why;
      if (!ring_carries(nodes, &why)) {
        out.errors.push_back("instance '" + i->name + "' (" + replica + " on " + NodeList(nodes) +
                             ") cannot run on this ring: " + why +
                             "; cable the nodes to a switch for a split cluster, or choose "
                             "neighbouring nodes");
        continue;
      }
      ReplicaPlacement p;
      p.instance = i->name;
      p.replica = replica;
      p.index = r;
      p.nodes = nodes;
      for (const auto& n : nodes) {
        if (used[index[n]]) {
          out.errors.push_back("node " + n + " is taken twice (" + replica + ")");
        }
        used[index[n]] = true;
      }
      if (std::string s = check_memory(*i, replica, nodes, &p.memory_bytes, &p.node_memory);
          !s.empty()) {
        out.errors.push_back(s);
      }
      placed[replica] = std::move(p);
    }
  }
  // The others on free nodes: on a ring, TP 2 groups on neighbours and larger
  // groups only over the whole ring; elsewhere any free nodes.
  const std::vector<std::string> walk = ring ? in.ring_order : [&] {
    std::vector<std::string> names;
    for (const auto& n : in.nodes) names.push_back(n.name);
    return names;
  }();
  for (const DeployInstanceSpec* i : order) {
    for (int r = 0; r < i->replicas; ++r) {
      const std::string replica = i->name + "-" + std::to_string(r);
      if (placed.count(replica)) continue;
      ReplicaPlacement best;
      std::string first_shortfall, ring_why;
      bool found = false;
      if (ring && i->tp > 2 && static_cast<size_t>(i->tp) != ring_n) {
        ring_carries(std::vector<std::string>(i->tp, ""), &ring_why);
      } else {
        // Start positions along the walk; a block is tp consecutive free nodes.
        for (size_t s = 0; s < walk.size() && !found; ++s) {
          std::vector<std::string> nodes;
          bool free_block = true;
          for (int k = 0; k < i->tp; ++k) {
            const size_t pos = (s + k) % walk.size();
            if ((!ring && s + k >= walk.size()) || used[index[walk[pos]]]) {
              free_block = false;
              break;
            }
            nodes.push_back(walk[pos]);
          }
          if (!free_block) continue;
          std::string why;
          if (!ring_carries(nodes, &why)) {
            if (ring_why.empty()) ring_why = why;
            continue;
          }
          ReplicaPlacement p;
          p.instance = i->name;
          p.replica = replica;
          p.index = r;
          p.nodes = nodes;
          const std::string s_short =
              check_memory(*i, replica, nodes, &p.memory_bytes, &p.node_memory);
          if (!s_short.empty()) {
            if (first_shortfall.empty()) first_shortfall = s_short;
            continue;
          }
          best = std::move(p);
          found = true;
        }
      }
      if (!found) {
        if (!first_shortfall.empty()) {
          out.errors.push_back(first_shortfall);
        } else if (!ring_why.empty()) {
          out.errors.push_back("instance '" + i->name + "' (" + replica + ", TP " +
                               std::to_string(i->tp) + ") cannot be placed on this ring: " +
                               ring_why + "; a split cluster like this needs switch cabling");
        } else {
          out.errors.push_back("instance '" + i->name + "' (" + replica + ", TP " +
                               std::to_string(i->tp) + "): no " + std::to_string(i->tp) +
                               " free nodes left" +
                               (ring ? " next to each other on the ring" : std::string()));
        }
        continue;
      }
      for (const auto& n : best.nodes) used[index[n]] = true;
      placed[replica] = std::move(best);
    }
  }
  // In file order.
  for (const auto& i : d.instances) {
    for (int r = 0; r < i.replicas; ++r) {
      auto it = placed.find(i.name + "-" + std::to_string(r));
      if (it != placed.end()) out.replicas.push_back(it->second);
    }
  }
  if (d.router.present) {
    if (!d.router.node.empty()) {
      if (!index.count(d.router.node)) {
        out.errors.push_back("the router's node '" + d.router.node + "' is not in the cluster");
      } else {
        out.router_node = d.router.node;
      }
    } else {
      // A free node when there is one, else the last node (a router is light).
      for (auto it = walk.rbegin(); it != walk.rend() && out.router_node.empty(); ++it) {
        if (!used[index[*it]]) out.router_node = *it;
      }
      if (out.router_node.empty() && !walk.empty()) out.router_node = walk.back();
    }
  }
  return out;
}

MemoryEstimator PlannerMemoryEstimator(std::string catalog_dir) {
  return [catalog_dir](const DeployInstanceSpec& i, int64_t node_memory) -> Result<ReplicaMemory> {
    Result<engine::ModelFootprint> fp = InvalidArgumentError("no model");
    std::string from;
    if (IsDirectory(i.model)) {
      fp = engine::LoadFolderModel(i.model);
      from = "the model folder's config.json and safetensors headers";
    } else if (!catalog_dir.empty()) {
      fp = engine::LoadCatalogModel(catalog_dir, BaseName(i.model));
      from = "the model catalog entry '" + BaseName(i.model) + "'";
    }
    if (!IsDirectory(i.model) && !fp.ok()) {
      return NotFoundError("model folder " + i.model +
                           " is not on this machine and the catalog has no '" + BaseName(i.model) +
                           "'");
    }
    if (!fp.ok()) return fp.status();
    engine::PlanRequest req;
    req.nodes = i.tp;
    req.node_memory = node_memory > 0 ? node_memory : int64_t{128} << 30;
    // As `octet serve` runs it: --context (the model's, at most 4096), --slots
    // sequences, --kv-dtype, this CPU engine's f32 activations.
    req.context = i.context > 0 ? i.context : 4096;
    req.concurrency = i.num_slots;
    req.kv_dtype = i.kv_dtype;
    req.activation_dtype = "f32";
    req.max_tp = std::max(8, i.tp);
    req.load_mtp = i.speculative == "mtp";
    OCTET_ASSIGN_OR_RETURN(engine::MemoryPlan plan, engine::PlanMemory(*fp, req));
    if (!plan.tp_valid) {
      for (const auto& v : plan.degrees) {
        if (v.tp == i.tp && !v.reason.empty())
          return InvalidArgumentError("TP " + std::to_string(i.tp) + ": " + v.reason);
      }
      return InvalidArgumentError("TP " + std::to_string(i.tp) + " is not valid for this model");
    }
    ReplicaMemory m;
    for (const auto& n : plan.per_node) m.per_rank_bytes.push_back(n.total_bytes);
    m.note = "memory as `octet plan` counts it, from " + from;
    return m;
  };
}

bool SameModelFolder(const std::string& reported, const std::string& named) {
  if (reported == named) return true;
  namespace fs = std::filesystem;
  auto normal = [](const std::string& p) {
    std::string s = fs::path(p).lexically_normal().string();
    while (s.size() > 1 && s.back() == '/') s.pop_back();
    return s;
  };
  if (normal(reported) == normal(named)) return true;
  std::error_code ec;
  const fs::path real = fs::canonical(named, ec);
  return !ec && normal(real.string()) == normal(reported);
}

// ---- capacity -------------------------------------------------------------------------

namespace {

// A stored run's request rate: concurrency / (e2e TTFT + response tokens /
// per-request decode rate) of its highest-concurrency test (0: none usable).
// A test without a per-request decode rate (every token of a short response
// in one chunk) uses the aggregate one shared by its concurrent requests.
double RunRequestRate(const BenchRun& run, std::string* how) {
  const BenchResult* best = nullptr;
  auto per_request_tps = [](const BenchResult& r) {
    if (!r.tg_req_throughput.empty() && r.tg_req_throughput.mean > 0)
      return r.tg_req_throughput.mean;
    if (!r.tg_throughput.empty() && r.tg_throughput.mean > 0)
      return r.tg_throughput.mean / static_cast<double>(r.concurrency);
    return 0.0;
  };
  for (const auto& r : run.results) {
    if (r.response_size <= 0 || r.concurrency <= 0 || r.e2e_ttft.empty() ||
        !(per_request_tps(r) > 0)) {
      continue;
    }
    if (!best || r.concurrency > best->concurrency) best = &r;
  }
  if (!best) return 0;
  const double tps = per_request_tps(*best);
  const double seconds =
      best->e2e_ttft.mean / 1000.0 + static_cast<double>(best->response_size) / tps;
  if (!(seconds > 0)) return 0;
  const double rate = static_cast<double>(best->concurrency) / seconds;
  char buf[256];
  std::snprintf(buf, sizeof buf, "%lld / (TTFT %.3g s + %lld tok / %.3g tok/s%s) of its test '%s'",
                static_cast<long long>(best->concurrency), best->e2e_ttft.mean / 1000.0,
                static_cast<long long>(best->response_size), tps,
                best->tg_req_throughput.empty() ? " (aggregate / concurrency)" : "",
                best->test.empty() ? best->Name().c_str() : best->test.c_str());
  *how = buf;
  return rate;
}

std::string Num3(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

}  // namespace

DeploymentCapacity PlanDeploymentCapacity(const Deployment& d, int cluster_nodes,
                                          const std::string& bench_store_path,
                                          const std::vector<double>& fractions) {
  DeploymentCapacity out;
  nlohmann::json rates_json = nlohmann::json::object();
  auto unavailable = [&](const std::string& why) {
    out.available = false;
    out.reason = why;
    out.text = "capacity: " + why + "\n";
    out.json = nlohmann::json{{"available", false}, {"reason", why}, {"rates", rates_json}}.dump();
    return out;
  };
  if (d.instances.empty()) return unavailable("the deployment has no instance");

  // The stored runs (newest first), when there is a store: opening is
  // read-mostly but creates the file, so a missing one is not opened.
  std::vector<BenchRun> runs;
  std::string store_note;
  if (!bench_store_path.empty()) {
    std::error_code ec;
    if (!std::filesystem::exists(bench_store_path, ec)) {
      store_note = "no bench store " + bench_store_path;
    } else if (auto store = BenchRunStore::Open(bench_store_path); !store.ok()) {
      store_note = "bench store " + bench_store_path + ": " + store.status().message();
    } else if (auto list = (*store)->ListRuns(); list.ok()) {
      for (const BenchRun& head : *list) {
        if (head.state != "complete" || head.result_count == 0) continue;
        if (auto full = (*store)->GetRun(head.id); full.ok()) runs.push_back(std::move(*full));
      }
    }
  }
  // The router's policy pools that name an instance.
  std::map<std::string, std::pair<double, std::string>> policy_rate;
  if (d.router.present) {
    const router::PolicyParseResult r = router::LoadPolicyFile(d.router.policy);
    if (r.ok()) {
      for (const auto& pool : r.policy->pools) {
        if (!pool.instance.empty() && pool.capacity.requests_per_s > 0) {
          policy_rate[pool.instance] = {
              pool.capacity.requests_per_s,
              "the policy's capacity.requests_per_s of pool '" + pool.name + "'"};
        }
      }
    }
  }
  std::string missing;
  for (const auto& i : d.instances) {
    InstanceRate ir;
    ir.instance = i.name;
    ir.replicas = i.replicas;
    ir.tp = i.tp;
    const std::string folder_name = BaseName(i.model);
    for (const BenchRun& run : runs) {
      const bool same_model =
          (!run.provenance.model_path.empty() &&
           SameModelFolder(run.provenance.model_path, i.model)) ||
          (run.provenance.model_path.empty() &&
           (run.topology.model == folder_name ||
            (!i.served_model_name.empty() && run.topology.model == i.served_model_name)));
      if (!same_model || run.topology.tp != i.tp) continue;
      std::string how;
      const double rate = RunRequestRate(run, &how);
      if (rate > 0) {
        ir.requests_per_s = rate;
        ir.bench_run = run.id;
        ir.source = "stored `octet bench` run " + std::to_string(run.id) +
                    (run.label.empty() ? "" : " ('" + run.label + "')") + " of " + folder_name +
                    " at TP " + std::to_string(i.tp) + ": " + how;
        break;
      }
    }
    if (ir.requests_per_s <= 0) {
      if (auto it = policy_rate.find(i.name); it != policy_rate.end()) {
        ir.requests_per_s = it->second.first;
        ir.source = it->second.second;
      }
    }
    if (ir.requests_per_s <= 0 && missing.empty()) missing = i.name;
    rates_json[i.name] = {{"requests_per_s", ir.requests_per_s},
                          {"source", ir.source},
                          {"replicas", ir.replicas},
                          {"tp", ir.tp}};
    if (ir.bench_run) rates_json[i.name]["bench_run"] = ir.bench_run;
    out.rates.push_back(std::move(ir));
  }
  if (!missing.empty()) {
    return unavailable("the per-replica request rate of instance '" + missing +
                       "' is unknown: no stored `octet bench` run of its model at its TP degree" +
                       (store_note.empty() ? std::string() : " (" + store_note + ")") +
                       ", and no capacity.requests_per_s on a router policy pool with `instance: " +
                       missing + "`");
  }

  // The large pool: the largest TP degree (the first such instance).
  size_t large = 0;
  for (size_t k = 1; k < d.instances.size(); ++k) {
    if (d.instances[k].tp > d.instances[large].tp) large = k;
  }
  const InstanceRate& L = out.rates[large];
  out.large = L.instance;
  router::CapacityPool lp{L.instance, L.replicas, L.tp, L.requests_per_s};
  const int total = cluster_nodes > 0 ? std::max(cluster_nodes, d.node_count()) : d.node_count();
  std::string rates_text = "per-replica rates:\n";
  for (const auto& r : out.rates) {
    rates_text += "  " + r.instance + ": " + Num3(r.requests_per_s) + " req/s (" + r.source + ")\n";
  }
  nlohmann::json j;
  if (d.instances.size() == 1) {
    // No routing: the instance is the whole of it.
    const int baseline = total / L.tp;
    const double base_rps = baseline * L.requests_per_s;
    const double cap = lp.capacity();
    j = {{"large",
          {{"name", L.instance},
           {"replicas", L.replicas},
           {"nodes_per_replica", L.tp},
           {"requests_per_s_per_replica", L.requests_per_s},
           {"capacity_rps", cap}}},
         {"small", nullptr},
         {"total_nodes", total},
         {"baseline", {{"replicas", baseline}, {"rps", base_rps}}},
         {"points", nlohmann::json::array({{{"fraction_large", 1.0},
                                            {"lambda_max_rps", cap},
                                            {"gain", base_rps > 0 ? cap / base_rps : 0.0},
                                            {"bottleneck", L.instance},
                                            {"small_speed_needed", 0.0}}})}};
    out.text = "one instance '" + L.instance + "': " + std::to_string(L.replicas) + " x " +
               std::to_string(L.tp) + "-node replicas at " + Num3(L.requests_per_s) +
               " req/s each = " + Num3(cap) + " req/s; the whole cluster (" +
               std::to_string(total) + " nodes) would serve " + Num3(base_rps) + " req/s\n" +
               rates_text;
  } else {
    // The others together: their capacities add up.
    std::string small_name;
    int small_replicas = 0, small_nodes = 0;
    double small_capacity = 0;
    for (size_t k = 0; k < out.rates.size(); ++k) {
      if (k == large) continue;
      const InstanceRate& r = out.rates[k];
      small_name += (small_name.empty() ? "" : "+") + r.instance;
      small_replicas += r.replicas;
      small_nodes += r.replicas * r.tp;
      small_capacity += r.replicas * r.requests_per_s;
    }
    router::CapacityPool sp{small_name, small_replicas,
                            std::max(1, small_replicas > 0 ? small_nodes / small_replicas : 1),
                            small_replicas > 0 ? small_capacity / small_replicas : 0};
    auto plan = router::PlanCapacity(lp, sp, fractions, total);
    if (!plan.ok()) return unavailable(plan.status().message());
    j = plan->ToJson();
    out.text = plan->ToText();
    if (d.instances.size() > 2) {
      out.text += "(the small pool '" + small_name +
                  "' is the other instances together: the requests not sent to '" + L.instance +
                  "' spread over them in proportion to their capacity)\n";
    }
    out.text += rates_text;
  }
  j["available"] = true;
  j["rates"] = rates_json;
  j["large_instance"] = L.instance;
  out.available = true;
  out.json = j.dump();
  return out;
}

}  // namespace octet::app
