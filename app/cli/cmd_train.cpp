// `octet train`: nanochat-style GPT pre-training (shared/docs/CLI.md "Training").
//
//   octet train --config FILE|PRESET --data DIR --steps S --out DIR [--ranks N] [--resume]
//       pre-trains on token shards (octet train prepare), checkpointing into
//       OUT/checkpoints and exporting the final model to OUT; --ranks N runs N
//       data-parallel rank processes, each joining with
//   octet train ... --world-size N --rank R --rendezvous HOST:PORT
//       (also how `octet worker --job training` runs one rank for octet-agent).
//   octet train prepare --out DIR [--vocab-size N | --tokenizer FILE] INPUT...
//       text files/folders -> token shards (+ tokenizer.json) for --data.
//   octet train --init DIR --batch DIR --steps K --optimizer adamw --lr ...
//       K optimizer steps on one fixed batch (x.npy, y.npy) from the weights
//       in DIR; prints {"losses": [...]} (the loss before each step).
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "command.h"
#include "octet/base/args.h"
#include "octet/base/deadline.h"
#include "octet/base/file_util.h"
#include "octet/base/json.h"
#include "octet/base/log.h"
#include "octet/base/npy.h"
#include "octet/base/subprocess.h"
#include "octet/collectives/communicator.h"
#include "octet/collectives/local_rendezvous.h"
#include "octet/kernels/backend.h"
#include "octet/kernels/thread_pool.h"
#include "octet/trainer/dp_group.h"
#include "octet/trainer/gpt_model.h"
#include "octet/trainer/model_io.h"
#include "octet/trainer/optimizer.h"
#include "octet/trainer/prepare.h"
#include "octet/trainer/token_shards.h"
#include "octet/trainer/trainer.h"
#include "octet/wire/figures_line.h"

namespace octet::cli {
namespace {

int Fail(const std::string& what) {
  std::cerr << WithProgram("octet train", what) << "\n";
  return kExitFailure;
}
int Usage(const std::string& what) {
  std::cerr << WithProgram("octet train", what) << "\n";
  return kExitUsage;
}

void AddOptimizerFlags(ArgParser& p) {
  p.Option("optimizer", "adamw|muon",
           "adamw: AdamW on every parameter; muon: nanochat's Muon (block matrices) + AdamW "
           "(embedding, head). Default: adamw with --init, muon otherwise");
  p.Option("lr", "X", "AdamW learning rate (--optimizer adamw)", "1e-3");
  p.Option("betas", "B1,B2", "AdamW betas", "0.9,0.95");
  p.Option("eps", "X", "AdamW epsilon", "1e-8");
  p.Option("weight-decay", "X", "decoupled weight decay", "0");
  p.Option("matrix-lr", "X", "Muon learning rate (--optimizer muon)", "0.02");
  p.Option("embedding-lr", "X", "AdamW rate for wte, scaled by (n_embd/768)^-0.5 (muon)", "0.2");
  p.Option("unembedding-lr", "X", "AdamW rate for lm_head, scaled likewise (muon)", "0.004");
}

Result<trainer::OptimizerConfig> OptimizerFromFlags(const ArgParser& p) {
  trainer::OptimizerConfig oc;
  oc.kind = p.Given("optimizer") ? p.GetString("optimizer") : (p.Given("init") ? "adamw" : "muon");
  auto get = [&](const char* name, float* out) -> Status {
    OCTET_ASSIGN_OR_RETURN(double v, p.GetDouble(name));
    *out = static_cast<float>(v);
    return Status::Ok();
  };
  OCTET_RETURN_IF_ERROR(get("lr", &oc.lr));
  OCTET_RETURN_IF_ERROR(get("eps", &oc.eps));
  OCTET_RETURN_IF_ERROR(get("weight-decay", &oc.weight_decay));
  OCTET_RETURN_IF_ERROR(get("matrix-lr", &oc.matrix_lr));
  OCTET_RETURN_IF_ERROR(get("embedding-lr", &oc.embedding_lr));
  OCTET_RETURN_IF_ERROR(get("unembedding-lr", &oc.unembedding_lr));
  const auto betas = p.GetList("betas");
  if (betas.size() != 2) return InvalidArgumentError("--betas takes two numbers: B1,B2");
  try {
    oc.beta1 = std::stof(betas[0]);
    oc.beta2 = std::stof(betas[1]);
  } catch (const std::exception&) {
    return InvalidArgumentError("--betas: not numbers: " + p.GetString("betas"));
  }
  if (p.Given("betas") && oc.kind == "muon") {
    oc.adam_beta1 = oc.beta1;
    oc.adam_beta2 = oc.beta2;
  }
  if (p.Given("eps") && oc.kind == "muon") oc.adam_eps = oc.eps;
  OCTET_RETURN_IF_ERROR(oc.Validate());
  return oc;
}

Result<std::vector<int32_t>> ReadTokenMatrix(const std::string& path, int64_t* B, int64_t* T) {
  OCTET_ASSIGN_OR_RETURN(NpyArray a, ReadNpy(path));
  if (a.shape.size() != 2) {
    return InvalidArgumentError(path + ": expected a 2-D [B, T] array of token ids");
  }
  if (a.dtype != "i4" && a.dtype != "i8") {
    return InvalidArgumentError(path + ": dtype " + a.dtype + ", expected int32 token ids");
  }
  *B = a.shape[0];
  *T = a.shape[1];
  std::vector<int32_t> ids;
  ids.reserve(a.numel());
  for (int64_t v : a.AsInt64()) ids.push_back(static_cast<int32_t>(v));
  return ids;
}

// --init/--batch: K steps on one fixed batch.
int RunFixedBatch(const ArgParser& p) {
  if (!p.Given("batch")) return Usage("--init needs --batch DIR (x.npy, y.npy)");
  auto steps = p.GetInt("steps");
  if (!steps.ok() || *steps < 0) return Usage("--steps must be a count >= 0");
  auto oc = OptimizerFromFlags(p);
  if (!oc.ok()) return Usage(oc.status().message());
  auto threads = p.GetInt("threads");
  if (!threads.ok()) return Usage(threads.status().message());
  auto backend = kernels::CreateBackend(p.GetString("backend"), {.threads = int(*threads)});
  if (!backend.ok()) return Usage(backend.status().message());

  const std::string batch = p.GetString("batch");
  int64_t B = 0, T = 0, By = 0, Ty = 0;
  auto x = ReadTokenMatrix(JoinPath(batch, "x.npy"), &B, &T);
  if (!x.ok()) return Fail(x.status().message());
  auto y = ReadTokenMatrix(JoinPath(batch, "y.npy"), &By, &Ty);
  if (!y.ok()) return Fail(y.status().message());
  if (B != By || T != Ty) return Fail("x.npy and y.npy shapes differ");

  auto model = trainer::LoadModelDir(p.GetString("init"), backend->get(), int(T));
  if (!model.ok()) return Fail(model.status().message());
  trainer::GptModel& m = **model;
  auto opt = trainer::Optimizer::Create(*oc, &m);
  if (!opt.ok()) return Usage(opt.status().message());

  std::vector<float> losses;
  for (int64_t step = 0; step <= *steps; ++step) {
    auto loss = m.Forward(x->data(), y->data(), int(B), int(T));
    if (!loss.ok()) return Fail(loss.status().message());
    losses.push_back(*loss);
    if (step == *steps) break;
    m.ZeroGrads();
    if (Status s = m.Backward(1.0f); !s.ok()) return Fail(s.message());
    if (step == 0 && p.Given("grads-out")) {
      if (Status s = trainer::SaveGradients(m, p.GetString("grads-out")); !s.ok()) {
        return Fail(s.message());
      }
    }
    if (Status s = (*opt)->Step(1.0f); !s.ok()) return Fail(s.message());
    if (!p.GetFlag("json"))
      std::fprintf(stderr, "step %lld loss %.6f\n", (long long)step, losses.back());
  }
  const float final_loss = losses.back();
  losses.pop_back();
  if (p.GetFlag("json")) {
    nlohmann::ordered_json j;
    j["losses"] = losses;
    j["loss_after_last_step"] = final_loss;
    j["steps"] = *steps;
    j["optimizer"] = oc->kind;
    j["batch"] = {B, T};
    if (p.Given("grads-out")) j["grads_out"] = p.GetString("grads-out");
    std::cout << j.dump() << "\n";
  } else {
    std::fprintf(stderr, "after %lld steps: loss %.6f\n", (long long)*steps, final_loss);
  }
  return kExitOk;
}

double Round(double v, double scale) { return std::round(v * scale) / scale; }

// Prefix of this process's one-line errors ("octet train" or, for one rank of
// a data-parallel job, "octet train (rank 2)").
std::string g_error_prefix = "octet train";

int FailRank(const std::string& what) {
  std::cerr << g_error_prefix << ": " << what << "\n";
  return kExitFailure;
}

// How this process takes part in data parallelism.
struct RankSetup {
  int local_ranks = 1;  // --ranks: rank processes to spawn on this host
  bool joined = false;  // --rank given: this process is one rank of a job
  int world_size = 1;
  int rank = 0;
  std::string rendezvous;  // HOST:PORT of rank 0
  collectives::CommunicatorOptions comm;
};

// The pre-training flags, checked. Returns kExitOk or the exit code of a
// usage error (already reported).
int ReadPretrainFlags(const ArgParser& p, trainer::TrainOptions* out, RankSetup* ranks) {
  for (const char* f : {"config", "data", "out"}) {
    if (!p.Given(f)) return Usage(std::string("--") + f + " is required (see --help)");
  }
  auto local = p.GetInt("ranks");
  if (!local.ok() || *local < 1 || *local > 256) return Usage("--ranks must be 1..256");
  ranks->local_ranks = int(*local);
  ranks->joined = p.Given("rank");
  if (ranks->joined != p.Given("rendezvous") || ranks->joined != p.Given("world-size")) {
    return Usage("--rank, --world-size and --rendezvous go together");
  }
  if (ranks->joined) {
    auto world = p.GetInt("world-size");
    auto rank = p.GetInt("rank");
    if (!world.ok() || *world < 1 || *world > 256) return Usage("--world-size must be 1..256");
    if (!rank.ok() || *rank < 0 || *rank >= *world) {
      return Usage("--rank must be 0.." + std::to_string(*world - 1));
    }
    ranks->world_size = int(*world);
    ranks->rank = int(*rank);
    ranks->rendezvous = p.GetString("rendezvous");
  } else {
    ranks->world_size = ranks->local_ranks;
  }
  const std::string algo = p.GetString("algo");
  if (algo == "nccl") {
    ranks->comm.transport = collectives::TransportKind::kNccl;
  } else {
    auto a = collectives::ParseAlgorithm(algo);
    if (!a.ok()) return Usage("--algo: " + a.status().message());
    ranks->comm.algorithm = *a;
    auto t = collectives::ParseTransport(p.GetString("transport"));
    if (!t.ok()) return Usage("--transport: " + t.status().message());
    ranks->comm.transport = *t;
  }

  trainer::TrainOptions& o = *out;
  o.data_dir = p.GetString("data");
  o.out_dir = p.GetString("out");
  auto meta = trainer::DataMeta::Load(o.data_dir);
  if (!meta.ok()) return Usage(meta.status().message());

  // Model: a config.json file or a preset sized to the data's vocabulary.
  const std::string config = p.GetString("config");
  Result<int64_t> seq = p.Given("seq-len") ? p.GetInt("seq-len") : Result<int64_t>(int64_t{0});
  if (!seq.ok() || *seq < 0) return Usage("--seq-len must be a length");
  if (PathExists(config)) {
    auto c = trainer::GptConfig::Load(config);
    if (!c.ok()) return Usage(c.status().message());
    o.model = *c;
    if (*seq > 0) o.model.sequence_len = int(*seq);
  } else {
    const int T = *seq > 0 ? int(*seq) : trainer::GptConfig::PresetSequenceLen(config);
    auto c = trainer::GptConfig::Preset(config, meta->vocab_size, T);
    if (!c.ok()) return Usage(c.status().message() + " (or give a config.json path)");
    o.model = *c;
  }
  auto oc = OptimizerFromFlags(p);
  if (!oc.ok()) return Usage(oc.status().message());
  o.optimizer = *oc;
  auto get_int = [&](const char* name, int64_t min, int64_t* v) -> bool {
    auto r = p.GetInt(name);
    if (!r.ok() || *r < min) return false;
    *v = *r;
    return true;
  };
  int64_t batch = 0, steps = 0, total = 0, warmup = 0, ckpt = 0, keep = 0, eval_every = 0,
          eval_batches = 0, seed = 0, log_every = 0, peer_timeout = 0;
  if (!get_int("batch-size", 1, &batch)) return Usage("--batch-size must be >= 1");
  if (!get_int("steps", 0, &steps)) return Usage("--steps must be >= 0");
  if (!get_int("total-batch-tokens", 0, &total)) return Usage("--total-batch-tokens must be >= 0");
  if (!get_int("warmup-steps", 0, &warmup)) return Usage("--warmup-steps must be >= 0");
  if (!get_int("checkpoint-every", 0, &ckpt)) return Usage("--checkpoint-every must be >= 0");
  if (!get_int("keep-checkpoints", 0, &keep)) return Usage("--keep-checkpoints must be >= 0");
  if (!get_int("eval-every", 0, &eval_every)) return Usage("--eval-every must be >= 0");
  if (!get_int("eval-batches", 0, &eval_batches)) return Usage("--eval-batches must be >= 0");
  if (!get_int("seed", 0, &seed)) return Usage("--seed must be >= 0");
  if (!get_int("log-every", 1, &log_every)) return Usage("--log-every must be >= 1");
  if (!get_int("peer-timeout-ms", 0, &peer_timeout) || peer_timeout > 86'400'000) {
    return Usage("--peer-timeout-ms must be 0..86400000");
  }
  auto warmdown = p.GetDouble("warmdown-frac");
  auto final_frac = p.GetDouble("final-lr-frac");
  auto clip = p.GetDouble("grad-clip");
  auto bucket = p.GetBytes("bucket-size");
  auto peak = p.GetDouble("peak-gflops");
  if (!warmdown.ok() || *warmdown < 0 || *warmdown > 1)
    return Usage("--warmdown-frac must be in [0, 1]");
  if (!final_frac.ok() || *final_frac < 0) return Usage("--final-lr-frac must be >= 0");
  if (!clip.ok() || *clip < 0) return Usage("--grad-clip must be >= 0");
  if (!bucket.ok() || *bucket < 1)
    return Usage("--bucket-size: " +
                 (bucket.ok() ? std::string("must be positive") : bucket.status().message()));
  if (!peak.ok() || *peak < 0) return Usage("--peak-gflops must be >= 0");
  o.batch_size = int(batch);
  o.steps = steps;
  o.total_batch_tokens = total;
  o.warmup_steps = warmup;
  o.warmdown_frac = float(*warmdown);
  o.final_lr_frac = float(*final_frac);
  o.grad_clip = float(*clip);
  o.checkpoint_every = ckpt;
  o.keep_checkpoints = int(keep);
  o.eval_every = eval_every;
  o.eval_batches = int(eval_batches);
  o.seed = uint64_t(seed);
  o.resume = p.GetFlag("resume");
  o.bucket_bytes = *bucket;
  o.grads_out = p.GetString("grads-out");
  o.peak_flops = *peak * 1e9;
  if (o.model.Validate().ok() && o.total_batch_tokens > 0) {
    const int64_t per_micro = int64_t{ranks->world_size} * o.batch_size * o.model.sequence_len;
    if (o.total_batch_tokens % per_micro != 0) {
      return Usage("--total-batch-tokens " + std::to_string(o.total_batch_tokens) +
                   " is not a multiple of ranks x batch x sequence = " + std::to_string(per_micro));
    }
  }

  // A rank waiting in an all-reduce while rank 0 writes a checkpoint (weights
  // and optimizer state, ~3 copies of the parameters) must not declare it
  // dead: by default allow a minute plus that write at 50 MB/s. A rank that
  // dies is noticed at once whatever this is (its connections close).
  if (peer_timeout == 0) {
    const double checkpoint_bytes = 12.0 * double(o.model.NumParams());
    peer_timeout = 60'000 + int64_t(checkpoint_bytes / 50e6 * 1000.0);
  }
  ranks->comm.peer_timeout_ms = int(std::min<int64_t>(peer_timeout, 86'400'000));
  o.sync_timeout_ms = ranks->comm.peer_timeout_ms + 60'000;
  return kExitOk;
}


// --ranks N: runs N rank processes of this program on this host (each
// `octet train <same flags> --world-size N --rank r --rendezvous 127.0.0.1:P`)
// and supervises them. Rank 0's output is the run's (step lines, --json);
// the others print only warnings and errors. When a rank fails the others
// fail too (their collectives name it) and are stopped if they linger; the
// error names the rank that failed first (one killed by a signal is preferred
// as the cause over those that failed because of it).
int RunLocalRanks(const ArgParser& p, const std::vector<std::string>& args,
                  const RankSetup& setup) {
  auto exe = SelfExecutablePath();
  if (!exe.ok()) return Fail(exe.status().message());
  // Bound before any rank starts and handed to rank 0 (local_rendezvous.h):
  // a port picked free and bound later by rank 0 could be taken in between.
  auto rv = collectives::LocalRendezvous::Open();
  if (!rv.ok()) return Fail("rendezvous: " + rv.status().message());
  const std::string rendezvous = rv->address();
  const int n = setup.local_ranks;
  // Threads: the cores shared between the ranks unless --threads says.
  auto threads = p.GetInt("threads");
  const int per_rank = threads.ok() && *threads > 0
                           ? int(*threads)
                           : std::max(1, kernels::ThreadPool::HardwareThreads() / n);
  std::vector<std::unique_ptr<Subprocess>> procs;
  for (int r = 0; r < n; ++r) {
    SpawnOptions o;
    o.argv = {*exe, "train"};
    o.argv.insert(o.argv.end(), args.begin(), args.end());
    o.argv.insert(o.argv.end(), {"--world-size", std::to_string(n), "--rank", std::to_string(r),
                                 "--rendezvous", rendezvous});
    if (!p.Given("threads")) o.argv.insert(o.argv.end(), {"--threads", std::to_string(per_rank)});
    o.new_process_group = false;  // Ctrl-C reaches the ranks too
    if (r == 0) o.env.push_back(collectives::LocalRendezvous::EnvFor({&*rv}));
    auto proc = Subprocess::Spawn(o);
    if (r == 0) rv->Close();  // rank 0 holds it now; the others only connect
    if (!proc.ok())
      return Fail("cannot start rank " + std::to_string(r) + ": " + proc.status().message());
    std::fprintf(stderr, "octet train: rank %d started (pid %d)\n", r, int((*proc)->pid()));
    procs.push_back(std::move(*proc));
  }
  struct Failure {
    int rank = -1;
    ExitStatus status;
  };
  std::optional<Failure> cause;
  std::vector<std::optional<ExitStatus>> ended(n);
  int remaining = n;
  std::optional<Deadline> give_up;
  while (remaining > 0) {
    for (int r = 0; r < n; ++r) {
      if (ended[r]) continue;
      ended[r] = procs[r]->Poll();
      if (!ended[r]) continue;
      --remaining;
      if (ended[r]->success()) continue;
      const bool signalled = !ended[r]->exited;
      if (!cause || (signalled && cause->status.exited)) {
        cause = Failure{r, *ended[r]};
      }
      // The others notice a dead peer within milliseconds and a silent one
      // within the peer timeout; after that, stop them.
      if (!give_up) give_up = Deadline::AfterMs(setup.comm.peer_timeout_ms + 10'000);
    }
    if (give_up && give_up->expired()) {
      for (int r = 0; r < n; ++r) {
        if (!ended[r]) ended[r] = procs[r]->Terminate(std::chrono::milliseconds(2000));
      }
      break;
    }
    if (remaining > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!cause) return kExitOk;
  std::cerr << "octet train: rank " << cause->rank << " failed (" << cause->status.ToString()
            << "); the run stopped\n";
  // Every rank refusing the same bad input (exit 2) is a usage error.
  bool all_usage = true;
  for (const auto& e : ended) all_usage = all_usage && e && e->exited && e->code == kExitUsage;
  return all_usage ? kExitUsage : kExitFailure;
}

// --config/--data/--out: pre-training on token shards, as one process, as
// --ranks local rank processes, or as one rank of a job (--rank).
int RunPretrain(const ArgParser& p, const std::vector<std::string>& args) {
  trainer::TrainOptions o;
  RankSetup ranks;
  if (int rc = ReadPretrainFlags(p, &o, &ranks); rc != kExitOk) return rc;
  if (!ranks.joined && ranks.local_ranks > 1) return RunLocalRanks(p, args, ranks);

  std::unique_ptr<trainer::DataParallelGroup> group;
  if (ranks.joined) {
    const std::string tag = "rank " + std::to_string(ranks.rank);
    SetLogTag(tag);
    g_error_prefix = "octet train (" + tag + ")";
    if (ranks.world_size > 1) {
      auto g = trainer::DataParallelGroup::Join(ranks.rendezvous, ranks.world_size, ranks.rank,
                                                ranks.comm);
      if (!g.ok()) return FailRank(g.status().message());
      group = std::move(*g);
    }
  }
  auto threads = p.GetInt("threads");
  if (!threads.ok()) return Usage(threads.status().message());
  auto backend = kernels::CreateBackend(p.GetString("backend"), {.threads = int(*threads)});
  if (!backend.ok()) return Usage(backend.status().message());
  auto t = trainer::Trainer::Create(o, backend->get(), group ? group->main() : nullptr,
                                    group ? group->background() : nullptr);
  if (!t.ok()) {
    const bool usage = t.status().code() == StatusCode::kInvalidArgument ||
                       t.status().code() == StatusCode::kAlreadyExists;
    std::cerr << g_error_prefix << ": " << t.status().message() << "\n";
    return usage ? kExitUsage : kExitFailure;
  }
  trainer::Trainer& tr = **t;
  const bool json = p.GetFlag("json");
  int64_t log_every = 1;
  if (auto v = p.GetInt("log-every"); v.ok()) log_every = *v;
  if (tr.rank() == 0) {
    std::fprintf(stderr,
                 "octet train: %s, %lld parameters (%.1f MFLOP/token), %d rank(s) x %d threads, "
                 "batch %d x %d, %d micro-batch(es) per step = %lld tokens/step, %s\n",
                 p.GetString("config").c_str(), (long long)o.model.NumParams(),
                 o.model.TrainingFlopsPerToken(o.model.sequence_len) * 1e-6, tr.world_size(),
                 backend->get()->num_threads(), o.batch_size, o.model.sequence_len, tr.grad_accum(),
                 (long long)(tr.world_size() * tr.grad_accum() * int64_t{o.batch_size} *
                             o.model.sequence_len),
                 o.optimizer.kind.c_str());
    if (group) std::fprintf(stderr, "octet train: %s\n", group->Describe().c_str());
  }
  nlohmann::ordered_json steps_json = nlohmann::json::array(), evals_json = nlohmann::json::array();
  std::vector<trainer::StepReport> reports;
  const bool figures = p.GetFlag("figures");
  // The agent's worker-telemetry line (agent job supervisor: "@octet-figures
  // {json}", keys as its WorkerFigures; the agent reads train_step, train_loss,
  // train_tps, step_ms, allreduce_share and passes the line on). Every rank
  // reports its own step figures; val_loss / val_bpb are the latest
  // evaluation's (all ranks agree on them) and appear once one has run.
  std::optional<trainer::EvalReport> last_eval;
  auto print_figures = [&](const char* state, const trainer::StepReport* r) {
    nlohmann::ordered_json f = {
        {"kind", "training"}, {"state", state}, {"backend", std::string(backend->get()->name())}};
    if (r) {
      f["train_step"] = r->step;
      f["train_total_steps"] = r->total_steps;
      f["train_loss"] = r->loss;
      f["train_tps"] = Round(r->tokens_per_second, 10);
      f["step_ms"] = Round(r->step_ms, 1000);
      f["compute_ms"] = Round(r->compute_ms, 1000);
      f["allreduce_ms"] = Round(r->allreduce_wait_ms, 1000);
      f["allreduce_share"] = r->step_ms > 0 ? Round(r->allreduce_wait_ms / r->step_ms, 1e4) : 0.0;
      f["mfu"] = Round(r->mfu, 1e6);
    }
    if (last_eval) {
      f["val_step"] = last_eval->step;
      f["val_loss"] = last_eval->val_loss;
      if (last_eval->val_bpb >= 0) f["val_bpb"] = last_eval->val_bpb;
    }
    std::fprintf(stderr, "%s\n", wire::FormatFiguresLine(f).c_str());
  };
  if (figures) print_figures("starting", nullptr);
  auto on_step = [&](const trainer::StepReport& r) {
    reports.push_back(r);
    if (figures) print_figures("running", &r);
    steps_json.push_back({{"step", r.step},
                          {"loss", r.loss},
                          {"lr_multiplier", r.lr_multiplier},
                          {"grad_norm", r.grad_norm},
                          {"tokens", r.tokens},
                          {"step_ms", Round(r.step_ms, 1000)},
                          {"compute_ms", Round(r.compute_ms, 1000)},
                          {"allreduce_wait_ms", Round(r.allreduce_wait_ms, 1000)},
                          {"allreduce_busy_ms", Round(r.allreduce_busy_ms, 1000)},
                          {"tokens_per_second", Round(r.tokens_per_second, 10)},
                          {"mfu", Round(r.mfu, 1e6)}});
    if (tr.rank() == 0 && (r.step % log_every == 0 || r.step == r.total_steps)) {
      std::fprintf(stderr,
                   "step %lld/%lld | loss %.4f | lr x%.3f | grad norm %.3f | %.0f tok/s | "
                   "%.0f ms (compute %.0f, all-reduce wait %.1f, busy %.1f) | mfu %.1f%%\n",
                   (long long)r.step, (long long)r.total_steps, r.loss, r.lr_multiplier,
                   r.grad_norm, r.tokens_per_second, r.step_ms, r.compute_ms, r.allreduce_wait_ms,
                   r.allreduce_busy_ms, 100 * r.mfu);
    }
  };
  auto on_eval = [&](const trainer::EvalReport& e) {
    nlohmann::ordered_json j = {{"step", e.step}, {"val_loss", e.val_loss}, {"tokens", e.tokens}};
    if (e.val_bpb >= 0) j["val_bpb"] = e.val_bpb;
    evals_json.push_back(j);
    last_eval = e;
    if (figures) print_figures("running", reports.empty() ? nullptr : &reports.back());
    if (tr.rank() == 0) {
      std::fprintf(stderr, "eval at step %lld | val loss %.4f", (long long)e.step, e.val_loss);
      if (e.val_bpb >= 0) std::fprintf(stderr, " | %.4f bits/byte", e.val_bpb);
      std::fprintf(stderr, "\n");
    }
  };
  if (Status s = tr.Run(on_step, on_eval); !s.ok()) return FailRank(s.message());
  if (figures) print_figures("finished", reports.empty() ? nullptr : &reports.back());

  // Throughput as nanochat reports it: excluding the first (warm-up) steps.
  const size_t skip = reports.size() > 10 ? 10 : reports.size() / 2;
  double tokens = 0, ms = 0, compute = 0, wait = 0, busy = 0;
  for (size_t i = skip; i < reports.size(); ++i) {
    tokens += double(reports[i].tokens);
    ms += reports[i].step_ms;
    compute += reports[i].compute_ms;
    wait += reports[i].allreduce_wait_ms;
    busy += reports[i].allreduce_busy_ms;
  }
  const double tps = ms > 0 ? tokens / (ms * 1e-3) : 0;
  if (tr.rank() == 0) {
    std::fprintf(stderr, "done: %lld steps, %.0f tok/s (after the first %zu steps), model in %s\n",
                 (long long)tr.step(), tps, skip, o.out_dir.c_str());
  }
  if (json && tr.rank() == 0) {
    nlohmann::ordered_json j;
    j["out"] = o.out_dir;
    j["ranks"] = tr.world_size();
    j["threads_per_rank"] = backend->get()->num_threads();
    if (group) j["collectives"] = group->Describe();
    j["params"] = o.model.NumParams();
    j["flops_per_token"] = o.model.TrainingFlopsPerToken(o.model.sequence_len);
    j["tokens_per_step"] = reports.empty() ? 0 : reports.back().tokens;
    j["final_loss"] = reports.empty() ? nlohmann::json() : nlohmann::json(reports.back().loss);
    j["tokens_per_second"] = Round(tps, 10);
    j["step_ms"] = reports.size() > skip ? Round(ms / double(reports.size() - skip), 1000) : 0.0;
    j["compute_share"] = ms > 0 ? Round(compute / ms, 1e4) : 0.0;
    j["allreduce_wait_share"] = ms > 0 ? Round(wait / ms, 1e4) : 0.0;
    j["allreduce_busy_share"] = ms > 0 ? Round(busy / ms, 1e4) : 0.0;
    j["steps"] = steps_json;
    j["evals"] = evals_json;
    std::cout << j.dump() << "\n";
  }
  return kExitOk;
}

int RunPrepare(const std::vector<std::string>& args) {
  ArgParser p("octet train prepare",
              "Tokenize text files into token shards for `octet train --data`: one document per "
              "file, BOS before each, a validation split, a BPE tokenizer trained on the "
              "training documents unless --tokenizer is given.");
  p.Positional("INPUT", "text files or folders (walked recursively)");
  p.Option("out", "DIR", "data folder to create");
  p.Option("tokenizer", "FILE", "use this tokenizer.json (or folder) instead of training one");
  p.Option("vocab-size", "N", "vocabulary of the trained tokenizer (bytes + merges + BOS)", "8192");
  p.Option("bos-token", "TEXT", "special token that starts every document", "<|bos|>");
  p.Option("val-fraction", "F", "share of the documents held out for validation", "0.01");
  p.Option("shard-tokens", "N", "tokens per shard file", "50000000");
  p.Flag("json", "print one JSON document on stdout");
  if (Status s = p.Parse(args); !s.ok()) return ParseUsageError(s);
  if (p.help_requested()) {
    std::cout << p.Usage();
    return kExitOk;
  }
  trainer::PrepareOptions o;
  o.inputs = p.positional();
  o.out_dir = p.GetString("out");
  o.tokenizer = p.GetString("tokenizer");
  o.bos_token = p.GetString("bos-token");
  if (o.inputs.empty()) return Usage("prepare: give the input files or folders");
  if (o.out_dir.empty()) return Usage("prepare: --out DIR is required");
  auto vocab = p.GetInt("vocab-size");
  auto frac = p.GetDouble("val-fraction");
  auto shard = p.GetInt("shard-tokens");
  if (!vocab.ok() || *vocab < 257 || *vocab > (int64_t{1} << 24)) {
    return Usage("--vocab-size must be in [257, 16777216]");
  }
  if (!frac.ok() || *frac < 0 || *frac >= 1) return Usage("--val-fraction must be in [0, 1)");
  if (!shard.ok() || *shard < 1) return Usage("--shard-tokens must be >= 1");
  o.vocab_size = int(*vocab);
  o.val_fraction = *frac;
  o.shard_tokens = *shard;
  o.progress = [](const std::string& line) {
    std::fprintf(stderr, "octet train prepare: %s\n", line.c_str());
  };
  auto r = trainer::PrepareData(o);
  if (!r.ok()) {
    const bool usage = r.status().code() == StatusCode::kInvalidArgument ||
                       r.status().code() == StatusCode::kNotFound ||
                       r.status().code() == StatusCode::kAlreadyExists;
    std::cerr << "octet train prepare: " << r.status().message() << "\n";
    return usage ? kExitUsage : kExitFailure;
  }
  std::fprintf(stderr,
               "octet train prepare: %lld documents (%lld for validation), %lld bytes -> %lld "
               "train + %lld val tokens (%.2f bytes/token), vocabulary %d, BOS %d, in %s\n",
               (long long)r->documents, (long long)r->val_documents, (long long)r->text_bytes,
               (long long)r->train_tokens, (long long)r->val_tokens,
               r->train_tokens + r->val_tokens > 0
                   ? double(r->text_bytes) / double(r->train_tokens + r->val_tokens)
                   : 0.0,
               r->vocab_size, r->bos_id, o.out_dir.c_str());
  if (p.GetFlag("json")) {
    nlohmann::ordered_json j = {{"out", o.out_dir},
                                {"documents", r->documents},
                                {"val_documents", r->val_documents},
                                {"text_bytes", r->text_bytes},
                                {"train_tokens", r->train_tokens},
                                {"val_tokens", r->val_tokens},
                                {"vocab_size", r->vocab_size},
                                {"bos_id", r->bos_id},
                                {"trained_tokenizer", r->trained_tokenizer},
                                {"train_shards", r->train_shards},
                                {"val_shards", r->val_shards}};
    std::cout << j.dump() << "\n";
  }
  return kExitOk;
}

}  // namespace

const std::vector<Subcommand>& TrainSubcommands() {
  static const std::vector<Subcommand> table = {{"prepare", RunPrepare}};
  return table;
}

int RunTrain(const std::vector<std::string>& args) {
  if (!args.empty()) {
    if (const Subcommand* s = FindSubcommand(TrainSubcommands(), args[0]))
      return s->run(std::vector<std::string>(args.begin() + 1, args.end()));
  }
  ArgParser p("octet train",
              "Pre-train a nanochat-style GPT, or run K optimizer steps on one fixed batch "
              "(--init/--batch). `octet train prepare --help`: make the --data folder.");
  p.Option("config", "FILE|PRESET",
           "model: a config.json, or a preset (tiny, d4, d8, d12, d20, any d<depth>: width "
           "64*depth, heads of 128) sized to the data's vocabulary");
  p.Option("data", "DIR", "token shards written by `octet train prepare`");
  p.Option("out", "DIR", "checkpoints (OUT/checkpoints) and the final model (OUT)");
  p.Option("ranks", "N", "data-parallel rank processes on this host", "1");
  p.Option("rendezvous", "HOST:PORT",
           "join a data-parallel job as one rank: rank 0's address (with --rank, --world-size; "
           "how --ranks and octet-agent start ranks)");
  p.Option("rank", "R", "this process's rank when joining a job");
  p.Option("world-size", "N", "ranks in the job when joining one");
  p.Option("transport", "T", "collectives transport between ranks: auto, shm, tcp, verbs", "auto");
  p.Option("algo", "A", "all-reduce algorithm: auto, oneshot, ring, nccl", "auto");
  p.Option("peer-timeout-ms", "MS",
           "a rank silent this long fails the run (0: 60 s + rank 0's checkpoint write time)", "0");
  p.Flag("resume", "continue the run in --out from its latest checkpoint (bit-exact)");
  p.Option("batch-size", "B", "sequences per rank per micro-batch", "8");
  p.Option("seq-len", "T", "sequence length (default: the config's, or the preset's)");
  p.Option("total-batch-tokens", "N",
           "tokens per optimizer step over all ranks (a multiple of ranks*B*T: gradient "
           "accumulation); 0 = ranks*B*T",
           "0");
  p.Option("warmup-steps", "K", "linear LR warm-up steps", "0");
  p.Option("warmdown-frac", "F", "share of the steps over which the LR falls linearly", "0.2");
  p.Option("final-lr-frac", "F", "LR multiplier reached at the last step", "0");
  p.Option("grad-clip", "X", "clip the global gradient norm (after the all-reduce); 0 = off",
           "1.0");
  p.Option("checkpoint-every", "K", "checkpoint every K steps (and always at the end)", "0");
  p.Option("keep-checkpoints", "N", "newest checkpoints to keep (0 = all)", "2");
  p.Option("eval-every", "K", "validation loss / bits per byte every K steps (and at the end)",
           "0");
  p.Option("eval-batches", "N", "micro-batches per rank per validation (0 = none)", "4");
  p.Option("seed", "S", "weight initialisation seed", "42");
  p.Option("bucket-size", "BYTES", "gradient all-reduce bucket size", "25M");
  p.Option("log-every", "K", "print a step line every K steps", "1");
  p.Option("peak-gflops", "X", "peak GFLOP/s per rank for the MFU estimate (0: estimate)", "0");
  p.Option("init", "DIR", "fixed-batch mode: model folder (config.json, model.safetensors)");
  p.Option("batch", "DIR", "fixed-batch mode: folder with x.npy and y.npy (int32 [B, T])");
  p.Option("steps", "K", "optimizer steps", "10");
  p.Option("grads-out", "FILE",
           "write the first step's (averaged, unclipped) gradients as safetensors (with "
           "--resume: the first step after it)");
  AddOptimizerFlags(p);
  p.Option("backend", "NAME", "kernel backend: auto, scalar, avx2, avx512, neon", "auto");
  p.Option("threads", "N", "compute threads (0: all cores)", "0");
  p.Flag("figures",
         "print an '@octet-figures {json}' line per step on stderr (worker telemetry for the "
         "agent and the workbench)");
  p.Flag("json", "print one JSON document on stdout");
  if (Status s = p.Parse(args); !s.ok()) return ParseUsageError(s);
  if (p.help_requested()) {
    std::cout << p.Usage();
    return kExitOk;
  }
  if (p.Given("init")) return RunFixedBatch(p);
  return RunPretrain(p, args);
}

}  // namespace octet::cli

namespace octet::cli {

// `octet worker --job training --model DIR --world-size N --rank R
//  --rendezvous HOST:PORT --transport T --algo A [--port P] [--threads T]
//  [octet train flags...]` — the command line octet-agent's job supervisor
// starts for each rank of a training job. DIR is the run's folder (--out:
// checkpoints and the final model); its config.json is the model when no
// --config follows. The data (--data) and the run's settings come as the
// extra flags. Every rank prints '@octet-figures' lines for the agent.
int RunTrainingWorker(const std::vector<std::string>& args) {
  std::vector<std::string> train_args;
  std::string model;
  bool has_config = false, has_figures = false;
  // Flags come as "--name value" or "--name=value" (the agent passes the
  // latter), as ArgParser takes them.
  auto is = [](const std::string& a, const char* flag) {
    const size_t n = std::strlen(flag);
    return a.compare(0, n, flag) == 0 && (a.size() == n || a[n] == '=');
  };
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    const bool joined = a.find('=') != std::string::npos;
    const bool has_value = joined || i + 1 < args.size();
    if (is(a, "--job") && has_value) {
      if (!joined) ++i;  // "training": the caller dispatched on it
    } else if (is(a, "--model") && has_value) {
      model = joined ? a.substr(a.find('=') + 1) : args[++i];
    } else if (is(a, "--port") && has_value) {
      if (!joined) ++i;  // training serves nothing
    } else {
      if (is(a, "--config")) has_config = true;
      if (a == "--figures") has_figures = true;
      train_args.push_back(a);
    }
  }
  if (model.empty()) {
    std::cerr << "octet worker: --job training needs --model DIR (the run's folder)\n";
    return kExitUsage;
  }
  train_args.insert(train_args.end(), {"--out", model});
  if (!has_config) {
    const std::string config = JoinPath(model, "config.json");
    if (!PathExists(config)) {
      std::cerr << "octet worker: " << config
                << " is missing: put the model's config.json in the run's folder or pass "
                   "--config FILE|PRESET\n";
      return kExitUsage;
    }
    train_args.insert(train_args.end(), {"--config", config});
  }
  if (!has_figures) train_args.push_back("--figures");
  return RunTrain(train_args);
}

}  // namespace octet::cli
