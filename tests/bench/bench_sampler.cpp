// The sampler's cost per token over a real vocabulary (151,669 ids, Qwen3's),
// for each way a request can ask to sample: greedy, temperature alone (what
// OpenAI clients send by default), top-p, top-k, top-k with top-p, and the
// same with a repetition penalty. Logits are drawn like a trained model's
// (a few dozen strong candidates over a wide normal floor). Prints
// microseconds per token per mode and, with --json, the same as JSON.
//
//   bench_sampler [--vocab N] [--tokens N] [--rounds R] [--json]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "octet/base/json.h"
#include "octet/engine/generate.h"
#include "octet/kernels/backend.h"

using namespace octet;
using namespace octet::engine;

namespace {

struct Mode {
  const char* name;
  SamplingParams params;
};

SamplingParams Params(float temperature, int64_t top_k, float top_p, float penalty) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.repetition_penalty = penalty;
  p.seed = 1;
  return p;
}

// Microseconds per Sample call over `rows` logit rows.
double TimeMode(const Mode& m, const std::vector<std::vector<float>>& rows, int64_t vocab,
                kernels::KernelBackend& ops, int64_t* checksum) {
  Sampler s(m.params);
  s.SetPrompt({1, 2, 3, 400, 5000});
  const auto t0 = std::chrono::steady_clock::now();
  for (const auto& r : rows) *checksum += s.Sample(r.data(), vocab, ops);
  const auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::micro>(t1 - t0).count() / double(rows.size());
}

}  // namespace

int main(int argc, char** argv) {
  int64_t vocab = 151'669;
  int tokens = 200, rounds = 3;
  bool as_json = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--json") {
      as_json = true;
    } else if (i + 1 < argc && a == "--vocab") {
      vocab = std::max<int64_t>(64, std::atoll(argv[++i]));
    } else if (i + 1 < argc && a == "--tokens") {
      tokens = std::max(1, std::atoi(argv[++i]));
    } else if (i + 1 < argc && a == "--rounds") {
      rounds = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: bench_sampler [--vocab N] [--tokens N] [--rounds R] [--json]\n");
      return 2;
    }
  }
  auto backend = kernels::CreateBackend("auto", {1});
  if (!backend.ok()) {
    std::fprintf(stderr, "bench_sampler: %s\n", backend.status().ToString().c_str());
    return 1;
  }
  kernels::KernelBackend& ops = **backend;

  // A trained model's logits: a normal floor and a few dozen strong ids.
  std::mt19937 rng(7);
  std::normal_distribution<float> floor_noise(-2.0f, 2.5f), strong(12.0f, 2.0f);
  std::uniform_int_distribution<int64_t> any(0, vocab - 1);
  std::vector<std::vector<float>> rows(static_cast<size_t>(tokens));
  for (auto& r : rows) {
    r.resize(static_cast<size_t>(vocab));
    for (float& x : r) x = floor_noise(rng);
    for (int i = 0; i < 40; ++i) r[static_cast<size_t>(any(rng))] = strong(rng);
  }

  const Mode modes[] = {
      {"greedy", Params(0.0f, 0, 1.0f, 1.0f)},
      {"temperature 0.7", Params(0.7f, 0, 1.0f, 1.0f)},
      {"temperature 0.7, top-p 0.9", Params(0.7f, 0, 0.9f, 1.0f)},
      {"temperature 0.7, top-k 20", Params(0.7f, 20, 1.0f, 1.0f)},
      {"temperature 0.7, top-k 20, top-p 0.8", Params(0.7f, 20, 0.8f, 1.0f)},
      {"temperature 0.7, top-p 0.9, penalty 1.1", Params(0.7f, 0, 0.9f, 1.1f)},
  };
  // Rounds alternate over the modes; the median round per mode is reported.
  std::vector<std::vector<double>> us(std::size(modes));
  int64_t checksum = 0;
  for (int r = 0; r < rounds; ++r) {
    for (size_t m = 0; m < std::size(modes); ++m) {
      us[m].push_back(TimeMode(modes[m], rows, vocab, ops, &checksum));
    }
  }
  nlohmann::json out = {{"vocab", vocab}, {"tokens", tokens}, {"rounds", rounds}};
  for (size_t m = 0; m < std::size(modes); ++m) {
    std::sort(us[m].begin(), us[m].end());
    const double med = us[m][us[m].size() / 2];
    out["us_per_token"][modes[m].name] = med;
    if (!as_json) std::printf("%-42s %9.1f us/token\n", modes[m].name, med);
  }
  if (as_json) std::printf("%s\n", out.dump(2).c_str());
  std::fprintf(stderr, "(checksum %lld)\n", static_cast<long long>(checksum));
  return 0;
}
