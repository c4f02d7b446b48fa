// `octet plan`: will a model fit these nodes? Per-node breakdown (weights,
// KV cache, workspace, reserve, headroom), the verdict, and which TP degrees
// the model can take (with the reason for the others), the weight bytes one
// decode step reads (a mixture-of-experts model: only its active experts)
// and the memory-bound decode estimate they give. The model is a folder
// (exact bytes from its safetensors headers) or a catalog entry
// (resources/models/*.json). Contract: shared/docs/CLI.md; the arithmetic:
// octet/engine/memory_plan.h. Exit 0 whenever a plan was made (fits or not;
// "fits" is in the JSON), 2 on bad flags, 1 when the model cannot be read.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <sstream>

#include "command.h"
#include "octet/app/agent_client.h"
#include "octet/app/cluster_profile.h"
#include "octet/app/hub.h"
#include "octet/app/model_summary.h"
#include "octet/base/args.h"
#include "octet/base/file_util.h"
#include "octet/base/json.h"
#include "octet/engine/memory_plan.h"

#ifndef OCTET_SOURCE_RESOURCES_DIR
#define OCTET_SOURCE_RESOURCES_DIR ""
#endif

namespace octet::cli {
namespace {

constexpr const char* kProgram = "octet plan";

int UsageError(const std::string& why) {
  std::cerr << WithProgram(kProgram, why) << " (see " << kProgram << " --help)\n";
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
  nlohmann::json model = {
      {"id", m.id},
      {"display_name", m.display_name},
      {"source", m.source},
      {"fictional", m.fictional},
      {"hub_repo", m.hub_repo.empty() ? nlohmann::json() : nlohmann::json(m.hub_repo)},
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
  if (!m.hub_repo.empty())
    o << "  Hub repo " << m.hub_repo << " (octet pull " << m.hub_repo << ")\n";
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

// What a plan made from the Hub (a repo id not pulled here) was made from.
struct HubSource {
  app::HubModelInfo info;
  int64_t config_weight_bytes = 0;  // the config's own estimate, before the file sizes
};

// The model info (file list with sizes), config.json and, when listed,
// hf_quant_config.json: nothing else is fetched (app::FetchHubModelInfo).
Result<engine::ModelFootprint> FootprintFromHub(const std::string& text, HubSource* src) {
  OCTET_ASSIGN_OR_RETURN(src->info, app::FetchHubModelInfo(text));
  const app::HubModelInfo& i = src->info;
  const std::string id = i.revision == "main" ? i.repo : i.repo + "@" + i.revision;
  OCTET_ASSIGN_OR_RETURN(engine::ModelFootprint from_config,
                         engine::LoadHubConfigModel(i.config_json, i.quant_config_json, 0, id));
  src->config_weight_bytes = from_config.TotalWeightBytes();
  OCTET_ASSIGN_OR_RETURN(
      engine::ModelFootprint m,
      engine::LoadHubConfigModel(i.config_json, i.quant_config_json, i.safetensors_bytes, id));
  std::string read;
  for (const auto& f : i.files_read) read += (read.empty() ? "" : ", ") + f;
  m.source = "Hub " + i.endpoint + " " + i.repo + " commit " + i.commit.substr(0, 12) +
             ": file list + " + read + "; not downloaded";
  m.hub_repo = i.repo;
  return m;
}

// The nodes of a saved cluster and the smallest one's memory (a simulated
// node's budget, else its MemTotal), from each agent's facts.
Status ClusterShape(const std::string& name, const std::string& config_dir, int* nodes,
                    int64_t* node_memory) {
  OCTET_ASSIGN_OR_RETURN(app::ClusterProfile profile, app::LoadProfile(name, config_dir));
  if (profile.nodes.empty()) return FailedPreconditionError("cluster '" + name + "' has no nodes");
  int64_t smallest = 0;
  for (size_t i = 0; i < profile.nodes.size(); ++i) {
    OCTET_ASSIGN_OR_RETURN(app::AgentEndpoint ep, app::EndpointFor(profile, i));
    OCTET_ASSIGN_OR_RETURN(auto client, app::AgentClient::Create(ep));
    OCTET_ASSIGN_OR_RETURN(app::NodeFacts f, client->GetFacts(Deadline::AfterMs(10'000)));
    const int64_t mem =
        static_cast<int64_t>(f.memory.budget_bytes ? f.memory.budget_bytes : f.memory.total_bytes);
    if (i == 0 || mem < smallest) smallest = mem;
  }
  *nodes = static_cast<int>(profile.nodes.size());
  *node_memory = smallest;
  return Status::Ok();
}

}  // namespace

int RunPlan(const std::vector<std::string>& args) {
  ArgParser p(kProgram,
              "Will a model fit N nodes? Per-node weights (NVFP4 scales included), KV cache,\n"
              "workspace, reserve and headroom under tensor parallelism (one rank per node),\n"
              "the verdict, and the valid TP degrees. MODEL is a folder, a catalog name, or a\n"
              "Hub repo id ORG/NAME[@REV]: a pulled one is read from the cache, any other is\n"
              "planned from the Hub's file list and config.json without downloading weights.");
  p.Positional("[MODEL]", "the same as --model")
      .Option("model", "DIR|NAME|ORG/NAME[@REV]",
              "model folder, a catalog entry (--list shows them), or a Hub repo id")
      .Option("cluster", "NAME",
              "plan for this saved cluster: its node count and smallest node memory, from the "
              "agents (--nodes / --node-memory override)")
      .Option("config-dir", "DIR", "where cluster profiles are (with --cluster)")
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
      std::cerr << WithProgram(kProgram, all.status().message()) << "\n";
      return kExitFailure;
    }
    nlohmann::json list = nlohmann::json::array();
    for (const auto& m : *all) {
      list.push_back(
          {{"id", m.id},
           {"display_name", m.display_name},
           {"params", m.params},
           {"weight_bytes", m.TotalWeightBytes()},
           {"fictional", m.fictional},
           {"hub_repo", m.hub_repo.empty() ? nlohmann::json() : nlohmann::json(m.hub_repo)}});
      if (!p.GetFlag("json")) {
        std::printf("%-22s %-28s %8s %10s  %s\n", m.id.c_str(), m.display_name.c_str(),
                    Billions(m.params).c_str(), B(m.TotalWeightBytes()).c_str(),
                    m.fictional ? "(fictional: no Hub repo)" : m.hub_repo.c_str());
      }
    }
    if (p.GetFlag("json")) std::cout << list.dump() << "\n";
    return kExitOk;
  }
  if (p.positional().size() > 1) return UsageError("give one MODEL");
  if (p.Given("model") && !p.positional().empty()) return UsageError("MODEL or --model, not both");
  if (!p.Given("model") && p.positional().empty()) {
    return UsageError("--model DIR|NAME|ORG/NAME is required");
  }
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
  std::string cluster_line;
  if (p.Given("cluster")) {
    int cluster_nodes = 0;
    int64_t cluster_memory = 0;
    if (Status s = ClusterShape(p.GetString("cluster"), p.GetString("config-dir"), &cluster_nodes,
                                &cluster_memory);
        !s.ok()) {
      std::cerr << kProgram << ": --cluster " << p.GetString("cluster") << ": " << s.message()
                << "\n";
      return kExitFailure;
    }
    if (!p.Given("nodes")) r.nodes = cluster_nodes;
    if (!p.Given("node-memory")) r.node_memory = cluster_memory;
    cluster_line = "cluster " + p.GetString("cluster") + ": " + std::to_string(cluster_nodes) +
                   " nodes, the smallest " + B(cluster_memory);
  }
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
  std::string model = p.Given("model") ? p.GetString("model") : p.positional()[0];
  // A pulled repo id is its snapshot folder.
  if (!IsDirectory(model) && app::hub::LooksLikeRepoRef(model)) {
    auto snap = app::hub::ResolveSnapshot(app::hub::HubConfig::FromEnvironment(),
                                          *app::hub::ParseRepoRef(model));
    if (snap.ok()) model = *snap;
  }
  std::string planned_from = "folder";
  HubSource hub;
  Result<engine::ModelFootprint> m = NotFoundError("");
  if (IsDirectory(model)) {
    m = engine::LoadFolderModel(model);
  } else {
    planned_from = "catalog";
    m = engine::LoadCatalogModel(catalog, model);
    if (!m.ok() && m.status().code() == StatusCode::kNotFound &&
        app::hub::LooksLikeRepoRef(model)) {
      planned_from = "hub";
      m = FootprintFromHub(model, &hub);
    }
  }
  if (!m.ok()) {
    std::cerr << WithProgram(kProgram, m.status().message()) << "\n";
    return kExitFailure;
  }
  auto plan = engine::PlanMemory(*m, r);
  if (!plan.ok()) {
    std::cerr << WithProgram(kProgram, plan.status().message()) << "\n";
    return kExitFailure;
  }
  if (p.GetFlag("json")) {
    nlohmann::json j = ToJson(*plan);
    j["planned_from"] = planned_from;
    if (p.Given("cluster")) j["cluster"] = p.GetString("cluster");
    if (planned_from == "hub") {
      j["hub"] = {{"repo", hub.info.repo},
                  {"revision", hub.info.revision},
                  {"commit", hub.info.commit},
                  {"endpoint", hub.info.endpoint},
                  {"safetensors_files", hub.info.safetensors_files},
                  {"safetensors_bytes", hub.info.safetensors_bytes},
                  {"config_weight_bytes", hub.config_weight_bytes},
                  {"files_read", hub.info.files_read}};
    }
    std::cout << j.dump() << "\n";
  } else {
    if (!cluster_line.empty()) std::cout << cluster_line << "\n";
    if (planned_from == "hub") {
      std::cout << "planned from the Hub before download: " << hub.info.repo << "@"
                << hub.info.revision << " (commit " << hub.info.commit.substr(0, 12) << "), "
                << hub.info.safetensors_files << " safetensors file(s) of "
                << Gb(hub.info.safetensors_bytes) << " (the config alone gives "
                << Gb(hub.config_weight_bytes) << "); `octet pull " << hub.info.repo
                << "` downloads it\n\n";
    }
    std::cout << Human(*plan);
  }
  return kExitOk;
}

}  // namespace octet::cli
