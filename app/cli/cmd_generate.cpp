// `octet generate`: load a model folder, prefill a prompt, decode tokens.
// Contract: ../shared/docs/CLI.md (Engine). Until the tokenizer lands (issue 4)
// the prompt is given as ids (--prompt-ids); --prompt and --chat say so and
// exit 3. --tp > 1 waits for tensor-parallel serving (issue 6).
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "command.h"
#include "octet/base/args.h"
#include "octet/base/npy.h"
#include "octet/engine/generate.h"
#include "octet/engine/model.h"

namespace octet::cli {
namespace {

constexpr const char* kProgram = "octet generate";

int UsageError(const std::string& why) {
  std::cerr << kProgram << ": " << why << " (see " << kProgram << " --help)\n";
  return kExitUsage;
}

int Failure(const std::string& why) {
  std::cerr << kProgram << ": " << why << "\n";
  return kExitFailure;
}

// A one-line progress bar on stderr, redrawn in place.
void DrawProgress(const engine::LoadProgress& p) {
  const int width = 30;
  const double frac = p.bytes_total > 0 ? double(p.bytes_done) / double(p.bytes_total) : 1.0;
  const int filled = static_cast<int>(frac * width);
  std::fprintf(stderr, "\rloading [%s%s] %3d%%  %lld/%lld tensors",
               std::string(filled, '#').c_str(), std::string(width - filled, ' ').c_str(),
               static_cast<int>(frac * 100), static_cast<long long>(p.tensors_done),
               static_cast<long long>(p.tensors_total));
  if (p.tensors_done == p.tensors_total) std::fprintf(stderr, "\n");
  std::fflush(stderr);
}

}  // namespace

int RunGenerate(const std::vector<std::string>& args) {
  ArgParser p(
      kProgram,
      "Generate tokens from a Hugging Face model folder (Llama-3, Qwen2, Qwen3; F32, BF16,\n"
      "F16 or ModelOpt NVFP4 weights) on the CPU.");
  p.Option("model", "DIR", "model folder (config.json, *.safetensors)")
      .Option("prompt", "TEXT", "prompt text (needs the tokenizer, issue 4)")
      .Option("prompt-ids", "IDS", "prompt as comma-separated token ids, e.g. 1,2,3")
      .Option("max-tokens", "N", "tokens to generate", "16")
      .Option("temperature", "T", "sampling temperature; 0 is greedy", "0")
      .Option("top-k", "K", "sample from the K most likely tokens; 0: all", "0")
      .Option("top-p", "P", "nucleus sampling mass, in (0, 1]", "1")
      .Option("seed", "S", "random seed for sampling", "0")
      .Flag("chat", "apply the model's chat template (needs the tokenizer, issue 4)")
      .Option("tp", "N", "tensor-parallel ranks", "1")
      .Option("transport", "shm|tcp", "collectives transport for --tp > 1", "shm")
      .Option("algo", "auto|oneshot|ring", "all-reduce algorithm for --tp > 1", "auto")
      .Option("threads", "N", "CPU threads; 0: all cores", "0")
      .Option("backend", "NAME", "kernel backend: auto, avx2, neon, scalar", "auto")
      .Flag("ignore-eos", "do not stop at end-of-sequence ids")
      .Option("logits-out", "FILE.npy",
              "write float32 logits [T, V] of prompt + generated[:-1] (row t predicts t+1)")
      .Flag("json", "print one JSON document on stdout");
  if (Status s = p.Parse(args); !s.ok()) {
    std::cerr << s.message() << "\n";  // already names the program and the flag
    return kExitUsage;
  }
  if (p.help_requested()) {
    std::cout << p.Usage();
    return kExitOk;
  }
  if (!p.Given("model")) return UsageError("--model DIR is required");
  if (p.Given("prompt") || p.GetFlag("chat")) {
    std::cerr << kProgram
              << ": --prompt and --chat need the tokenizer and chat templates, which "
                 "are not in this build yet (issue 4); give token ids with --prompt-ids\n";
    return kExitUnavailable;
  }
  if (!p.Given("prompt-ids")) return UsageError("give the prompt with --prompt-ids 1,2,3");
  auto ids64 = p.GetIntList("prompt-ids");
  if (!ids64.ok()) return UsageError(ids64.status().message());
  if (ids64->empty()) return UsageError("--prompt-ids is empty");
  std::vector<int32_t> prompt;
  for (int64_t id : *ids64) {
    if (id < 0 || id > INT32_MAX)
      return UsageError("token id " + std::to_string(id) + " is out of range");
    prompt.push_back(static_cast<int32_t>(id));
  }
  auto max_tokens = p.GetInt("max-tokens");
  auto temperature = p.GetDouble("temperature");
  auto top_k = p.GetInt("top-k");
  auto top_p = p.GetDouble("top-p");
  auto seed = p.GetInt("seed");
  auto tp = p.GetInt("tp");
  auto threads = p.GetInt("threads");
  for (const Status& s : {max_tokens.status(), temperature.status(), top_k.status(), top_p.status(),
                          seed.status(), tp.status(), threads.status()}) {
    if (!s.ok()) return UsageError(s.message());
  }
  if (*max_tokens < 1) return UsageError("--max-tokens must be at least 1");
  if (*tp < 1) return UsageError("--tp must be at least 1");
  if (*threads < 0) return UsageError("--threads must be >= 0");
  const std::string transport = p.GetString("transport"), algo = p.GetString("algo");
  if (transport != "shm" && transport != "tcp") return UsageError("--transport must be shm or tcp");
  if (algo != "auto" && algo != "oneshot" && algo != "ring") {
    return UsageError("--algo must be auto, oneshot or ring");
  }
  if (*tp > 1) {
    std::cerr << kProgram << ": --tp " << *tp
              << " needs tensor-parallel serving, which is not in this build yet (issue 6)\n";
    return kExitUnavailable;
  }
  engine::GenerateOptions gen;
  gen.max_tokens = *max_tokens;
  gen.sampling.temperature = static_cast<float>(*temperature);
  gen.sampling.top_k = *top_k;
  gen.sampling.top_p = static_cast<float>(*top_p);
  gen.sampling.seed = static_cast<uint64_t>(*seed);
  gen.stop_at_eos = !p.GetFlag("ignore-eos");
  gen.collect_logits = p.Given("logits-out");
  if (Status s = engine::ValidateSampling(gen.sampling); !s.ok()) return UsageError(s.message());

  const bool json = p.GetFlag("json");
  engine::LoadOptions lo;
  lo.backend = p.GetString("backend");
  lo.threads = static_cast<int>(*threads);
  if (isatty(STDERR_FILENO)) lo.progress = DrawProgress;
  auto model = engine::Model::Load(p.GetString("model"), lo);
  if (!model.ok()) {
    if (model.status().code() == StatusCode::kInvalidArgument &&
        model.status().message().find("kernel backend") != std::string::npos) {
      return UsageError(model.status().message());
    }
    return Failure(model.status().message());
  }
  engine::Model& m = **model;
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] >= m.config().vocab_size) {
      return UsageError("token id " + std::to_string(prompt[i]) + " at position " +
                        std::to_string(i) + " is out of range (vocab size " +
                        std::to_string(m.config().vocab_size) + ")");
    }
  }
  if (!json) {
    gen.on_token = [](int32_t id) {
      std::cout << id << " " << std::flush;
      return true;
    };
  }
  auto r = engine::Generate(m, prompt, gen);
  if (!r.ok()) return Failure(r.status().message());
  if (gen.collect_logits) {
    Status s = WriteNpyF32(p.GetString("logits-out"), {r->logits_rows, r->vocab}, r->logits.data());
    if (!s.ok()) return Failure(s.message());
  }
  if (json) {
    nlohmann::json j;
    j["ids"] = r->ids;
    j["text"] = nullptr;  // no tokenizer in this build (issue 4)
    j["prompt_tokens"] = r->prompt_tokens;
    j["prefill_tps"] = r->prefill_tps();
    j["decode_tps"] = r->decode_tps();
    j["ttft_ms"] = r->ttft_ms();
    j["tp"] = *tp;
    j["stop_reason"] = r->stop_reason;
    j["backend"] = std::string(m.backend().name());
    j["threads"] = m.backend().num_threads();
    j["weights"] = m.WeightFormatSummary();
    j["architecture"] = m.config().architecture_name;
    std::cout << j.dump() << "\n";
  } else {
    std::cout << "\n";
    std::fprintf(stderr,
                 "%lld prompt tokens, %zu generated (%s); prefill %.1f tok/s, decode %.2f tok/s, "
                 "ttft %.1f ms; %s on %s x%d\n",
                 static_cast<long long>(r->prompt_tokens), r->ids.size(), r->stop_reason.c_str(),
                 r->prefill_tps(), r->decode_tps(), r->ttft_ms(), m.WeightFormatSummary().c_str(),
                 std::string(m.backend().name()).c_str(), m.backend().num_threads());
  }
  return kExitOk;
}

}  // namespace octet::cli
