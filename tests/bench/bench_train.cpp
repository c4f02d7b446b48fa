// bench_train: training throughput of Octet's nanochat GPT on this machine,
// and the same model in PyTorch CPU on the same batch and weights.
//
//   bench_train [--preset d12] [--vocab 65536] [--batch 2] [--seq-len 256]
//               [--steps 3] [--warmup 1] [--threads 0] [--torch auto|off] [--json]
//
// One step = forward + backward + an AdamW update, timed end to end; the
// median step gives tokens/s. The PyTorch baseline (tests/bench/
// torch_nanochat.py, Debian's python3-torch: `installers/install-deps.sh
// --bench`) runs the same model definition on the same weights and batch with
// the same number of threads; the first losses of both are printed as a
// sanity check that they computed the same thing. Figures are as measured:
// on a shared machine they are noisy; compare the ratio within one run.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <string>
#include <vector>

#include "bench_stats.h"
#include "octet/base/args.h"
#include "octet/base/deadline.h"
#include "octet/base/file_util.h"
#include "octet/base/json.h"
#include "octet/base/npy.h"
#include "octet/base/subprocess.h"
#include "octet/kernels/backend.h"
#include "octet/trainer/gpt_model.h"
#include "octet/trainer/model_io.h"
#include "octet/trainer/optimizer.h"

using namespace octet;

namespace {

using bench::Median;

// Runs the PyTorch baseline; returns its JSON line or an error.
Result<nlohmann::json> RunTorch(const std::string& python, const std::string& dir, int threads,
                                int steps, int warmup) {
  const std::string script = std::string(OCTET_SOURCE_DIR) + "/tests/bench/torch_nanochat.py";
  std::string out;
  std::mutex mu;
  SpawnOptions o;
  o.argv = {python,
            script,
            dir,
            "--threads",
            std::to_string(threads),
            "--steps",
            std::to_string(steps),
            "--warmup",
            std::to_string(warmup)};
  o.on_output = [&](std::string_view chunk) {
    std::lock_guard<std::mutex> lock(mu);
    out.append(chunk);
  };
  OCTET_ASSIGN_OR_RETURN(auto p, Subprocess::Spawn(o));
  OCTET_ASSIGN_OR_RETURN(ExitStatus st, p->Wait(Deadline::AfterMs(3'600'000)));
  if (!st.success())
    return UnavailableError("PyTorch baseline failed (" + st.ToString() + "): " + out);
  const size_t brace = out.rfind('{');
  if (brace == std::string::npos)
    return UnavailableError("PyTorch baseline printed no JSON: " + out);
  try {
    return nlohmann::json::parse(out.substr(brace));
  } catch (const nlohmann::json::exception& e) {
    return UnavailableError(std::string("PyTorch baseline output: ") + e.what());
  }
}

}  // namespace

int main(int argc, char** argv) {
  ArgParser p("bench_train", "Training tokens/s: Octet vs PyTorch CPU on the same batch.");
  p.Option("preset", "NAME", "model preset (d<depth> or tiny)", "d12");
  p.Option("vocab", "V", "vocabulary size", "65536");
  p.Option("batch", "B", "sequences per step", "2");
  p.Option("seq-len", "T", "sequence length", "256");
  p.Option("steps", "N", "timed steps", "3");
  p.Option("warmup", "N", "untimed steps first", "1");
  p.Option("threads", "N", "threads (0: all cores)", "0");
  p.Option("backend", "NAME", "kernel backend", "auto");
  p.Option("torch", "auto|off", "run the PyTorch baseline", "auto");
  p.Option("python", "PATH", "Python interpreter with torch (Debian's python3-torch)",
           PathExists("/usr/bin/python3") ? "/usr/bin/python3" : "python3");
  p.Flag("json", "print one JSON document on stdout");
  if (Status s = p.Parse(argc, argv); !s.ok()) {
    std::cerr << s.message() << "\n";
    return 2;
  }
  if (p.help_requested()) {
    std::cout << p.Usage();
    return 0;
  }
  const int B = int(*p.GetInt("batch")), T = int(*p.GetInt("seq-len"));
  const int steps = int(*p.GetInt("steps")), warmup = int(*p.GetInt("warmup"));
  auto config = trainer::GptConfig::Preset(p.GetString("preset"), int(*p.GetInt("vocab")), T);
  if (!config.ok()) {
    std::cerr << config.status().message() << "\n";
    return 2;
  }
  auto backend =
      kernels::CreateBackend(p.GetString("backend"), {.threads = int(*p.GetInt("threads"))});
  if (!backend.ok()) {
    std::cerr << backend.status().message() << "\n";
    return 2;
  }
  const int threads = (*backend)->num_threads();
  auto model = trainer::GptModel::Create(*config, backend->get());
  if (!model.ok()) {
    std::cerr << model.status().message() << "\n";
    return 1;
  }
  trainer::GptModel& m = **model;
  m.InitWeights(1);
  // nanochat zero-initialises the head and projections; give them small
  // values so both implementations compute a non-trivial loss to compare.
  uint64_t s = 7;
  for (const auto& t : m.tensors()) {
    float* w = m.param(t);
    bool zero = true;
    for (int64_t i = 0; i < std::min<int64_t>(t.numel, 16); ++i) zero &= w[i] == 0.0f;
    if (!zero) continue;
    for (int64_t i = 0; i < t.numel; ++i) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      w[i] = (float((s >> 40) & 0xffffff) / 16777216.0f - 0.5f) * 0.02f;
    }
  }
  std::vector<int32_t> x(int64_t{B} * T), y(int64_t{B} * T);
  for (size_t i = 0; i < x.size(); ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x[i] = int32_t((s >> 33) % uint64_t(config->vocab_size));
    y[i] = int32_t((s >> 13) % uint64_t(config->vocab_size));
  }

  // The baseline's inputs, written before Octet's steps change the weights.
  char tmpl[] = "/tmp/octet-bench-train-XXXXXX";
  const std::string dir = mkdtemp(tmpl) ? tmpl : "";
  const bool want_torch = p.GetString("torch") != "off" && !dir.empty();
  if (want_torch) {
    Status w = WriteFileAtomic(dir + "/config.json", config->ToJson());
    if (w.ok()) w = trainer::SaveWeights(m, dir + "/model.safetensors");
    if (w.ok()) w = WriteFileAtomic(dir + "/x.npy", NpyBytesI32({B, T}, x.data()));
    if (w.ok()) w = WriteFileAtomic(dir + "/y.npy", NpyBytesI32({B, T}, y.data()));
    if (!w.ok()) {
      std::cerr << w.message() << "\n";
      return 1;
    }
  }

  trainer::OptimizerConfig oc;
  oc.kind = "adamw";
  oc.lr = 1e-4f;
  auto opt = trainer::Optimizer::Create(oc, &m);
  if (!opt.ok()) return 1;
  std::vector<double> step_ms, fwd_ms, bwd_ms, opt_ms;
  float first_loss = 0;
  std::fprintf(stderr, "octet: %s (%lld params, vocab %d), batch %d x %d, %d threads, backend %s\n",
               p.GetString("preset").c_str(), (long long)config->NumParams(), config->vocab_size, B,
               T, threads, std::string((*backend)->name()).c_str());
  for (int i = 0; i < warmup + steps; ++i) {
    const int64_t t0 = NowNs();
    m.ZeroGrads();
    auto loss = m.Forward(x.data(), y.data(), B, T);
    const int64_t t1 = NowNs();
    if (!loss.ok() || !m.Backward(1.0f).ok()) return 1;
    const int64_t t2 = NowNs();
    if (!(*opt)->Step(1.0f).ok()) return 1;
    const int64_t t3 = NowNs();
    if (i == 0) first_loss = *loss;
    std::fprintf(stderr, "  step %d: %.0f ms (forward %.0f, backward %.0f, optimizer %.0f)%s\n", i,
                 (t3 - t0) * 1e-6, (t1 - t0) * 1e-6, (t2 - t1) * 1e-6, (t3 - t2) * 1e-6,
                 i < warmup ? " warm-up" : "");
    if (i >= warmup) {
      step_ms.push_back((t3 - t0) * 1e-6);
      fwd_ms.push_back((t1 - t0) * 1e-6);
      bwd_ms.push_back((t2 - t1) * 1e-6);
      opt_ms.push_back((t3 - t2) * 1e-6);
    }
  }
  const double med = Median(step_ms);
  const double tps = double(B) * T / (med * 1e-3);
  const double flops = config->TrainingFlopsPerToken(T) * tps;
  std::fprintf(stderr, "octet: %.1f tok/s, median step %.0f ms, %.1f GFLOP/s (model FLOPs)\n", tps,
               med, flops * 1e-9);

  nlohmann::ordered_json j;
  j["preset"] = p.GetString("preset");
  j["params"] = config->NumParams();
  j["vocab"] = config->vocab_size;
  j["batch"] = {B, T};
  j["threads"] = threads;
  j["backend"] = std::string((*backend)->name());
  j["octet"] = {{"tokens_per_second", tps},       {"step_ms", med},
                {"forward_ms", Median(fwd_ms)},   {"backward_ms", Median(bwd_ms)},
                {"optimizer_ms", Median(opt_ms)}, {"model_gflops", flops * 1e-9},
                {"first_loss", first_loss}};
  if (want_torch) {
    std::fprintf(stderr, "torch: running tests/bench/torch_nanochat.py ...\n");
    auto torch = RunTorch(p.GetString("python"), dir, threads, steps, warmup);
    if (torch.ok()) {
      const double ttps = (*torch)["tokens_per_second"].get<double>();
      j["torch"] = *torch;
      j["ratio"] = tps / ttps;
      std::fprintf(stderr,
                   "torch %s: %.1f tok/s, median step %.0f ms; first loss %.6f vs octet %.6f\n"
                   "ratio octet/torch: %.2fx\n",
                   (*torch)["torch"].get<std::string>().c_str(), ttps,
                   (*torch)["step_ms"].get<double>(), (*torch)["first_loss"].get<double>(),
                   first_loss, tps / ttps);
    } else {
      j["torch"] = {{"error", torch.status().message()}};
      std::fprintf(stderr, "torch: not measured: %s\n", torch.status().message().c_str());
    }
  }
  std::error_code ec;
  if (!dir.empty()) std::filesystem::remove_all(dir, ec);
  if (p.GetFlag("json")) std::cout << j.dump() << "\n";
  return 0;
}
