// Batched decode steps of one checkpoint under several kernel backends,
// interleaved in one process: for each round, each concurrency c and each
// backend, `--steps` forwards of c sequences (one token each) that sit at
// position `--context` of a KV cache (so attention reads as much as after a
// prompt of that length). The machine is shared and its load moves from minute
// to minute; measuring the backends round by round in one run keeps the
// comparison fair where two separate runs are not. The best round counts.
// Prints a table on stderr and one JSON document on stdout.
//
//   bench_decode_steps [--model DIR] [--backends avx512,avx512-amx] [--threads 2]
//                      [--context 512] [--concurrency 1,8] [--steps 16] [--rounds 3]
//                      [--kv-dtype f32|f16]
//
// --backends defaults to those of avx512 and avx512-amx this CPU runs (else
// auto). DIR defaults to the checkpoint bench_serving writes (a random-weight
// Qwen3-0.6B, BF16); OCTET_PROFILE_DECODE=1 adds the engine's per-op log.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "octet/base/args.h"
#include "octet/base/deadline.h"
#include "octet/base/json.h"
#include "octet/engine/model.h"
#include "octet/kernels/backend.h"

using namespace octet;
using namespace octet::engine;

int main(int argc, char** argv) {
  ArgParser p("bench_decode_steps",
              "Batched decode steps per kernel backend, interleaved in one process.");
  p.Option("model", "DIR", "checkpoint folder", "/tmp/octet-bench-serving/qwen3-0.6b-random")
      .Option("backends", "A,B,...",
              "kernel backends (default: avx512 and avx512-amx, those this CPU runs; else auto)")
      .Option("threads", "N", "threads per backend", "2")
      .Option("context", "N", "cached positions before the measured steps", "512")
      .Option("concurrency", "C,...", "sequences per step", "1,8")
      .Option("steps", "N", "decode steps per measurement", "16")
      .Option("rounds", "N", "interleaved rounds (the best counts)", "3")
      .Option("kv-dtype", "f32|f16", "KV cache element type", "f32");
  if (Status s = p.Parse(argc, argv); !s.ok()) {
    std::cerr << "bench_decode_steps: " << s.message() << "\n";
    return 2;
  }
  if (p.help_requested()) {
    std::cout << p.Usage();
    return 0;
  }
  auto threads = p.GetInt("threads");
  auto context = p.GetInt("context");
  auto conc = p.GetIntList("concurrency");
  auto steps = p.GetInt("steps");
  auto rounds = p.GetInt("rounds");
  auto kv = kernels::ParseKvDtype(p.GetString("kv-dtype"));
  if (!threads.ok() || !context.ok() || !conc.ok() || conc->empty() || !steps.ok() ||
      !rounds.ok() || !kv.ok() || *steps < 1 || *context < 0) {
    std::cerr << "bench_decode_steps: bad --threads/--context/--concurrency/--steps/--rounds/"
                 "--kv-dtype\n";
    return 2;
  }
  const int64_t max_c = *std::max_element(conc->begin(), conc->end());
  struct Entry {
    std::string backend;
    std::unique_ptr<Model> model;
    std::unique_ptr<KvCache> cache;
  };
  std::vector<Entry> entries;
  std::vector<std::string> backends = p.GetList("backends");
  if (!p.Given("backends")) {
    for (const kernels::BackendInfo& b : kernels::ProbeBackends()) {
      if (b.available && (b.name == "avx512" || b.name == "avx512-amx")) backends.push_back(b.name);
    }
    if (backends.empty()) backends.push_back("auto");
  }
  for (const std::string& name : backends) {
    LoadOptions lo;
    lo.backend = name;
    lo.threads = static_cast<int>(*threads);
    auto m = Model::Load(p.GetString("model"), lo);
    if (!m.ok()) {
      std::cerr << "bench_decode_steps: " << m.status().ToString() << "\n";
      return 1;
    }
    Entry e;
    e.backend = name;
    auto cache = (*m)->NewKvCache(static_cast<int>(max_c), *context + *steps + 2, *kv);
    if (!cache.ok()) {
      std::fprintf(stderr, "bench_decode_steps: %s\n", cache.status().ToString().c_str());
      return 1;
    }
    e.cache = std::make_unique<KvCache>(std::move(*cache));
    e.model = std::move(*m);
    entries.push_back(std::move(e));
  }
  // best[(entry, c)]: the highest tokens/s over the rounds.
  std::map<std::pair<size_t, int64_t>, double> best;
  ForwardOutput out;
  for (int64_t round = 0; round < *rounds; ++round) {
    for (int64_t c : *conc) {
      for (size_t e = 0; e < entries.size(); ++e) {
        Model& m = *entries[e].model;
        KvCache& cache = *entries[e].cache;
        std::vector<SequenceChunk> b(c);
        for (int64_t i = 0; i < c; ++i) {
          b[i].slot = static_cast<int>(i);
          cache.set_length(static_cast<int>(i), *context);
          b[i].start_pos = *context;
          b[i].tokens = {static_cast<int32_t>(1000 + 17 * i)};
        }
        const int64_t t0 = NowNs();
        for (int64_t s = 0; s < *steps; ++s) {
          if (Status st = m.Forward(b, cache, &out); !st.ok()) {
            std::cerr << "bench_decode_steps: " << st.ToString() << "\n";
            return 1;
          }
          for (int64_t i = 0; i < c; ++i) {
            b[i].start_pos = cache.length(static_cast<int>(i));
            b[i].tokens = {static_cast<int32_t>(m.backend().Argmax(out.Last(i), out.vocab))};
          }
        }
        const double tps = double(c * *steps) / ((NowNs() - t0) * 1e-9);
        double& slot = best[{e, c}];
        slot = std::max(slot, tps);
      }
    }
  }
  nlohmann::json j;
  j["model"] = p.GetString("model");
  j["context"] = *context;
  j["threads"] = *threads;
  j["kv_dtype"] = p.GetString("kv-dtype");
  std::fprintf(stderr, "%-12s %4s %10s %10s\n", "backend", "c", "tok/s", "step ms");
  for (size_t e = 0; e < entries.size(); ++e) {
    nlohmann::json row = {{"backend", entries[e].backend}};
    for (int64_t c : *conc) {
      const double tps = best[{e, c}];
      std::fprintf(stderr, "%-12s %4lld %10.2f %10.2f\n", entries[e].backend.c_str(),
                   static_cast<long long>(c), tps, c / tps * 1e3);
      row["tps"][std::to_string(c)] = tps;
    }
    const int64_t lo = conc->front(), hi = conc->back();
    if (lo != hi && best[{e, lo}] > 0) {
      const double q = best[{e, hi}] / best[{e, lo}];
      std::fprintf(stderr, "%-12s c%lld / c%lld = %.2f\n", entries[e].backend.c_str(),
                   static_cast<long long>(hi), static_cast<long long>(lo), q);
      row["ratio"] = q;
    }
    j["results"].push_back(row);
  }
  std::cout << j.dump(2) << "\n";
  return 0;
}
