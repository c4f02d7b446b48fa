// Running one model instance from the command line; see tp_launch.h.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <mutex>
#include <optional>

#include "command.h"
#include "generation_settings.h"
#include "octet/base/file_util.h"
#include "octet/base/json.h"
#include "octet/base/log.h"
#include "octet/base/npy.h"
#include "octet/collectives/local_rendezvous.h"
#include "octet/engine/generate.h"
#include "octet/engine/model_config.h"
#include "octet/engine/tensor_parallel.h"
#include "octet/wire/figures_line.h"
#include "prompt_input.h"
#include "tp_launch.h"

namespace octet::cli {

// ---- signals ------------------------------------------------------------------------

namespace {
std::atomic<bool> g_stop{false};
std::atomic<int> g_stop_signal{0};
void OnStopSignal(int sig) {
  g_stop_signal.store(sig);
  g_stop.store(true);
}
}  // namespace

std::mutex& OutputLock() {
  static std::mutex mu;
  return mu;
}

void PrintFigures(const nlohmann::json& j) {
  std::lock_guard<std::mutex> lock(OutputLock());
  std::printf("%s\n", wire::FormatFiguresLine(j).c_str());
  std::fflush(stdout);
}

void InstallStopSignals() {
  struct sigaction sa {};
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
}
bool StopRequested() { return g_stop.load(); }
int StopExitCode() { return 128 + (g_stop_signal.load() ? g_stop_signal.load() : SIGTERM); }

// ---- CPUs and ports -----------------------------------------------------------------

Result<std::vector<int>> ParseCpuList(const std::string& text) {
  std::vector<int> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = text.find(',', pos);
    const std::string part =
        text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    const size_t dash = part.find('-');
    try {
      if (dash == std::string::npos) {
        out.push_back(std::stoi(part));
      } else {
        const int a = std::stoi(part.substr(0, dash)), b = std::stoi(part.substr(dash + 1));
        if (b < a) throw std::invalid_argument("range");
        for (int c = a; c <= b; ++c) out.push_back(c);
      }
    } catch (const std::exception&) {
      return InvalidArgumentError("'" + text + "' is not a CPU list like 0,1 or 2-3");
    }
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

std::string LocalTpPlan::Describe() const {
  std::string s = std::to_string(tp) + (tp == 1 ? " rank x " : " ranks x ") +
                  std::to_string(threads_per_rank) +
                  (threads_per_rank == 1 ? " thread" : " threads");
  if (!pin) return s + ", not pinned";
  const std::vector<int> all = AllowedCpus();
  s += ", pinned to CPUs ";
  for (size_t r = 0; r < cpus.size(); ++r) {
    if (r) s += " | ";
    for (size_t i = 0; i < cpus[r].size(); ++i) {
      const int c = cpus[r][i];
      s += (i ? "," : "") + std::to_string(c < static_cast<int>(all.size()) ? all[c] : c);
    }
  }
  return s;
}

LocalTpPlan PlanLocalTp(int tp, int threads, const std::string& bind) {
  LocalTpPlan p;
  p.tp = std::max(1, tp);
  const int ncpu = std::max<int>(1, static_cast<int>(AllowedCpus().size()));
  p.threads_per_rank = threads > 0 ? threads : std::max(1, ncpu / p.tp);
  // Like mpirun --bind-to core: each rank on CPUs of its own, when they fit.
  p.pin = bind == "core" && p.tp > 1 && p.tp * p.threads_per_rank <= ncpu;
  if (p.pin) {
    for (int r = 0; r < p.tp; ++r) {
      std::vector<int> c;
      for (int t = 0; t < p.threads_per_rank; ++t) c.push_back(r * p.threads_per_rank + t);
      p.cpus.push_back(c);
    }
  }
  return p;
}

Result<std::vector<std::unique_ptr<Subprocess>>> SpawnFollowers(const FollowerSpawn& s,
                                                                const LocalTpPlan& plan) {
  OCTET_ASSIGN_OR_RETURN(std::string exe, SelfExecutablePath());
  std::vector<std::unique_ptr<Subprocess>> procs;
  for (int r = 1; r < plan.tp; ++r) {
    SpawnOptions o;
    o.argv = {exe,
              "worker",
              "--job",
              "inference",
              "--model",
              s.model,
              "--world-size",
              std::to_string(plan.tp),
              "--rank",
              std::to_string(r),
              "--rendezvous",
              s.rendezvous,
              "--transport",
              s.transport,
              "--algo",
              s.algo,
              "--threads",
              std::to_string(plan.threads_per_rank),
              "--backend",
              s.backend,
              "--nvfp4-tiles",
              s.nvfp4_tiles ? "on" : "off",
              "--quantize",
              s.quantize,
              "--no-figures"};
    if (s.peer_timeout_ms > 0) {
      o.argv.insert(o.argv.end(), {"--peer-timeout-ms", std::to_string(s.peer_timeout_ms)});
    }
    if (!s.check_memory) o.argv.push_back("--ignore-memory-check");
    if (s.load_mtp) o.argv.insert(o.argv.end(), {"--speculative", "mtp"});
    if (plan.pin) {
      std::string list;
      for (int c : plan.cpus[r]) list += (list.empty() ? "" : ",") + std::to_string(c);
      o.argv.insert(o.argv.end(), {"--cpus", list});
    }
    o.new_process_group = false;  // Ctrl-C reaches the ranks too
    auto p = Subprocess::Spawn(o);
    if (!p.ok()) {
      return p.status().WithContext("starting rank " + std::to_string(r));
    }
    procs.push_back(std::move(*p));
  }
  return procs;
}

void ReapFollowers(std::vector<std::unique_ptr<Subprocess>>& followers, int grace_ms) {
  const Deadline d = Deadline::AfterMs(grace_ms);
  for (auto& f : followers) {
    if (!f) continue;
    auto st = f->Wait(d);
    if (!st.ok()) f->Terminate(std::chrono::milliseconds(1000));
  }
  followers.clear();
}

// ---- shared flags -------------------------------------------------------------------

const char* const kNvfp4TilesHelp =
    "NVFP4 weights get a second, tile-ordered copy for single-row decode where the CPU reads "
    "one (AVX512-VNNI): faster decode for the NVFP4 bytes once more in memory, within what the "
    "machine can spare; off: the row-major kernels only";

Result<bool> ParseNvfp4Tiles(const std::string& value) {
  if (value == "on") return true;
  if (value == "off") return false;
  return InvalidArgumentError("--nvfp4-tiles takes on or off, not '" + value + "'");
}

const char* const kQuantizeHelp =
    "nvfp4: quantize every BF16/F16/F32 linear weight the checkpoint left unquantized (a whole "
    "BF16 model, an NVFP4 checkpoint's BF16 lm_head; a tied lm_head as a copy, the embedding "
    "gather stays exact) to NVFP4 as it loads, per-16 e4m3 scales as ModelOpt; each TP rank "
    "quantizes its own slice; off: the weights as stored";

void AddInstanceFlags(ArgParser& p) {
  p.Option("transport", "shm|tcp|verbs", "collectives transport between the ranks", "shm")
      .Option("algo", "auto|oneshot|ring|nccl", "all-reduce algorithm", "auto")
      .Option("threads", "N", "CPU threads per rank; 0: the CPUs divided among the ranks", "0")
      .Option("backend", "NAME",
              "kernel backend: auto, cuda, avx512-amx, avx512-rows, avx512, avx2, neon, scalar",
              "auto")
      .Option("kv-dtype", "f32|f16",
              "KV cache element type; f16 halves the KV memory and the bytes attention reads "
              "(each key and value rounded once: logits move by ~1e-3)",
              "f32")
      .Option("nvfp4-tiles", "on|off", kNvfp4TilesHelp, "on")
      .Flag("ignore-memory-check",
            "load even when this rank's share of the weights exceeds MemAvailable")
      .Option("quantize", "nvfp4|off", kQuantizeHelp, "off")
      .Option("peer-timeout-ms", "MS", "a silent peer is declared dead after this long", "5000")
      .Option("connect-timeout-ms", "MS", "how long ranks wait for each other to load and join",
              "600000");
}

Status ReadInstanceFlags(const ArgParser& p, engine::TpRuntimeOptions* o) {
  OCTET_ASSIGN_OR_RETURN(o->comm.transport, collectives::ParseTransport(p.GetString("transport")));
  const std::string algo = p.GetString("algo");
  if (algo == "nccl") {
    // NCCL is a whole backend in the collectives (its own transport).
    o->comm.transport = collectives::TransportKind::kNccl;
    o->comm.algorithm = collectives::AlgorithmKind::kAuto;
  } else {
    OCTET_ASSIGN_OR_RETURN(o->comm.algorithm, collectives::ParseAlgorithm(algo));
  }
  OCTET_ASSIGN_OR_RETURN(int64_t threads, p.GetInt("threads"));
  OCTET_ASSIGN_OR_RETURN(int64_t peer, p.GetInt("peer-timeout-ms"));
  OCTET_ASSIGN_OR_RETURN(int64_t connect, p.GetInt("connect-timeout-ms"));
  if (threads < 0) return InvalidArgumentError("--threads must be >= 0");
  if (peer < 100) return InvalidArgumentError("--peer-timeout-ms must be at least 100");
  if (connect < 1000) return InvalidArgumentError("--connect-timeout-ms must be at least 1000");
  o->load.threads = static_cast<int>(threads);
  o->load.backend = p.GetString("backend");
  OCTET_ASSIGN_OR_RETURN(o->load.nvfp4_tiles, ParseNvfp4Tiles(p.GetString("nvfp4-tiles")));
  OCTET_ASSIGN_OR_RETURN(o->load.quantize, engine::ParseLoadQuantize(p.GetString("quantize")));
  // The MTP draft head is loaded only when it will draft.
  o->load.load_mtp = p.GetString("speculative") == "mtp";
  o->load.check_memory = !p.GetFlag("ignore-memory-check");
  o->comm.peer_timeout_ms = static_cast<int>(peer);
  o->comm.connect_timeout_ms = static_cast<int>(connect);
  // SIGTERM/SIGINT while a large checkpoint loads end the load at the next tensor.
  o->load.cancelled = [] { return StopRequested(); };
  return Status::Ok();
}

// ---- one generation ---------------------------------------------------------------

Result<LocalTpFlags> ReadLocalTpFlags(const ArgParser& p, engine::TpRuntimeOptions* o) {
  LocalTpFlags f;
  OCTET_ASSIGN_OR_RETURN(const int64_t tp, p.GetInt("tp"));
  if (tp < 1 || tp > 64) return InvalidArgumentError("--tp must be in 1..64");
  f.tp = static_cast<int>(tp);
  f.bind = p.GetString("bind");
  if (f.bind != "core" && f.bind != "none")
    return InvalidArgumentError("--bind must be core or none");
  f.transport = p.GetString("transport");
  if (f.transport != "shm" && f.transport != "tcp") {
    return InvalidArgumentError("--transport must be shm or tcp");
  }
  f.algo = p.GetString("algo");
  if (f.algo != "auto" && f.algo != "oneshot" && f.algo != "ring") {
    return InvalidArgumentError("--algo must be auto, oneshot or ring");
  }
  o->world_size = f.tp;
  o->rank = 0;
  OCTET_RETURN_IF_ERROR(ReadInstanceFlags(p, o));
  return f;
}

Result<std::vector<std::unique_ptr<Subprocess>>> StartLocalFollowers(const LocalTpFlags& flags,
                                                                     const std::string& model,
                                                                     engine::TpRuntimeOptions* o,
                                                                     LocalTpPlan* plan) {
  // A degree the model's shapes do not divide is refused here, from config.json,
  // before N processes start, time their collectives and each fail to load.
  OCTET_ASSIGN_OR_RETURN(const engine::ModelConfig config, engine::LoadModelConfig(model));
  OCTET_RETURN_IF_ERROR(engine::CheckTpDegree(engine::TpModelShape::From(config), o->world_size));
  *plan = PlanLocalTp(o->world_size, o->load.threads, flags.bind);
  o->load.threads = plan->threads_per_rank;
  // Bound now and kept for this process (rank 0): a port picked free and
  // bound later could be taken in between (local_rendezvous.h).
  OCTET_ASSIGN_OR_RETURN(collectives::LocalRendezvous rv, collectives::LocalRendezvous::Open());
  o->rendezvous = rv.address();
  rv.KeepForThisProcess();
  FollowerSpawn fs;
  fs.model = model;
  fs.rendezvous = o->rendezvous;
  fs.transport = flags.transport;
  fs.algo = flags.algo;
  fs.peer_timeout_ms = o->comm.peer_timeout_ms;
  fs.backend = o->load.backend;
  fs.nvfp4_tiles = o->load.nvfp4_tiles;
  fs.check_memory = o->load.check_memory;
  fs.quantize = std::string(engine::LoadQuantizeName(o->load.quantize));
  fs.load_mtp = o->load.load_mtp;
  return SpawnFollowers(fs, *plan);
}

void AddSpeculativeFlags(ArgParser& p) {
  p.Option("speculative", "off|ngram|mtp",
           "speculative decoding: drafts checked in one batched forward (ngram: prompt "
           "lookup, any model; mtp: the checkpoint's multi-token-prediction layer)",
           "off")
      .Option("draft-tokens", "K",
              "tokens drafted per step with --speculative: ngram 1-8 (default " +
                  std::to_string(engine::kDefaultNgramDraftTokens) + "), mtp 1-3 (default " +
                  std::to_string(engine::kDefaultMtpDraftTokens) + ")")
      .Option("draft-length", "auto|fixed",
              "auto: verify as many of a step's K drafts as pay for their rows on this machine "
              "(measured step times, the sequence's acceptance so far); fixed: all K every step; "
              "the output is the same",
              "auto");
}

Result<engine::SpeculativeOptions> ReadSpeculativeFlags(const ArgParser& p) {
  auto method = engine::ParseSpeculativeMethod(p.GetString("speculative"));
  if (!method.ok()) return InvalidArgumentError("--speculative: " + method.status().message());
  engine::SpeculativeOptions o;
  o.method = *method;
  o.draft_tokens = engine::DefaultDraftTokens(o.method);
  if (p.Given("draft-tokens")) {
    auto draft_tokens = p.GetInt("draft-tokens");
    if (!draft_tokens.ok()) return draft_tokens.status();
    o.draft_tokens = static_cast<int>(std::clamp<int64_t>(*draft_tokens, -1, 99));
  }
  const std::string length = p.GetString("draft-length");
  if (length != "auto" && length != "fixed") {
    return InvalidArgumentError("--draft-length must be auto or fixed (got '" + length + "')");
  }
  o.adaptive = length == "auto";
  OCTET_RETURN_IF_ERROR(engine::ValidateSpeculative(o));
  return o;
}

void AddGenerateFlags(ArgParser& p) {
  p.Option("prompt", "TEXT", "prompt text, tokenized with the model's tokenizer.json")
      .Option("prompt-ids", "IDS", "prompt as comma-separated token ids, e.g. 1,2,3")
      .Option("max-tokens", "N", "tokens to generate", "16")
      .Option("temperature", "T", "sampling temperature; 0 is greedy", "0")
      .Option("top-k", "K", "sample from the K most likely tokens; 0: all", "0")
      .Option("top-p", "P", "nucleus sampling mass, in (0, 1]", "1")
      .Option("seed", "S", "random seed for sampling", "0")
      .Flag("chat", "apply the model's chat template to --prompt (one user turn)")
      .Option("system", "TEXT", "with --chat: a system message before the user turn")
      .Flag("think", "with --chat on Qwen3: let the model think (default: empty think block)")
      .Flag("ignore-eos", "do not stop at end-of-sequence ids");
  AddGenerationDefaultFlags(p);
  AddSpeculativeFlags(p);
  p.Option("logits-out", "FILE.npy",
           "write float32 logits [T, V] of prompt + generated[:-1] (row t predicts t+1)")
      .Flag("json", "print one JSON document on stdout");
}

GenerateJob PrepareGenerate(const ArgParser& p, const std::string& model_dir) {
  GenerateJob job;
  auto usage = [&](const std::string& why) {
    job.exit_code = kExitUsage;
    job.error = why;
    return std::move(job);
  };
  auto fail = [&](const std::string& why) {
    job.exit_code = kExitFailure;
    job.error = why;
    return std::move(job);
  };
  if (p.Given("prompt") == p.Given("prompt-ids")) {
    return usage("give the prompt with exactly one of --prompt TEXT or --prompt-ids 1,2,3");
  }
  if (p.GetFlag("chat") && !p.Given("prompt")) return usage("--chat needs --prompt TEXT");
  if (p.Given("prompt-ids")) {
    auto ids64 = p.GetIntList("prompt-ids");
    if (!ids64.ok()) return usage(ids64.status().message());
    if (ids64->empty()) return usage("--prompt-ids is empty");
    for (int64_t id : *ids64) {
      if (id < 0 || id > INT32_MAX)
        return usage("token id " + std::to_string(id) + " is out of range");
      job.prompt.push_back(static_cast<int32_t>(id));
    }
  }
  auto seed = p.GetInt("seed");
  if (!seed.ok()) return usage(seed.status().message());
  // Flags, then generation_config.json, then the built-in defaults.
  auto defaults = engine::ReadGenerationDefaults(model_dir);
  if (!defaults.ok()) return fail(defaults.status().message());
  auto settings = ResolveGenerationSettings(p, *defaults, &job.gen.sampling, &job.gen.max_tokens);
  if (!settings.ok()) return usage(settings.status().message());
  if (job.gen.max_tokens < 1) return usage("--max-tokens must be at least 1");
  job.gen.sampling.seed = static_cast<uint64_t>(*seed);
  job.gen.stop_at_eos = !p.GetFlag("ignore-eos");
  job.gen.collect_logits = p.Given("logits-out");
  auto kv_dtype = kernels::ParseKvDtype(p.GetString("kv-dtype"));
  if (!kv_dtype.ok()) return usage("--kv-dtype: " + kv_dtype.status().message());
  job.gen.kv_dtype = *kv_dtype;
  job.logits_out = p.GetString("logits-out");
  job.json = p.GetFlag("json");
  if (Status s = engine::ValidateSampling(job.gen.sampling); !s.ok()) return usage(s.message());
  auto speculative = ReadSpeculativeFlags(p);
  if (!speculative.ok()) return usage(speculative.status().message());
  job.gen.speculative = *speculative;
  // The tokenizer is loaded before the model (it is quick and its absence is
  // the likelier mistake) whenever text is involved: --prompt in, or text out.
  if (p.Given("prompt") || PathExists(JoinPath(model_dir, "tokenizer.json"))) {
    auto t = LoadModelTokenizer(model_dir);
    if (!t.ok()) return fail(t.status().message());
    job.tok.emplace(std::move(*t));
  }
  if (p.Given("prompt")) {
    if (p.GetFlag("chat")) {
      std::vector<engine::ChatMessage> messages;
      if (p.Given("system")) messages.push_back({"system", p.GetString("system")});
      messages.push_back({"user", p.GetString("prompt")});
      auto ids = EncodeChat(*job.tok, messages, p.GetFlag("think"));
      if (!ids.ok()) return fail(ids.status().message());
      job.prompt = std::move(*ids);
      job.gen.stop_ids = job.tok->StopIds();  // the template family's end-of-turn tokens
    } else {
      engine::EncodeOptions eo;
      eo.add_special_tokens = true;  // as the tokenizer's post-processor says (Llama-3: BOS)
      job.prompt = job.tok->Encode(p.GetString("prompt"), eo);
    }
    if (job.prompt.empty()) return usage("the prompt encodes to no tokens");
  }
  return job;
}

int ReportPrepareError(const GenerateJob& job, const std::string& program) {
  std::cerr << program << ": " << job.error
            << (job.exit_code == kExitUsage ? " (see " + program + " --help)" : "") << "\n";
  return job.exit_code;
}

int RunGenerateOn(engine::ModelRunner& runner, GenerateJob& job, const std::string& program,
                  int tp) {
  if (Status s = CheckIdsInVocab(job.prompt, runner.config().vocab_size); !s.ok()) {
    std::cerr << program << ": " << s.message() << "\n";
    return kExitUsage;
  }
  // Without --json, tokens are shown as they come: text when there is a
  // tokenizer (partial UTF-8 held back), ids otherwise.
  std::optional<engine::StreamDecoder> stream;
  engine::DecodeOptions text_opts;
  text_opts.skip_special_tokens = true;
  text_opts.skip_unknown_ids = true;  // padded embedding rows the tokenizer lacks
  if (job.tok) stream.emplace(*job.tok, text_opts);
  // Every token checks for SIGTERM/SIGINT, printed or not (--json).
  job.gen.on_token = [&](int32_t id) {
    if (!job.json && stream) {
      auto piece = stream->Push(id);
      if (piece.ok()) std::cout << *piece << std::flush;
    } else if (!job.json) {
      std::cout << id << " " << std::flush;
    }
    return !StopRequested();
  };
  auto r = engine::Generate(runner, job.prompt, job.gen);
  if (StopRequested()) {
    if (!job.json) std::cout << "\n";
    std::cerr << program << ": stopped by a signal after "
              << (r.ok() ? std::to_string(r->ids.size()) : std::string("0"))
              << " generated tokens\n";
    return StopExitCode();
  }
  if (!r.ok()) {
    std::cerr << program << ": error: " << r.status().message() << "\n";
    return kExitFailure;
  }
  if (job.gen.collect_logits) {
    Status s = WriteNpyF32(job.logits_out, {r->logits_rows, r->vocab}, r->logits.data());
    if (!s.ok()) {
      std::cerr << program << ": error: " << s.message() << "\n";
      return kExitFailure;
    }
  }
  const engine::RunnerStats rs = runner.stats();
  const double allreduce_share = rs.step_ns > 0 ? double(rs.allreduce_ns) / double(rs.step_ns) : 0;
  if (job.json) {
    nlohmann::json j;
    j["ids"] = r->ids;
    if (job.tok) {
      auto text = job.tok->Decode(r->ids, text_opts);
      if (!text.ok()) {
        std::cerr << program << ": error: " << text.status().message() << "\n";
        return kExitFailure;
      }
      j["text"] = *text;
    } else {
      j["text"] = nullptr;  // the model folder has no tokenizer.json
    }
    j["prompt_tokens"] = r->prompt_tokens;
    j["prefill_tps"] = r->prefill_tps();
    j["decode_tps"] = r->decode_tps();
    j["ttft_ms"] = r->ttft_ms();
    j["tp"] = tp;
    j["allreduce_share"] = allreduce_share;
    j["stop_reason"] = r->stop_reason;
    if (job.gen.speculative.method != engine::SpeculativeMethod::kOff) {
      j["speculative"] = {
          {"method", std::string(engine::SpeculativeMethodName(job.gen.speculative.method))},
          {"draft_tokens", job.gen.speculative.draft_tokens},
          {"draft_length", job.gen.speculative.adaptive ? "auto" : "fixed"},
          {"drafted", r->drafted_tokens},
          {"accepted", r->accepted_tokens},
          {"acceptance_rate", r->acceptance_rate()},
          {"decode_steps", r->decode_steps}};
    }
    j["backend"] = std::string(runner.backend().name());
    j["threads"] = runner.backend().num_threads();
    j["architecture"] = runner.config().architecture_name;
    std::cout << j.dump() << "\n";
  } else {
    if (stream) std::cout << stream->Finish();
    std::cout << "\n";
    std::fprintf(stderr,
                 "%lld prompt tokens, %zu generated (%s); prefill %.1f tok/s, decode %.2f tok/s, "
                 "ttft %.1f ms; %s x%d, TP %d (all-reduce %.1f%% of step time)\n",
                 static_cast<long long>(r->prompt_tokens), r->ids.size(), r->stop_reason.c_str(),
                 r->prefill_tps(), r->decode_tps(), r->ttft_ms(),
                 std::string(runner.backend().name()).c_str(), runner.backend().num_threads(), tp,
                 allreduce_share * 100);
    if (job.gen.speculative.method != engine::SpeculativeMethod::kOff) {
      std::fprintf(stderr, "speculative %s: %lld drafted, %lld accepted (%.0f%%) in %lld steps\n",
                   std::string(engine::SpeculativeMethodName(job.gen.speculative.method)).c_str(),
                   static_cast<long long>(r->drafted_tokens),
                   static_cast<long long>(r->accepted_tokens), r->acceptance_rate() * 100,
                   static_cast<long long>(r->decode_steps));
    }
  }
  return kExitOk;
}

}  // namespace octet::cli
