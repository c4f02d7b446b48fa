// `octet plan`: will a model fit these nodes? Per-node breakdown (weights,
// KV cache, workspace, reserve, headroom), the verdict, and which TP degrees
// the model can take (with the reason for the others), the weight bytes one
// decode step reads (a mixture-of-experts model: only its active experts)
// and the memory-bound decode estimate they give. The model is a folder
// (exact bytes from its safetensors headers) or a catalog entry
// (resources/models/*.json). Contract: docs/CLI.md; the arithmetic:
// octet/engine/memory_plan.h. Exit 0 whenever a plan was made (fits or not;
// "fits" is in the JSON), 2 on bad flags, 1 when the model cannot be read.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "command.h"
#include "octet/base/args.h"
#include "octet/base/file_util.h"
#include "octet/engine/memory_plan.h"

#ifndef OCTET_SOURCE_RESOURCES_DIR
#define OCTET_SOURCE_RESOURCES_DIR ""
#endif

namespace octet::cli {
namespace {

constexpr const char* kProgram = "octet plan";

int UsageError(const std::string& why) {
  std::cerr << kProgram << ": " << why << " (see " << kProgram << " --help)\n";
  return kExitUsage;
}

// Where the catalog is: --catalog, $OCTET_MODEL_CATALOG, next to the installed
// program (../share/octet/models), or the source tree this was built from.
std::string CatalogDir(const std::string& flag) {
  if (!flag.empty()) return flag;
  if (const char* env = std::getenv("OCTET_MODEL_CATALOG"); env && *env) return env;
  if (auto exe = SelfExecutablePath(); exe.ok()) {
    const std::string installed = JoinPath(DirName(DirName(*exe)), "share/octet/models");
    if (IsDirectory(installed)) return installed;
  }
  return JoinPath(OCTET_SOURCE_RESOURCES_DIR, "models");
}

std::string B(int64_t bytes) {
  if (bytes < 0) return "-" + FormatBytes(double(-bytes));
  return FormatBytes(double(bytes));
}

// Decimal gigabytes, as checkpoints are quoted ("469.9 GB").
std::string Gb(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GB", double(bytes) / 1e9);
  return buf;
}

std::string Billions(int64_t n) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1fB", double(n) / 1e9);
  return buf;
}

nlohmann::json ToJson(const engine::MemoryPlan& p) {
  const engine::ModelFootprint& m = p.model;
  nlohmann::json model = {{"id", m.id},
                          {"display_name", m.display_name},
                          {"source", m.source},
                          {"fictional", m.fictional},
                          {"architecture", m.architecture},
                          {"weight_format", m.weight_format},
                          {"params", m.params},
                          {"extra_params", m.extra_params},
                          {"active_params", m.active_params},
                          {"weight_bytes", m.TotalWeightBytes()},
                          {"mtp_weight_bytes", m.MtpWeightBytes()},
                          {"active_weight_bytes_per_token", m.ActiveBytesPerToken()},
                          {"num_layers", m.num_layers},
                          {"num_mtp_layers", m.num_mtp_layers},
                          {"num_heads", m.shape.num_heads},
                          {"num_kv_heads", m.shape.num_kv_heads},
                          {"head_dim", m.shape.head_dim},
                          {"hidden_size", m.shape.hidden_size},
                          {"vocab_size", m.shape.vocab_size},
                          {"num_experts", m.num_experts},
                          {"experts_per_token", m.experts_per_token},
                          {"moe_intermediate_size", m.moe_intermediate_size},
                          {"shared_intermediate_size", m.shared_intermediate_size},
                          {"num_moe_layers", m.num_moe_layers}};
  if (!m.note.empty()) model["note"] = m.note;
  nlohmann::json nodes = nlohmann::json::array();
  for (const auto& n : p.per_node) {
    nodes.push_back({{"node", n.node},
                     {"weights_bytes", n.weights_bytes},
                     {"kv_cache_bytes", n.kv_cache_bytes},
                     {"workspace_bytes", n.workspace_bytes},
                     {"reserve_bytes", n.reserve_bytes},
                     {"headroom_bytes", n.headroom_bytes},
                     {"total_bytes", n.total_bytes},
                     {"free_bytes", n.free_bytes},
                     {"fits", n.fits},
                     {"active_weight_bytes_per_token", n.active_weight_bytes_per_token}});
  }
  nlohmann::json degrees = nlohmann::json::array();
  for (const auto& d : p.degrees) {
    nlohmann::json j = {{"tp", d.tp}, {"valid", d.valid}};
    if (!d.valid) j["reason"] = d.reason;
    degrees.push_back(j);
  }
  const engine::PlanRequest& r = p.request;
  return {{"model", model},
          {"nodes", r.nodes},
          {"node_memory_bytes", r.node_memory},
          {"tp", p.tp},
          {"tp_valid", p.tp_valid},
          {"context", r.context},
          {"concurrency", r.concurrency},
          {"kv_dtype", r.kv_dtype},
          {"kv_bytes_per_token", p.kv_bytes_per_token},
          {"max_batch_tokens", r.max_batch_tokens},
          {"load_mtp", r.load_mtp},
          {"quantize", r.quantize_nvfp4 ? "nvfp4" : "off"},
          {"weight_bytes", p.weight_bytes},
          {"active_weight_bytes_per_token", p.active_weight_bytes_per_token},
          {"node_bandwidth_bytes_per_s", r.node_bandwidth},
          {"decode_tokens_per_s", p.decode_tokens_per_s},
          {"fits", p.fits},
          {"verdict", p.verdict},
          {"min_nodes", p.min_nodes},
          {"per_node", nodes},
          {"tp_degrees", degrees}};
}

std::string Human(const engine::MemoryPlan& p) {
  std::ostringstream o;
  const engine::ModelFootprint& m = p.model;
  o << m.display_name << "  [" << m.source << "]\n";
  if (m.fictional) o << "  (fictional: a derived config, not a released checkpoint; see its note)\n";
  o << "  " << m.architecture << ", " << m.weight_format << ", " << Billions(m.params)
    << " parameters";
  if (m.extra_params > 0) o << " (+" << Billions(m.extra_params) << " MTP)";
  if (m.num_experts > 0) {
    o << ", MoE " << m.num_experts << " experts / " << m.experts_per_token << " per token ("
      << Billions(m.active_params) << " active)";
  }
  const int64_t total = m.TotalWeightBytes();
  o << "\n  weights " << Gb(total) << " (" << B(total) << ")";
  if (m.num_mtp_layers > 0) {
    o << ", of which " << m.num_mtp_layers << " MTP layer" << (m.num_mtp_layers == 1 ? "" : "s")
      << " " << Gb(m.MtpWeightBytes())
      << (p.request.load_mtp ? " (loaded: --speculative mtp)" : " (not loaded)");
  }
  o << "; in memory " << Gb(p.weight_bytes) << "\n  active weights per token "
    << Gb(p.active_weight_bytes_per_token);
  if (m.num_experts > 0) {
    o << " (" << m.experts_per_token << " of " << m.num_experts << " routed experts"
      << (m.shared_intermediate_size > 0 ? " + shared" : "")
      << " + attention + router + lm_head + norms)";
  }
  o << "; KV " << B(p.kv_bytes_per_token) << " per token (" << p.request.kv_dtype << ")\n\n";
  const engine::PlanRequest& r = p.request;
  o << "plan: " << r.nodes << (r.nodes == 1 ? " node" : " nodes") << " x " << B(r.node_memory)
    << ", TP " << p.tp << ", context " << r.context << " x " << r.concurrency
    << (r.concurrency == 1 ? " sequence" : " sequences") << ", steps of " << r.max_batch_tokens
    << " tokens\n\n";
  char line[256];
  std::snprintf(line, sizeof line, "%-8s %11s %11s %11s %11s %11s %11s %11s\n", "node", "weights",
                "KV cache", "workspace", "reserve", "headroom", "total", "free");
  o << line;
  // Consecutive nodes with the same figures share a row.
  for (size_t i = 0; i < p.per_node.size();) {
    size_t j = i + 1;
    auto same = [&](const engine::NodePlan& a, const engine::NodePlan& b) {
      return a.weights_bytes == b.weights_bytes && a.kv_cache_bytes == b.kv_cache_bytes &&
             a.workspace_bytes == b.workspace_bytes;
    };
    while (j < p.per_node.size() && same(p.per_node[i], p.per_node[j])) ++j;
    const auto& n = p.per_node[i];
    const std::string label =
        j - i == 1 ? std::to_string(i) : std::to_string(i) + "-" + std::to_string(j - 1);
    std::snprintf(line, sizeof line, "%-8s %11s %11s %11s %11s %11s %11s %11s%s\n", label.c_str(),
                  B(n.weights_bytes).c_str(), B(n.kv_cache_bytes).c_str(),
                  B(n.workspace_bytes).c_str(), B(n.reserve_bytes).c_str(),
                  B(n.headroom_bytes).c_str(), B(n.total_bytes).c_str(), B(n.free_bytes).c_str(),
                  n.fits ? "" : "  short");
    o << line;
    i = j;
  }
  o << "\nverdict: " << p.verdict << "\n";
  if (p.decode_tokens_per_s > 0) {
    int64_t busiest = 0;
    for (const auto& n : p.per_node) busiest = std::max(busiest, n.active_weight_bytes_per_token);
    char estimate[512];
    std::snprintf(estimate, sizeof estimate,
                  "decode: at most %.1f tok/s for one sequence (memory roofline at TP %d: %s of "
                  "weights per token on the busiest node plus its KV cache of %lld positions, at "
                  "%.0f GB/s; communication not counted)\n",
                  p.decode_tokens_per_s, p.tp, Gb(busiest).c_str(),
                  static_cast<long long>(r.context), r.node_bandwidth / 1e9);
    o << estimate;
  }
  o << "\nTP degrees 1-" << r.max_tp << ":\n";
  for (const auto& d : p.degrees) {
    o << "  " << d.tp << "  " << (d.valid ? "valid" : "invalid: " + d.reason) << "\n";
  }
  return o.str();
}

}  // namespace

int RunPlan(const std::vector<std::string>& args) {
  ArgParser p(kProgram,
              "Will a model fit N nodes? Per-node weights (NVFP4 scales included), KV cache,\n"
              "workspace, reserve and headroom under tensor parallelism (one rank per node),\n"
              "the verdict, and the valid TP degrees. MODEL is a folder or a catalog name.");
  p.Option("model", "DIR|NAME", "model folder, or a catalog entry (--list shows them)")
      .Option("nodes", "N", "nodes (= TP ranks)", "1")
      .Option("node-memory", "SIZE", "memory per node", "128GiB")
      .Option("context", "N", "positions per sequence", "8192")
      .Option("concurrency", "C", "sequences in flight", "1")
      .Option("kv-dtype", "bf16|f16|fp8|f32", "KV cache element type", "bf16")
      .Option("max-batch-tokens", "N", "tokens per forward step (sizes the workspace)", "2048")
      .Option("reserve", "SIZE",
              "per node, never for the model (default: 1/8 of the node, "
              "16 GiB on a 128 GiB Spark: memory Linux never sees, the OS, "
              "the CUDA runtime)")
      .Option("headroom", "FRACTION", "share of each node kept free", "0.05")
      .Option("max-tp", "N", "list TP degrees up to this", "8")
      .Option("speculative", "off|mtp|ngram",
              "speculative decoding the run will use: mtp loads the checkpoint's MTP layers, "
              "whose weights and KV cache then count",
              "off")
      .Option("quantize", "nvfp4|off",
              "the run quantizes the unquantized linear weights to NVFP4 at load (serve "
              "--quantize nvfp4): they count as NVFP4",
              "off")
      .Option("node-bandwidth", "GB/S", "memory bandwidth of a node, for the decode estimate",
              "273")
      .Option("catalog", "DIR", "model catalog folder (default: the installed one)")
      .Flag("list", "list the catalog's models and exit")
      .Flag("json", "print one JSON document on stdout");
  if (Status s = p.Parse(args); !s.ok()) {
    std::cerr << s.message() << "\n";
    return kExitUsage;
  }
  if (p.help_requested()) {
    std::cout << p.Usage();
    return kExitOk;
  }
  const std::string catalog = CatalogDir(p.GetString("catalog"));
  if (p.GetFlag("list")) {
    auto all = engine::LoadCatalog(catalog);
    if (!all.ok()) {
      std::cerr << kProgram << ": " << all.status().message() << "\n";
      return kExitFailure;
    }
    nlohmann::json list = nlohmann::json::array();
    for (const auto& m : *all) {
      list.push_back({{"id", m.id},
                      {"display_name", m.display_name},
                      {"params", m.params},
                      {"weight_bytes", m.TotalWeightBytes()},
                      {"fictional", m.fictional}});
      if (!p.GetFlag("json")) {
        std::printf("%-22s %-28s %8s %10s%s\n", m.id.c_str(), m.display_name.c_str(),
                    Billions(m.params).c_str(), B(m.TotalWeightBytes()).c_str(),
                    m.fictional ? "  (fictional)" : "");
      }
    }
    if (p.GetFlag("json")) std::cout << list.dump() << "\n";
    return kExitOk;
  }
  if (!p.Given("model")) return UsageError("--model DIR|NAME is required");
  engine::PlanRequest r;
  auto nodes = p.GetInt("nodes");
  auto mem = p.GetBytes("node-memory");
  auto ctx = p.GetInt("context");
  auto conc = p.GetInt("concurrency");
  auto batch = p.GetInt("max-batch-tokens");
  auto headroom = p.GetDouble("headroom");
  auto max_tp = p.GetInt("max-tp");
  for (const Status& s : {nodes.status(), mem.status(), ctx.status(), conc.status(),
                          batch.status(), headroom.status(), max_tp.status()}) {
    if (!s.ok()) return UsageError(s.message());
  }
  if (*nodes < 1 || *nodes > 1024) return UsageError("--nodes must be in 1..1024");
  if (*mem <= 0) return UsageError("--node-memory must be positive");
  if (*ctx < 1) return UsageError("--context must be at least 1");
  if (*conc < 1) return UsageError("--concurrency must be at least 1");
  if (*batch < 1) return UsageError("--max-batch-tokens must be at least 1");
  if (!(*headroom >= 0 && *headroom < 1)) return UsageError("--headroom must be in [0, 1)");
  if (*max_tp < 1 || *max_tp > 64) return UsageError("--max-tp must be in 1..64");
  const std::string speculative = p.GetString("speculative");
  if (speculative != "off" && speculative != "mtp" && speculative != "ngram") {
    return UsageError("--speculative must be off, mtp or ngram");
  }
  auto bandwidth = p.GetDouble("node-bandwidth");
  if (!bandwidth.ok()) return UsageError(bandwidth.status().message());
  if (!(*bandwidth > 0) || !std::isfinite(*bandwidth)) {
    return UsageError("--node-bandwidth must be a positive number of GB/s");
  }
  r.load_mtp = speculative == "mtp";
  const std::string quantize = p.GetString("quantize");
  if (quantize != "off" && quantize != "nvfp4") {
    return UsageError("--quantize must be nvfp4 or off");
  }
  r.quantize_nvfp4 = quantize == "nvfp4";
  r.node_bandwidth = *bandwidth * 1e9;
  r.nodes = static_cast<int>(*nodes);
  r.node_memory = *mem;
  r.context = *ctx;
  r.concurrency = *conc;
  r.max_batch_tokens = *batch;
  r.headroom = *headroom;
  r.max_tp = static_cast<int>(*max_tp);
  r.kv_dtype = p.GetString("kv-dtype");
  if (r.kv_dtype != "bf16" && r.kv_dtype != "f16" && r.kv_dtype != "fp8" && r.kv_dtype != "f32") {
    return UsageError("--kv-dtype must be bf16, f16, fp8 or f32");
  }
  if (p.Given("reserve")) {
    auto reserve = p.GetBytes("reserve");
    if (!reserve.ok()) return UsageError(reserve.status().message());
    if (*reserve < 0) return UsageError("--reserve must be >= 0");
    r.reserve = *reserve;
  }
  const std::string model = p.GetString("model");
  Result<engine::ModelFootprint> m = IsDirectory(model) ? engine::LoadFolderModel(model)
                                                        : engine::LoadCatalogModel(catalog, model);
  if (!m.ok()) {
    std::cerr << kProgram << ": " << m.status().message() << "\n";
    return kExitFailure;
  }
  auto plan = engine::PlanMemory(*m, r);
  if (!plan.ok()) {
    std::cerr << kProgram << ": " << plan.status().message() << "\n";
    return kExitFailure;
  }
  if (p.GetFlag("json")) {
    std::cout << ToJson(*plan).dump() << "\n";
  } else {
    std::cout << Human(*plan);
  }
  return kExitOk;
}

}  // namespace octet::cli
