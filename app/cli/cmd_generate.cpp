// `octet generate`: load a model folder, prefill a prompt, decode tokens.
// Contract: docs/CLI.md (Engine). The prompt is ids (--prompt-ids), text
// (--prompt, tokenized with the model's tokenizer.json) or, with --chat, one
// user turn rendered with the model's chat template. --tp > 1 waits for
// tensor-parallel serving (issue 6).
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "command.h"
#include "prompt_input.h"
#include "octet/base/args.h"
#include "octet/base/file_util.h"
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
      .Option("prompt", "TEXT", "prompt text, tokenized with the model's tokenizer.json")
      .Option("prompt-ids", "IDS", "prompt as comma-separated token ids, e.g. 1,2,3")
      .Option("max-tokens", "N", "tokens to generate", "16")
      .Option("temperature", "T", "sampling temperature; 0 is greedy", "0")
      .Option("top-k", "K", "sample from the K most likely tokens; 0: all", "0")
      .Option("top-p", "P", "nucleus sampling mass, in (0, 1]", "1")
      .Option("seed", "S", "random seed for sampling", "0")
      .Flag("chat", "apply the model's chat template to --prompt (one user turn)")
      .Option("system", "TEXT", "with --chat: a system message before the user turn")
      .Flag("think", "with --chat on Qwen3: let the model think (default: empty think block)")
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
  if (p.Given("prompt") == p.Given("prompt-ids")) {
    return UsageError("give the prompt with exactly one of --prompt TEXT or --prompt-ids 1,2,3");
  }
  if (p.GetFlag("chat") && !p.Given("prompt")) return UsageError("--chat needs --prompt TEXT");
  std::vector<int32_t> prompt;
  if (p.Given("prompt-ids")) {
    auto ids64 = p.GetIntList("prompt-ids");
    if (!ids64.ok()) return UsageError(ids64.status().message());
    if (ids64->empty()) return UsageError("--prompt-ids is empty");
    for (int64_t id : *ids64) {
      if (id < 0 || id > INT32_MAX)
        return UsageError("token id " + std::to_string(id) + " is out of range");
      prompt.push_back(static_cast<int32_t>(id));
    }
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
  // The tokenizer is loaded before the model (it is quick and its absence is
  // the likelier mistake) whenever text is involved: --prompt in, or text out.
  std::optional<engine::Tokenizer> tok;
  if (p.Given("prompt") || PathExists(JoinPath(p.GetString("model"), "tokenizer.json"))) {
    auto t = LoadModelTokenizer(p.GetString("model"));
    if (!t.ok()) return Failure(t.status().message());
    tok.emplace(std::move(*t));
  }
  if (p.Given("prompt")) {
    if (p.GetFlag("chat")) {
      std::vector<engine::ChatMessage> messages;
      if (p.Given("system")) messages.push_back({"system", p.GetString("system")});
      messages.push_back({"user", p.GetString("prompt")});
      auto ids = EncodeChat(*tok, messages, p.GetFlag("think"));
      if (!ids.ok()) return Failure(ids.status().message());
      prompt = std::move(*ids);
      gen.stop_ids = tok->StopIds();  // the template family's end-of-turn tokens
    } else {
      engine::EncodeOptions eo;
      eo.add_special_tokens = true;  // as the tokenizer's post-processor says (Llama-3: BOS)
      prompt = tok->Encode(p.GetString("prompt"), eo);
    }
    if (prompt.empty()) return UsageError("the prompt encodes to no tokens");
  }
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
  if (Status s = CheckIdsInVocab(prompt, m.config().vocab_size); !s.ok()) {
    return UsageError(s.message());
  }
  // Without --json, tokens are shown as they come: text when there is a
  // tokenizer (partial UTF-8 held back), ids otherwise.
  std::optional<engine::StreamDecoder> stream;
  engine::DecodeOptions text_opts;
  text_opts.skip_special_tokens = true;
  text_opts.skip_unknown_ids = true;  // padded embedding rows the tokenizer lacks
  if (tok) stream.emplace(*tok, text_opts);
  if (!json) {
    gen.on_token = [&](int32_t id) {
      if (stream) {
        auto piece = stream->Push(id);
        if (piece.ok()) std::cout << *piece << std::flush;
      } else {
        std::cout << id << " " << std::flush;
      }
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
    if (tok) {
      auto text = tok->Decode(r->ids, text_opts);
      if (!text.ok()) return Failure(text.status().message());
      j["text"] = *text;
    } else {
      j["text"] = nullptr;  // the model folder has no tokenizer.json
    }
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
    if (stream) std::cout << stream->Finish();
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
