// `octet chat`: an interactive terminal conversation with a model folder.
// Each line read from stdin is a user turn; the reply streams as it is
// generated (partial UTF-8 held back). These lines are commands: /reset
// forgets the conversation, /system TEXT sets the system message, /help lists
// them, /exit or /quit (or end of input) quits; any other line is a message. Each turn renders the
// whole conversation with the model's chat template and prefills it again (simple and exact; the
// serving scheduler of `octet serve` is the place for prefix reuse).
//
// --json (for scripts; stdin lines are still the user turns): nothing streams;
// each turn prints one JSON object on its own stdout line,
//   {"turn": 0, "role": "assistant", "content": "...", "ids": [...],
//    "prompt_tokens": n, "generated_tokens": n, "finish_reason": "eos"|"length",
//    "ttft_ms": x, "decode_tps": y}
// or {"turn": 0, "error": "..."} when the turn failed; /reset and /system print
// {"event": "reset"} and {"event": "system", "content": "..."}.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "command.h"
#include "generation_settings.h"
#include "octet/base/args.h"
#include "octet/base/json.h"
#include "octet/engine/generate.h"
#include "octet/engine/model.h"
#include "prompt_input.h"
#include "tp_launch.h"

namespace octet::cli {
namespace {
constexpr const char* kProgram = "octet chat";
}  // namespace

int RunChat(const std::vector<std::string>& args) {
  ArgParser p(kProgram,
              "Chat with a model folder in the terminal. Type a message and press Enter;\n"
              "/reset forgets the conversation, /system TEXT sets the system message, /help lists\n"
              "the commands, /exit quits.");
  p.Option("model", "DIR", "model folder (config.json, *.safetensors, tokenizer.json)")
      .Option("system", "TEXT", "system message")
      .Option("max-tokens", "N", "longest reply in tokens", "512")
      .Option("temperature", "T", "sampling temperature; 0 is greedy", "0.7")
      .Option("top-k", "K", "sample from the K most likely tokens; 0: all", "0")
      .Option("top-p", "P", "nucleus sampling mass, in (0, 1]", "0.9")
      .Option("seed", "S", "random seed", "0")
      .Option("threads", "N", "CPU threads; 0: all cores", "0")
      .Option("backend", "NAME",
              "kernel backend: auto, cuda, avx512-amx, avx512-rows, avx512, avx2, neon, scalar",
              "auto")
      .Option("nvfp4-tiles", "on|off", kNvfp4TilesHelp, "on")
      .Option("quantize", "nvfp4|off", kQuantizeHelp, "off")
      .Flag("think", "Qwen3: let the model think (default: empty think block)")
      .Flag("ignore-memory-check", "load even when the weights exceed MemAvailable")
      .Flag("json", "one JSON object per turn on stdout (no streaming; see the file's header)");
  AddGenerationDefaultFlags(p);
  AddSpeculativeFlags(p);
  if (Status s = p.Parse(args); !s.ok()) {
    std::cerr << s.message() << "\n";
    return kExitUsage;
  }
  if (p.help_requested()) {
    std::cout << p.Usage();
    return kExitOk;
  }
  if (!p.Given("model")) {
    std::cerr << kProgram << ": --model DIR is required (see --help)\n";
    return kExitUsage;
  }
  if (p.GetFlag("show-defaults")) return ShowGenerationSettings(p, p.GetString("model"), kProgram);
  engine::GenerateOptions gen;
  auto seed = p.GetInt("seed");
  auto threads = p.GetInt("threads");
  for (const Status& s : {seed.status(), threads.status()}) {
    if (!s.ok()) {
      std::cerr << s.message() << "\n";
      return kExitUsage;
    }
  }
  // Flags, then generation_config.json, then the built-in defaults.
  auto defaults = engine::ReadGenerationDefaults(p.GetString("model"));
  if (!defaults.ok()) {
    std::cerr << kProgram << ": error: " << defaults.status().message() << "\n";
    return kExitFailure;
  }
  auto settings = ResolveGenerationSettings(p, *defaults, &gen.sampling, &gen.max_tokens);
  if (!settings.ok()) {
    std::cerr << WithProgram(kProgram, settings.status().message()) << "\n";
    return kExitUsage;
  }
  if (gen.max_tokens < 1) {
    std::cerr << kProgram << ": --max-tokens must be at least 1\n";
    return kExitUsage;
  }
  auto speculative = ReadSpeculativeFlags(p);
  if (!speculative.ok()) {
    std::cerr << WithProgram(kProgram, speculative.status().message()) << " (see --help)\n";
    return kExitUsage;
  }
  gen.speculative = *speculative;
  gen.sampling.seed = static_cast<uint64_t>(*seed);
  if (Status s = engine::ValidateSampling(gen.sampling); !s.ok()) {
    std::cerr << kProgram << ": " << s.message() << "\n";
    return kExitUsage;
  }

  const std::string dir = p.GetString("model");
  auto tok = LoadModelTokenizer(dir);
  if (!tok.ok()) {
    std::cerr << WithProgram(kProgram, tok.status().message()) << "\n";
    return kExitFailure;
  }
  engine::LoadOptions lo;
  lo.backend = p.GetString("backend");
  lo.threads = static_cast<int>(*threads);
  auto tiles = ParseNvfp4Tiles(p.GetString("nvfp4-tiles"));
  if (!tiles.ok()) {
    std::cerr << WithProgram(kProgram, tiles.status().message()) << "\n";
    return kExitUsage;
  }
  lo.nvfp4_tiles = *tiles;
  lo.check_memory = !p.GetFlag("ignore-memory-check");
  auto quantize = engine::ParseLoadQuantize(p.GetString("quantize"));
  if (!quantize.ok()) {
    std::cerr << WithProgram(kProgram, quantize.status().message()) << "\n";
    return kExitUsage;
  }
  lo.quantize = *quantize;
  lo.load_mtp = speculative->method == engine::SpeculativeMethod::kMtp;
  auto model = engine::Model::Load(dir, lo);
  if (!model.ok()) {
    std::cerr << WithProgram(kProgram, model.status().message()) << "\n";
    return kExitFailure;
  }
  engine::Model& m = **model;
  {
    // A method that cannot run (mtp, for now) is refused before the first turn.
    engine::LocalRunner probe(m);
    if (auto d = engine::MakeDrafter(gen.speculative, probe); !d.ok()) {
      std::cerr << WithProgram(kProgram, d.status().message()) << "\n";
      return kExitFailure;
    }
  }
  gen.stop_ids = tok->StopIds();
  gen.stop_at_eos = true;

  const bool interactive = isatty(STDIN_FILENO);
  const bool json_mode = p.GetFlag("json");
  auto print_json = [](const nlohmann::json& j) {
    std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << std::endl;
  };
  std::vector<engine::ChatMessage> history;
  std::string system = p.GetString("system");
  if (interactive) {
    std::cerr << "octet chat: " << m.config().architecture_name << ", " << m.WeightFormatSummary()
              << ". /help for the commands, /exit to quit.\n";
  }
  engine::DecodeOptions text_opts;
  text_opts.skip_special_tokens = true;
  text_opts.skip_unknown_ids = true;  // padded embedding rows the tokenizer lacks
  std::string line;
  uint64_t turn = 0;
  // --draft-length auto: each turn starts from the step times, acceptance
  // rates and drafting times of the turns before it.
  engine::StepCosts step_costs, draft_costs;
  engine::DraftLengthPolicy draft_length;
  gen.step_costs = &step_costs;
  gen.draft_length = &draft_length;
  gen.draft_costs = &draft_costs;
  for (;;) {
    if (interactive) std::cerr << "> " << std::flush;
    if (!std::getline(std::cin, line)) break;
    if (line.empty()) continue;
    if (line == "/exit" || line == "/quit") break;
    if (line == "/help") {
      std::cerr << "/reset        forget the conversation\n"
                   "/system TEXT  set the system message (/system alone clears it)\n"
                   "/exit, /quit  leave (so does end of input)\n"
                   "anything else is your next message\n";
      continue;
    }
    if (line == "/reset") {
      history.clear();
      std::cerr << "(conversation cleared)\n";
      if (json_mode) print_json({{"event", "reset"}});
      continue;
    }
    if (line.rfind("/system", 0) == 0) {
      system = line.size() > 8 ? line.substr(8) : "";
      std::cerr << "(system message " << (system.empty() ? "cleared" : "set") << ")\n";
      if (json_mode) print_json({{"event", "system"}, {"content", system}});
      continue;
    }
    history.push_back({"user", line});
    std::vector<engine::ChatMessage> messages;
    if (!system.empty()) messages.push_back({"system", system});
    messages.insert(messages.end(), history.begin(), history.end());
    auto prompt = EncodeChat(*tok, messages, p.GetFlag("think"));
    if (!prompt.ok()) {
      std::cerr << WithProgram(kProgram, prompt.status().message()) << "\n";
      if (json_mode) print_json({{"turn", turn++}, {"error", prompt.status().message()}});
      history.pop_back();
      continue;
    }
    if (Status s = CheckIdsInVocab(*prompt, m.config().vocab_size); !s.ok()) {
      std::cerr << kProgram << ": " << s.message() << "\n";
      return kExitFailure;
    }
    engine::StreamDecoder stream(*tok, text_opts);
    std::string reply;
    const uint64_t this_turn = turn++;
    gen.sampling.seed = static_cast<uint64_t>(*seed) + this_turn;
    gen.on_token = [&](int32_t id) {
      auto piece = stream.Push(id);
      if (piece.ok()) {
        reply += *piece;
        if (!json_mode) std::cout << *piece << std::flush;
      }
      return true;
    };
    auto r = engine::Generate(m, *prompt, gen);
    const std::string tail = stream.Finish();
    reply += tail;
    if (!json_mode) std::cout << tail << "\n" << std::flush;
    if (!r.ok()) {
      std::cerr << WithProgram(kProgram, r.status().message()) << "\n";
      if (json_mode) print_json({{"turn", this_turn}, {"error", r.status().message()}});
      history.pop_back();
      continue;
    }
    history.push_back({"assistant", reply});
    if (json_mode) {
      print_json({{"turn", this_turn},
                  {"role", "assistant"},
                  {"content", reply},
                  {"ids", r->ids},
                  {"prompt_tokens", r->prompt_tokens},
                  {"generated_tokens", r->ids.size()},
                  {"finish_reason", r->stop_reason},
                  {"ttft_ms", r->ttft_ms()},
                  {"decode_tps", r->decode_tps()}});
    }
    std::string spec;
    if (gen.speculative.method != engine::SpeculativeMethod::kOff) {
      char buf[96];
      std::snprintf(buf, sizeof buf, "; %lld of %lld drafts accepted (%.0f%%)",
                    static_cast<long long>(r->accepted_tokens),
                    static_cast<long long>(r->drafted_tokens), r->acceptance_rate() * 100);
      spec = buf;
    }
    std::fprintf(stderr, "[%lld prompt tokens, %zu generated; ttft %.0f ms, decode %.1f tok/s%s]\n",
                 static_cast<long long>(r->prompt_tokens), r->ids.size(), r->ttft_ms(),
                 r->decode_tps(), spec.c_str());
  }
  return kExitOk;
}

}  // namespace octet::cli
