// `octet serve` and `octet worker` as rank 0 (RunServeOn: the scheduler, the
// OpenAI-compatible HTTP server, the gRPC InferenceService, figures lines) and
// as a follower rank (RunFollower); see tp_launch.h.
#include <filesystem>
#include <iostream>
#include <mutex>
#include <optional>
#include <thread>

#include "command.h"
#include "generation_settings.h"
#include "octet/agent/node_facts.h"
#include "octet/app/bench_store.h"
#include "octet/app/chat_client.h"
#include "octet/app/inference_service.h"
#include "octet/base/api_key.h"
#include "octet/base/build_info.h"
#include "octet/base/file_util.h"
#include "octet/base/json.h"
#include "octet/base/log.h"
#include "octet/engine/completion.h"
#include "octet/engine/generate.h"
#include "octet/engine/openai_server.h"
#include "octet/engine/scheduler.h"
#include "tp_launch.h"

namespace octet::cli {

// ---- serving ------------------------------------------------------------------------

void AddServeFlags(ArgParser& p, bool worker) {
  p.Option("host", "H", "address the HTTP (and gRPC) server listens on", "127.0.0.1")
      .Option("port", "P", "HTTP port (0: any free port)", "8000")
      .Option("grpc-port", "P|auto|off",
              "gRPC InferenceService port (auto: the HTTP port + 1, any free port when --port 0)",
              worker ? "off" : "auto")
      .Option("served-model-name", "NAME", "the model id clients send (default: the folder name)")
      .Option("context", "N",
              "positions per sequence, prompt + output (default: the model's "
              "max_position_embeddings, at most 4096)")
      .Option("slots", "N", "sequences decoded together (KV cache slots)", "8")
      .Option("kv-memory", "SIZE",
              "KV cache budget per rank; fewer slots when it does not hold "
              "them all",
              "4GiB")
      .Option("max-batch-tokens", "N", "tokens per forward step (decode rows + prompt chunks)",
              "512")
      .Option("max-queue", "N", "waiting requests beyond this get HTTP 429", "1024");
  if (!worker) AddSpeculativeFlags(p);  // a worker's come with AddGenerateFlags
  if (!worker) {
    p.Option("api-key", "KEY",
             "require \"Authorization: Bearer KEY\" on every HTTP route but /health (401 "
             "without)")
        .Option("api-key-file", "FILE", "as --api-key, the key being FILE's first line")
        .Flag("api-key-health", "require the key on /health too")
        .Flag("json", "print a JSON ready line (endpoints, model, slots) on stdout once serving");
  }
}

namespace {

nlohmann::json SchedulerFigures(const engine::SchedulerMetrics& m, const std::string& state,
                                bool speculative, std::string_view backend) {
  nlohmann::json j = {{"state", state},
                      {"backend", std::string(backend)},
                      {"prefill_tps", m.prefill_tps},
                      {"decode_tps", m.decode_tps},
                      {"step_ms", m.step_ms},
                      {"allreduce_share", m.allreduce_share},
                      {"kv_used_fraction", m.kv_used_fraction},
                      {"running_requests", m.running},
                      {"queued_requests", m.queued},
                      {"requests_total", m.requests_total},
                      {"generation_tokens_total", m.generation_tokens_total}};
  if (speculative) {
    j["acceptance_rate"] = m.spec_acceptance_rate;
    j["spec_drafted_tokens_total"] = m.spec_drafted_tokens_total;
    j["spec_accepted_tokens_total"] = m.spec_accepted_tokens_total;
  }
  return j;
}

}  // namespace

Result<std::optional<engine::Tokenizer>> LoadOptionalTokenizer(const std::string& model_dir) {
  std::optional<engine::Tokenizer> tok;
  if (PathExists(JoinPath(model_dir, "tokenizer.json"))) {
    OCTET_ASSIGN_OR_RETURN(engine::Tokenizer t, engine::Tokenizer::Load(model_dir));
    tok.emplace(std::move(t));
  }
  return tok;
}

int RunServeOn(engine::TpRuntime& rt, const std::optional<engine::Tokenizer>& tok,
               const ArgParser& p, const std::string& program, bool print_figures) {
  auto fail = [&](const std::string& why, int code) {
    std::lock_guard<std::mutex> lock(OutputLock());
    std::cerr << program << ": " << (code == kExitUsage ? "" : "error: ") << why << "\n";
    return code;
  };
  const engine::ModelConfig& c = rt.config();
  const std::string model_dir = p.GetString("model");
  auto port = p.GetInt("port");
  auto slots = p.GetInt("slots");
  auto batch = p.GetInt("max-batch-tokens");
  auto queue = p.GetInt("max-queue");
  auto kv_memory = p.GetBytes("kv-memory");
  for (const Status& s :
       {port.status(), slots.status(), batch.status(), queue.status(), kv_memory.status()}) {
    if (!s.ok()) return fail(s.message(), kExitUsage);
  }
  int64_t context =
      std::min<int64_t>(c.max_position_embeddings > 0 ? c.max_position_embeddings : 4096, 4096);
  if (p.Given("context")) {
    auto ctx = p.GetInt("context");
    if (!ctx.ok()) return fail(ctx.status().message(), kExitUsage);
    context = *ctx;
  }
  if (context < 2) return fail("--context must be at least 2", kExitUsage);
  auto speculative = ReadSpeculativeFlags(p);
  if (!speculative.ok()) return fail(speculative.status().message(), kExitUsage);
  if (*slots < 1 || *slots > 256) return fail("--slots must be in 1..256", kExitUsage);
  if (*port < 0 || *port > 65535) return fail("--port must be in 0..65535", kExitUsage);
  auto kv_dtype = kernels::ParseKvDtype(p.GetString("kv-dtype"));
  if (!kv_dtype.ok()) return fail("--kv-dtype: " + kv_dtype.status().message(), kExitUsage);
  // The KV arena (K and V per layer for this rank's kv heads).
  const int64_t per_position = c.num_layers * 2 * rt.model().local_kv_heads() * c.head_dim *
                               kernels::KvDtypeBytes(*kv_dtype);
  int64_t num_slots = *slots;
  const int64_t fit = *kv_memory / std::max<int64_t>(1, per_position * context);
  if (fit < 1) {
    return fail("--kv-memory " + FormatBytes(double(*kv_memory)) + " cannot hold one sequence of " +
                    std::to_string(context) + " positions (" +
                    FormatBytes(double(per_position * context)) + "); lower --context",
                kExitUsage);
  }
  if (fit < num_slots) {
    OCTET_LOG(WARNING) << "KV budget " << FormatBytes(double(*kv_memory)) << " holds " << fit
                       << " sequences of " << context << " positions, not " << num_slots
                       << ": using " << fit << " slots (raise --kv-memory or lower --context)";
    num_slots = fit;
  }
  engine::SchedulerOptions so;
  so.num_slots = static_cast<int>(num_slots);
  so.context = context;
  so.kv_dtype = *kv_dtype;
  so.max_batch_tokens = std::max<int64_t>(*batch, num_slots + 1);
  so.max_queue = static_cast<size_t>(std::max<int64_t>(1, *queue));
  so.speculative = *speculative;
  const bool spec_on = so.speculative.method != engine::SpeculativeMethod::kOff;
  engine::Scheduler sched(rt, so);
  if (Status s = sched.Start(); !s.ok()) return fail(s.message(), kExitFailure);

  const std::string name =
      p.Given("served-model-name") ? p.GetString("served-model-name") : BaseName(model_dir);
  engine::CompletionService svc(sched, tok ? &*tok : nullptr, name);
  // A request's absent sampling fields come from generation_config.json.
  auto gen_defaults = engine::ReadGenerationDefaults(model_dir);
  if (!gen_defaults.ok()) {
    sched.Stop(CancelledError("not serving"));
    return fail(gen_defaults.status().message(), kExitFailure);
  }
  if (!gen_defaults->empty()) {
    OCTET_LOG(INFO) << "request defaults from " << gen_defaults->path << ":"
                    << (gen_defaults->temperature
                            ? " temperature " + std::to_string(*gen_defaults->temperature)
                            : "")
                    << (gen_defaults->top_p ? " top_p " + std::to_string(*gen_defaults->top_p) : "")
                    << (gen_defaults->top_k ? " top_k " + std::to_string(*gen_defaults->top_k) : "")
                    << (gen_defaults->repetition_penalty
                            ? " repetition_penalty " +
                                  std::to_string(*gen_defaults->repetition_penalty)
                            : "")
                    << (gen_defaults->max_new_tokens
                            ? " max_new_tokens " + std::to_string(*gen_defaults->max_new_tokens)
                            : "");
  }
  svc.set_defaults(*gen_defaults);
  // What `octet bench` records as the run's topology snapshot (and sizes its
  // token-id prompts by: vocab_size).
  nlohmann::json info = {
      {"tp", rt.world_size()},
      {"collectives", rt.Describe()},
      {"slots", so.num_slots},
      {"kv_dtype", std::string(kernels::KvDtypeName(so.kv_dtype))},
      {"vocab_size", c.vocab_size},
      {"transport", p.GetString("transport")},
      {"algorithm", p.GetString("algo")},
      {"backend", std::string(rt.backend().name()) + " x" +
                      std::to_string(rt.backend().num_threads()) + " threads per rank"},
      {"dtype", c.quant.nvfp4 ? std::string("NVFP4") : c.torch_dtype},
      {"engine", "octet " + std::string(OCTET_VERSION)}};
  // What a request that leaves a sampling field out gets, and from where (the
  // workbench's chat shows it; app::ParseServerDefaults reads it).
  info["generation_defaults"] = nlohmann::json::parse(app::GenerationDefaultsJson(*gen_defaults));
  if (spec_on) {
    info["speculative"] = std::string(engine::SpeculativeMethodName(so.speculative.method));
    info["draft_tokens"] = so.speculative.draft_tokens;
    info["draft_length"] = so.speculative.adaptive ? "auto" : "fixed";
  }
  {
    // What `octet bench` records as the run's provenance (bench store v4).
    std::error_code ec;
    const std::filesystem::path abs = std::filesystem::absolute(model_dir, ec);
    info["model_path"] = ec ? model_dir : abs.lexically_normal().string();
    auto hash = app::ModelContentHash(model_dir);
    if (hash.ok()) info["model_hash"] = *hash;
    info["context"] = so.context;
    info["threads"] = rt.backend().num_threads();
    info["cpu_model"] = agent::ReadCpuFacts().model;
    if (rt.backend().memory_kind() == kernels::MemoryKind::kDevice) {
      const agent::GpuProbe gpus = agent::ProbeGpus();
      if (!gpus.gpus.empty()) info["gpu_model"] = gpus.gpus.front().name;
    }
    info["commit"] = GetBuildInfo().commit;
  }
  engine::OpenAiServerOptions ho;
  ho.host = p.GetString("host");
  ho.port = static_cast<int>(*port);
  ho.info_json = info.dump();
  ho.histogram_max_tokens = context;
  // A body larger than any prompt of `context` tokens could be (64 bytes a
  // token covers JSON-escaped text and token-id arrays) is refused, 413,
  // before it is read.
  ho.max_body_bytes = static_cast<size_t>(std::max<int64_t>(int64_t{1} << 20, context * 64));
  auto api_key = LoadApiKey(p.GetString("api-key"), p.GetString("api-key-file"));
  if (!api_key.ok()) {
    sched.Stop(CancelledError("not serving"));
    return fail(api_key.status().message(), kExitUsage);
  }
  ho.api_key = *api_key;
  ho.api_key_health = p.GetFlag("api-key-health");
  ho.extra_metrics = [&rt]() {
    return "# HELP octet_tp_ranks Ranks of this model instance.\n# TYPE octet_tp_ranks gauge\n"
           "octet_tp_ranks " +
           std::to_string(rt.world_size()) + "\n";
  };
  auto http = engine::OpenAiServer::Start(svc, ho);
  if (!http.ok()) {
    sched.Stop(CancelledError("not serving"));
    return fail(http.status().message(), kExitFailure);
  }
  std::unique_ptr<app::InferenceGrpcServer> grpc;
  const std::string gp = p.GetString("grpc-port");
  std::string grpc_text;
  if (gp != "off") {
    int grpc_port = 0;
    if (gp == "auto") {
      grpc_port = *port == 0 ? 0 : static_cast<int>(*port) + 1;
    } else {
      try {
        grpc_port = std::stoi(gp);
      } catch (const std::exception&) {
        grpc_port = -1;
      }
      if (grpc_port < 0 || grpc_port > 65535) {
        sched.Stop(CancelledError("not serving"));
        return fail("--grpc-port must be a port, auto or off", kExitUsage);
      }
    }
    auto g = app::InferenceGrpcServer::Start(svc, ho.host + ":" + std::to_string(grpc_port));
    if (!g.ok()) {
      sched.Stop(CancelledError("not serving"));
      return fail(g.status().message(), kExitFailure);
    }
    grpc = std::move(*g);
    grpc_text = ", gRPC on " + ho.host + ":" + std::to_string(grpc->port());
  }
  {
    std::lock_guard<std::mutex> lock(OutputLock());
    std::cerr << program << ": serving '" << name << "' on http://" << ho.host << ":"
              << (*http)->port() << grpc_text << " (" << rt.Describe() << ", " << so.num_slots
              << " slots x " << context << " positions, KV "
              << FormatBytes(double(rt.cache_bytes())) << " per rank"
              << (spec_on ? ", speculative " +
                                std::string(engine::SpeculativeMethodName(so.speculative.method)) +
                                " drafting up to " + std::to_string(so.speculative.draft_tokens) +
                                " tokens"
                          : std::string())
              << ")" << std::endl;
    if (p.GetFlag("json")) {
      const std::string base = "http://" + ho.host + ":" + std::to_string((*http)->port());
      nlohmann::json ready = {
          {"event", "ready"},
          {"model", name},
          {"url", base},
          {"endpoints",
           {{"chat_completions", base + "/v1/chat/completions"},
            {"completions", base + "/v1/completions"},
            {"models", base + "/v1/models"},
            {"tokenize", base + "/tokenize"},
            {"health", base + "/health"},
            {"metrics", base + "/metrics"}}},
          {"grpc", grpc ? nlohmann::json(ho.host + ":" + std::to_string(grpc->port()))
                        : nlohmann::json(nullptr)},
          {"slots", so.num_slots},
          {"context", context},
          {"tp", rt.world_size()},
          {"api_key_required", !ho.api_key.empty()}};
      std::cout << ready.dump() << std::endl;
    }
  }

  // Until a stop signal or a fatal error; figures once a second.
  Status failure;
  int64_t next_figures = 0;
  while (!StopRequested()) {
    failure = sched.health();
    if (!failure.ok()) break;
    if (print_figures && NowNs() >= next_figures) {
      PrintFigures(SchedulerFigures(sched.Metrics(), "serving", spec_on, rt.backend().name()));
      next_figures = NowNs() + 1'000'000'000;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  // How long the answers of the requests ended below may take to reach their clients.
  constexpr int64_t kDrainMs = 2000;
  if (failure.ok()) {
    // Requests in flight end now; the followers are told to stop.
    sched.Stop(UnavailableError("the server is shutting down"));
    if (grpc) grpc->Stop();
    (*http)->Stop(kDrainMs);
    Status s = rt.Shutdown();
    if (print_figures)
      PrintFigures(SchedulerFigures(sched.Metrics(), "stopped", spec_on, rt.backend().name()));
    if (!s.ok()) return fail(s.message(), kExitFailure);
    return kExitOk;
  }
  // A peer died: every request in flight fails with the error, the answers
  // reach their clients, then listening stops; and say why, last.
  sched.Stop(failure);
  if (grpc) grpc->Stop();
  (*http)->Stop(kDrainMs);
  if (print_figures)
    PrintFigures(SchedulerFigures(sched.Metrics(), "failed", spec_on, rt.backend().name()));
  return fail(failure.message(), kExitFailure);
}

int RunFollower(engine::TpRuntime& rt, const std::string& program, bool print_figures) {
  Status result;
  std::atomic<bool> done{false};
  std::thread follow([&] {
    result = rt.Follow([] { return StopRequested(); });
    done.store(true);
  });
  engine::RunnerStats prev = rt.stats();
  int64_t prev_ns = NowNs();
  while (!done.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (!print_figures || NowNs() - prev_ns < 1'000'000'000) continue;
    const engine::RunnerStats s = rt.stats();
    const double steps = double(s.steps - prev.steps);
    const int64_t step_ns = s.step_ns - prev.step_ns;
    PrintFigures(
        {{"state", "following"},
         {"backend", std::string(rt.backend().name())},
         {"step_ms", steps > 0 ? step_ns * 1e-6 / steps : 0.0},
         {"allreduce_share",
          step_ns > 0 ? double(s.allreduce_ns - prev.allreduce_ns) / double(step_ns) : 0.0}});
    prev = s;
    prev_ns = NowNs();
  }
  follow.join();
  if (result.ok()) return kExitOk;
  std::lock_guard<std::mutex> lock(OutputLock());
  if (result.code() == StatusCode::kCancelled) {
    std::cerr << program << ": stopped (" << result.message() << ")\n";
    return kExitOk;
  }
  std::cerr << program << ": error: " << result.message() << "\n";
  return kExitFailure;
}
}  // namespace octet::cli
