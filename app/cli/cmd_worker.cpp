// `octet worker`: one rank of a job, as octet-agent (agent/src/job_supervisor)
// and `octet generate/serve --tp N` start it:
//
//   octet worker --job inference --model DIR --world-size N --rank R
//                --rendezvous HOST:PORT --transport shm|tcp|verbs
//                --algo auto|oneshot|ring|nccl [--port P] [--threads T] [extra...]
//
// Inference: every rank loads its tensor-parallel shard and joins the
// collectives rendezvous. Rank 0 owns the tokenizer and the scheduler and
// serves OpenAI HTTP on --port (or, given --prompt-ids/--prompt, runs one
// generation like `octet generate` and exits); the other ranks follow its step
// plans. Each rank prints "@octet-figures {json}" about once a second (state,
// prefill/decode tok/s, step time, all-reduce share, KV use, requests) for the
// agent's telemetry. SIGTERM ends a worker cleanly (rank 0 fails in-flight
// requests, tells the followers to stop and exits 0). When a peer dies, the
// surviving ranks get the collectives' error naming it; rank 0 fails in-flight
// requests with it and exits 1 with "octet worker: error: <why>" as its last
// line. `--job training` ranks are the trainer's: their extra flags are
// `octet train` flags, so they are handed to RunTrainingWorker (cmd_train.cpp)
// before this parser sees them.
#include <iostream>

#include "command.h"
#include "octet/base/args.h"
#include "octet/base/json.h"
#include "octet/base/log.h"
#include "octet/wire/figures_line.h"
#include "tp_launch.h"

namespace octet::cli {
namespace {
constexpr const char* kProgram = "octet worker";
}  // namespace

int RunWorker(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    if ((args[i] == "--job" && i + 1 < args.size() && args[i + 1] == "training") ||
        args[i] == "--job=training")
      return RunTrainingWorker(args);
  }
  ArgParser p(kProgram,
              "One rank of a job (started by octet-agent, or by octet generate/serve --tp N).\n"
              "Inference: rank 0 serves OpenAI HTTP on --port (or runs one generation with\n"
              "--prompt-ids/--prompt); the other ranks follow its step plans.\n"
              "Training (--job training): the extra flags are `octet train` flags.");
  p.Option("job", "inference|training", "what this rank runs")
      .Option("model", "DIR", "model folder (config.json, *.safetensors[, tokenizer.json])")
      .Option("world-size", "N", "ranks in the job (the TP degree)", "1")
      .Option("rank", "R", "this rank, 0..N-1", "0")
      .Option("rendezvous", "HOST:PORT", "rank 0's collectives rendezvous (needed when N > 1)")
      .Option("cpus", "LIST", "pin this rank to these allowed-CPU indices, e.g. 0,1 or 2-3")
      .Flag("no-figures", "do not print @octet-figures lines");
  AddInstanceFlags(p);
  AddServeFlags(p, /*worker=*/true);
  AddGenerateFlags(p);
  if (Status s = p.Parse(args); !s.ok()) {
    std::cerr << s.message() << "\n";
    return kExitUsage;
  }
  if (p.help_requested()) {
    std::cout << p.Usage();
    return kExitOk;
  }
  auto usage = [](const std::string& why) {
    std::cerr << WithProgram(kProgram, why) << " (see " << kProgram << " --help)\n";
    return kExitUsage;
  };
  const std::string job_kind = p.GetString("job");
  if (job_kind != "inference") return usage("--job must be inference or training");
  if (!p.Given("model")) return usage("--model DIR is required");
  auto world = p.GetInt("world-size");
  auto rank = p.GetInt("rank");
  if (!world.ok()) return usage(world.status().message());
  if (!rank.ok()) return usage(rank.status().message());
  if (*world < 1 || *world > 1024) return usage("--world-size must be in 1..1024");
  if (*rank < 0 || *rank >= *world) {
    return usage("--rank " + std::to_string(*rank) + " is outside 0.." +
                 std::to_string(*world - 1));
  }
  if (*world > 1 && !p.Given("rendezvous")) return usage("--rendezvous HOST:PORT is required");
  engine::TpRuntimeOptions o;
  o.world_size = static_cast<int>(*world);
  o.rank = static_cast<int>(*rank);
  o.rendezvous = p.GetString("rendezvous");
  if (Status s = ReadInstanceFlags(p, &o); !s.ok()) return usage(s.message());
  if (p.Given("cpus")) {
    auto cpus = ParseCpuList(p.GetString("cpus"));
    if (!cpus.ok()) return usage(cpus.status().message());
    if (!PinToCpuIndices(*cpus)) {
      OCTET_LOG(WARNING) << "cannot pin to CPUs " << p.GetString("cpus") << "; running unpinned";
    }
  }
  const bool one_shot = p.Given("prompt-ids") || p.Given("prompt");
  if (one_shot && *rank != 0) return usage("--prompt/--prompt-ids are for rank 0");
  InstallStopSignals();
  SetLogTag("rank " + std::to_string(*rank));
  const bool figures = !p.GetFlag("no-figures") && !one_shot;
  if (figures)
    std::cout << wire::FormatFiguresLine(nlohmann::json{{"state", "loading"}}) << std::endl;
  const std::string model = p.GetString("model");

  // What rank 0 needs besides the model is ready before the group forms (the
  // followers' waits are bounded by the peer timeout).
  GenerateJob job;
  std::optional<engine::Tokenizer> tok;
  if (*rank == 0 && one_shot) {
    job = PrepareGenerate(p, model);
    if (job.exit_code != kExitOk) return ReportPrepareError(job, kProgram);
  } else if (*rank == 0) {
    auto t = LoadOptionalTokenizer(model);
    if (!t.ok()) {
      std::cerr << kProgram << ": error: " << t.status().message() << "\n";
      return kExitFailure;
    }
    tok = std::move(*t);
  }
  auto rt = engine::TpRuntime::Create(model, o);
  if (!rt.ok()) {
    std::cerr << kProgram << ": error: " << rt.status().message() << "\n";
    return kExitFailure;
  }
  if (*rank != 0) return RunFollower(**rt, kProgram, figures);
  if (one_shot) {
    const int code = RunGenerateOn(**rt, job, kProgram, o.world_size);
    if (Status s = (*rt)->Shutdown(); !s.ok() && code == kExitOk) {
      std::cerr << kProgram << ": error: " << s.message() << "\n";
      return kExitFailure;
    }
    return code;
  }
  return RunServeOn(**rt, tok, p, kProgram, figures);
}

}  // namespace octet::cli
