// `octet serve`: an OpenAI-compatible HTTP server (and the gRPC
// InferenceService) for a model folder, on one rank or tensor-parallel over
// --tp N local ranks (this process is rank 0; ranks 1..N-1 are `octet worker`
// processes on a loopback rendezvous, each pinned to CPUs of its own when they
// fit). Continuous batching over a KV cache of --slots sequences of --context
// positions, with speculative decoding per sequence (--speculative ngram
// --draft-tokens K). Loading shows progress (a line on a terminal; with --json
// one JSON line per tensor before the ready line). Stops on SIGINT/SIGTERM (requests in flight end
// with an error). Contract: shared/docs/CLI.md; routes and errors: octet/engine/openai_server.h.
#include <unistd.h>

#include <iostream>

#include "command.h"
#include "load_progress.h"
#include "octet/base/api_key.h"
#include "octet/base/args.h"
#include "octet/base/log.h"
#include "tp_launch.h"

namespace octet::cli {
namespace {
constexpr const char* kProgram = "octet serve";

int UsageError(const std::string& why) {
  std::cerr << WithProgram(kProgram, why) << " (see " << kProgram << " --help)\n";
  return kExitUsage;
}
}  // namespace

int RunServe(const std::vector<std::string>& args) {
  ArgParser p(kProgram,
              "Serve a model folder over OpenAI-compatible HTTP (/v1/models, /v1/chat/completions\n"
              "with SSE streaming, /v1/completions, /tokenize, /health, /metrics) and gRPC.");
  p.Option("model", "DIR", "model folder (config.json, *.safetensors[, tokenizer.json])")
      .Option("tp", "N", "tensor-parallel ranks (this process is rank 0)", "1")
      .Option("bind", "core|none", "pin each rank to CPUs of its own when they fit", "core")
      .Flag("figures", "print @octet-figures lines once a second (as workers do)");
  AddInstanceFlags(p);
  AddServeFlags(p, /*worker=*/false);
  if (Status s = p.Parse(args); !s.ok()) {
    std::cerr << s.message() << "\n";
    return kExitUsage;
  }
  if (p.help_requested()) {
    std::cout << p.Usage();
    return kExitOk;
  }
  if (!p.Given("model")) return UsageError("--model DIR is required");
  // Malformed values are usage errors before anything loads (RunServeOn
  // checks their ranges again).
  for (const char* name : {"port", "slots", "max-batch-tokens", "max-queue", "context"}) {
    if (p.Given(name)) {
      if (auto v = p.GetInt(name); !v.ok()) {
        std::cerr << v.status().message() << " (see " << kProgram << " --help)\n";
        return kExitUsage;
      }
    }
  }
  if (auto port = p.GetInt("port"); port.ok() && (*port < 0 || *port > 65535)) {
    return UsageError("--port must be in 0..65535");
  }
  if (auto kv = p.GetBytes("kv-memory"); !kv.ok()) return UsageError(kv.status().message());
  // Checked again where the server starts; here so that it fails before the model loads.
  if (auto key = LoadApiKey(p.GetString("api-key"), p.GetString("api-key-file")); !key.ok()) {
    return UsageError(key.status().message());
  }
  if (p.GetFlag("api-key-health") && !p.Given("api-key") && !p.Given("api-key-file")) {
    return UsageError("--api-key-health needs --api-key or --api-key-file");
  }
  engine::TpRuntimeOptions o;
  auto tp_flags = ReadLocalTpFlags(p, &o);
  if (!tp_flags.ok()) return UsageError(tp_flags.status().message());
  const int tp = tp_flags->tp;
  // Checked again where the scheduler is made; here so that a bad value is
  // refused before the model loads.
  if (auto spec = ReadSpeculativeFlags(p); !spec.ok()) return UsageError(spec.status().message());
  const std::string model = p.GetString("model");
  auto tok = LoadOptionalTokenizer(model);
  if (!tok.ok()) {
    std::cerr << kProgram << ": error: " << tok.status().message() << "\n";
    return kExitFailure;
  }

  InstallStopSignals();
  std::vector<std::unique_ptr<Subprocess>> followers;
  if (tp > 1) {
    LocalTpPlan plan;
    auto spawned = StartLocalFollowers(*tp_flags, model, &o, &plan);
    if (!spawned.ok()) {
      std::cerr << kProgram << ": error: " << spawned.status().message() << "\n";
      return kExitFailure;
    }
    followers = std::move(*spawned);
    std::cerr << kProgram << ": TP " << tp << ": " << plan.Describe() << "\n";
    if (plan.pin) PinToCpuIndices(plan.cpus[0]);
    SetLogTag("rank 0");
  }
  // Loading a large checkpoint takes minutes: show it (load_progress.h).
  LoadProgressReporter load_progress(p.GetFlag("json"), isatty(STDERR_FILENO) != 0);
  o.load.progress = load_progress.Callback();
  auto rt = engine::TpRuntime::Create(model, o);
  if (!rt.ok()) {
    ReapFollowers(followers, 2000);
    if (StopRequested()) {
      std::cerr << kProgram << ": stopped by a signal while loading the model\n";
      return StopExitCode();
    }
    std::cerr << kProgram << ": error: " << rt.status().message() << "\n";
    return kExitFailure;
  }
  const int code = RunServeOn(**rt, *tok, p, kProgram, p.GetFlag("figures"));
  rt->reset();
  ReapFollowers(followers, 5000);
  return code;
}

}  // namespace octet::cli
