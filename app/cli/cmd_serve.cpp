// `octet serve`: an OpenAI-compatible HTTP server (and the gRPC
// InferenceService) for a model folder, on one rank or tensor-parallel over
// --tp N local ranks (this process is rank 0; ranks 1..N-1 are `octet worker`
// processes on a loopback rendezvous, each pinned to CPUs of its own when they
// fit). Continuous batching over a KV cache of --slots sequences of --context
// positions. Stops on SIGINT/SIGTERM (requests in flight end with an error).
// Contract: docs/CLI.md; routes and errors: octet/engine/openai_server.h.
#include <iostream>

#include "command.h"
#include "octet/base/args.h"
#include "octet/base/log.h"
#include "tp_launch.h"

namespace octet::cli {
namespace {
constexpr const char* kProgram = "octet serve";

int UsageError(const std::string& why) {
  std::cerr << kProgram << ": " << why << " (see " << kProgram << " --help)\n";
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
  auto tp = p.GetInt("tp");
  if (!tp.ok()) return UsageError(tp.status().message());
  if (*tp < 1 || *tp > 64) return UsageError("--tp must be in 1..64");
  const std::string bind = p.GetString("bind");
  if (bind != "core" && bind != "none") return UsageError("--bind must be core or none");
  const std::string transport = p.GetString("transport");
  if (transport != "shm" && transport != "tcp") return UsageError("--transport must be shm or tcp");
  const std::string algo = p.GetString("algo");
  if (algo != "auto" && algo != "oneshot" && algo != "ring") {
    return UsageError("--algo must be auto, oneshot or ring");
  }
  engine::TpRuntimeOptions o;
  o.world_size = static_cast<int>(*tp);
  o.rank = 0;
  if (Status s = ReadInstanceFlags(p, &o); !s.ok()) return UsageError(s.message());
  const std::string model = p.GetString("model");
  auto tok = LoadOptionalTokenizer(model);
  if (!tok.ok()) {
    std::cerr << kProgram << ": error: " << tok.status().message() << "\n";
    return kExitFailure;
  }

  InstallStopSignals();
  std::vector<std::unique_ptr<Subprocess>> followers;
  if (*tp > 1) {
    const LocalTpPlan plan = PlanLocalTp(o.world_size, o.load.threads, bind);
    o.load.threads = plan.threads_per_rank;
    const int port = FreeLoopbackPort();
    if (port < 0) {
      std::cerr << kProgram << ": no free TCP port on 127.0.0.1 for the rendezvous\n";
      return kExitFailure;
    }
    o.rendezvous = "127.0.0.1:" + std::to_string(port);
    FollowerSpawn fs;
    fs.model = model;
    fs.rendezvous = o.rendezvous;
    fs.transport = transport;
    fs.algo = algo;
    fs.peer_timeout_ms = o.comm.peer_timeout_ms;
    fs.backend = o.load.backend;
    auto spawned = SpawnFollowers(fs, plan);
    if (!spawned.ok()) {
      std::cerr << kProgram << ": error: " << spawned.status().message() << "\n";
      return kExitFailure;
    }
    followers = std::move(*spawned);
    std::cerr << kProgram << ": TP " << *tp << ": " << plan.Describe() << "\n";
    if (plan.pin) PinToCpuIndices(plan.cpus[0]);
    SetLogTag("rank 0");
  }
  auto rt = engine::TpRuntime::Create(model, o);
  if (!rt.ok()) {
    ReapFollowers(followers, 2000);
    std::cerr << kProgram << ": error: " << rt.status().message() << "\n";
    return kExitFailure;
  }
  const int code = RunServeOn(**rt, *tok, p, kProgram, p.GetFlag("figures"));
  rt->reset();
  ReapFollowers(followers, 5000);
  return code;
}

}  // namespace octet::cli
