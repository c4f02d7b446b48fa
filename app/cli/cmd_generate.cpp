// `octet generate`: load a model folder, prefill a prompt, decode tokens.
// Contract: shared/docs/CLI.md (Engine). The prompt is ids (--prompt-ids), text
// (--prompt, tokenized with the model's tokenizer.json) or, with --chat, one
// user turn rendered with the model's chat template. With --tp N the model is
// split across N ranks: this process is rank 0 and ranks 1..N-1 run as
// `octet worker` processes on a loopback rendezvous, each pinned to CPUs of
// its own when they fit (--bind core; --threads is per rank).
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "command.h"
#include "generation_settings.h"
#include "load_progress.h"
#include "octet/base/args.h"
#include "octet/base/log.h"
#include "tp_launch.h"

namespace octet::cli {
namespace {

constexpr const char* kProgram = "octet generate";

int UsageError(const std::string& why) {
  std::cerr << WithProgram(kProgram, why) << " (see " << kProgram << " --help)\n";
  return kExitUsage;
}

}  // namespace

int RunGenerate(const std::vector<std::string>& args) {
  ArgParser p(
      kProgram,
      "Generate tokens from a Hugging Face model folder (Llama-3, Qwen2, Qwen3; F32, BF16,\n"
      "F16 or ModelOpt NVFP4 weights) on the CPU, on one rank or tensor-parallel over --tp N.");
  p.Option("model", "DIR", "model folder (config.json, *.safetensors)")
      .Option("tp", "N", "tensor-parallel ranks (this process is rank 0)", "1")
      .Option("bind", "core|none", "pin each rank to CPUs of its own when they fit", "core");
  AddGenerateFlags(p);
  AddInstanceFlags(p);
  if (Status s = p.Parse(args); !s.ok()) {
    std::cerr << s.message() << "\n";  // already names the program and the flag
    return kExitUsage;
  }
  if (p.help_requested() && !p.Given("model")) {
    std::cout
        << p.Usage()
        << "\nWith --model DIR, --help (and --show-defaults) also list the sampling settings\n"
           "and where each comes from (flag, the model's generation_config.json, built-in).\n";
    return kExitOk;
  }
  if (!p.Given("model")) return UsageError("--model DIR is required");
  if (p.help_requested() || p.GetFlag("show-defaults")) {
    if (p.help_requested()) std::cout << p.Usage() << "\n";
    return ShowGenerationSettings(p, p.GetString("model"), kProgram);
  }
  engine::TpRuntimeOptions o;
  auto tp_flags = ReadLocalTpFlags(p, &o);
  if (!tp_flags.ok()) return UsageError(tp_flags.status().message());
  const int tp = tp_flags->tp;
  const std::string model = p.GetString("model");

  GenerateJob job = PrepareGenerate(p, model);
  if (job.exit_code != kExitOk) return ReportPrepareError(job, kProgram);

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
    if (!job.json) std::cerr << kProgram << ": TP " << tp << ": " << plan.Describe() << "\n";
    if (plan.pin) PinToCpuIndices(plan.cpus[0]);
    SetLogTag("rank 0");
  }
  LoadProgressReporter load_progress(/*json=*/false, isatty(STDERR_FILENO) && tp == 1);
  o.load.progress = load_progress.Callback();
  auto rt = engine::TpRuntime::Create(model, o);
  if (!rt.ok()) {
    const Status& s = rt.status();
    ReapFollowers(followers, 2000);
    if (StopRequested()) {
      std::cerr << kProgram << ": stopped by a signal while loading the model\n";
      return StopExitCode();
    }
    if (s.code() == StatusCode::kInvalidArgument &&
        s.message().find("kernel backend") != std::string::npos) {
      return UsageError(s.message());
    }
    std::cerr << kProgram << ": error: " << s.message() << "\n";
    return kExitFailure;
  }
  int code = RunGenerateOn(**rt, job, kProgram, o.world_size);
  if (tp > 1) {
    if (Status s = (*rt)->Shutdown(); !s.ok() && code == kExitOk) {
      std::cerr << kProgram << ": error: " << s.message() << "\n";
      code = kExitFailure;
    }
    rt->reset();
    ReapFollowers(followers, 5000);
  }
  return code;
}

}  // namespace octet::cli
