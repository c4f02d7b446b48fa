// Decode attention benchmark: one batched decode step's attention for the
// Qwen3-0.6B shape (28 layers, 16 query heads over 8 KV heads of 128; other
// shapes by --layers, --heads and --head-dim) with C sequences each attending to a
// `context`-position cache of its own (float32: 0.94 GB per step at C = 8 and 512 positions,
// streamed from memory as in serving), through KernelBackend::Attention as the engine calls it
// (head-major cache). Backends are interleaved round by round (the machine is shared: separate runs
// are not comparable); every round is printed, the best counts. Table on stderr, JSON on stdout. (A
// plain read loop of the same bytes was slower than the prefetching kernels here, so it is no
// ceiling: compare with the STREAM figures of octet_bench_engine instead.)
//
//   bench_attention [--threads 2] [--concurrency 8] [--context 512]
//                   [--kv-dtype f32|f16] [--rounds 5] [--backends avx2,avx512]
//                   [--layers 28] [--heads 16:8] [--head-dim 128]
//
// nanochat-demo's verify step, say: --layers 4 --heads 2:2 --head-dim 64
// --concurrency 5 --context 100 --threads 1 (add layers for a longer step).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "octet/base/args.h"
#include "octet/base/deadline.h"
#include "octet/base/json.h"
#include "octet/kernels/backend.h"

using namespace octet;
using namespace octet::kernels;

int main(int argc, char** argv) {
  ArgParser args("bench_attention",
                 "Decode attention of a Qwen3-0.6B-shaped step against a plain read of its cache.");
  args.Option("threads", "N", "backend threads", "2");
  args.Option("concurrency", "C", "sequences in the step", "8");
  args.Option("context", "N", "cached positions each sequence attends to", "512");
  args.Option("kv-dtype", "f32|f16", "KV cache element type", "f32");
  args.Option("rounds", "N", "interleaved rounds (the best round is reported)", "5");
  args.Option("backends", "A,B", "kernel backends to compare", "avx2,avx512");
  args.Option("layers", "N", "layers in the step", "28");
  args.Option("heads", "Q:KV", "query heads and KV heads", "16:8");
  args.Option("head-dim", "N", "features a head", "128");
  if (Status s = args.Parse(argc, argv); !s.ok()) {
    std::cerr << "bench_attention: " << s.message() << "\n";
    return 2;
  }
  if (args.help_requested()) {
    std::cout << args.Usage();
    return 0;
  }
  auto threads = args.GetInt("threads");
  auto conc = args.GetInt("concurrency");
  auto context = args.GetInt("context");
  auto rounds = args.GetInt("rounds");
  auto dtype = ParseKvDtype(args.GetString("kv-dtype"));
  if (!threads.ok() || !conc.ok() || !context.ok() || !rounds.ok() || *threads < 1 || *conc < 1 ||
      *context < 1 || *rounds < 1) {
    std::cerr << "bench_attention: --threads, --concurrency, --context and --rounds take "
                 "positive integers\n";
    return 2;
  }
  if (!dtype.ok()) {
    std::cerr << "bench_attention: " << dtype.status().message() << "\n";
    return 2;
  }
  auto layers = args.GetInt("layers");
  auto head_dim = args.GetInt("head-dim");
  int64_t heads = 0, kv_heads = 0;
  {
    const std::string h = args.GetString("heads");
    const size_t colon = h.find(':');
    char* end = nullptr;
    if (colon != std::string::npos) {
      heads = std::strtoll(h.c_str(), &end, 10);
      if (end != h.c_str() + colon) heads = 0;
      kv_heads = std::strtoll(h.c_str() + colon + 1, &end, 10);
      if (*end != '\0') kv_heads = 0;
    }
  }
  if (!layers.ok() || !head_dim.ok() || *layers < 1 || *head_dim < 1 || *head_dim > 1024 ||
      heads < 1 || kv_heads < 1 || heads % kv_heads != 0) {
    std::cerr << "bench_attention: --layers takes a positive integer, --head-dim 1 to 1024, "
                 "--heads Q:KV with KV dividing Q (got \""
              << args.GetString("heads") << "\")\n";
    return 2;
  }
  const int64_t kLayers = *layers, kHeads = heads, kKvHeads = kv_heads, kHeadDim = *head_dim;
  std::vector<std::string> names;
  for (const std::string& n : args.GetList("backends")) names.push_back(n);
  std::vector<std::unique_ptr<KernelBackend>> backends;
  for (const std::string& n : names) {
    auto b = CreateBackend(n, BackendOptions{static_cast<int>(*threads)});
    if (!b.ok()) {
      std::cerr << "bench_attention: " << b.status().message() << "\n";
      return 2;
    }
    backends.push_back(std::move(*b));
  }

  const int64_t c = *conc, n_keys = *context + 1;  // the new token attends to itself too
  const int64_t elem = KvDtypeBytes(*dtype);
  // One block per (layer, sequence): K then V, each [kv_heads, n_keys, head_dim].
  const int64_t per_cache = kKvHeads * n_keys * kHeadDim * elem;
  const int64_t total_bytes = kLayers * c * 2 * per_cache;
  std::vector<uint64_t> cache((total_bytes + 7) / 8);
  uint64_t s = 0x9E3779B97F4A7C15ull;
  for (auto& w : cache) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    // Four halves (or two floats) of modest magnitude: exponent bits fixed.
    w = elem == 2 ? ((s >> 8) & 0x03ff03ff03ff03ffull) | 0x3000300030003000ull
                  : ((s >> 12) & 0x007fffff007fffffull) | 0x3c0000003c000000ull;
  }
  const uint8_t* base = reinterpret_cast<const uint8_t*>(cache.data());
  std::vector<float> q(c * kHeads * kHeadDim), out(c * kHeads * kHeadDim);
  for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<float>((i * 7919) % 97) / 97.0f - 0.5f;
  std::vector<int32_t> positions(c, static_cast<int32_t>(*context));
  std::vector<AttentionSequence> seqs(c);

  auto step = [&](KernelBackend& b) {
    for (int64_t l = 0; l < kLayers; ++l) {
      for (int64_t i = 0; i < c; ++i) {
        const uint8_t* kv = base + (l * c + i) * 2 * per_cache;
        seqs[i] = AttentionSequence{
            i, 1, kv, kv + per_cache, &positions[i], *dtype, kHeadDim, n_keys * kHeadDim};
      }
      AttentionArgs a;
      a.q = q.data();
      a.q_row_stride = kHeads * kHeadDim;
      a.out = out.data();
      a.out_row_stride = kHeads * kHeadDim;
      a.n_heads = kHeads;
      a.n_kv_heads = kKvHeads;
      a.head_dim = kHeadDim;
      a.scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
      a.sequences = seqs.data();
      a.n_sequences = c;
      b.Attention(a);
    }
  };

  std::map<std::string, std::vector<double>> rounds_ms;  // per backend, per round
  for (int64_t r = 0; r < *rounds; ++r) {
    std::fprintf(stderr, "round %lld:", static_cast<long long>(r + 1));
    for (size_t bi = 0; bi < backends.size(); ++bi) {
      step(*backends[bi]);  // warm (pages touched, scratch sized)
      const int64_t t0 = NowNs();
      step(*backends[bi]);
      const double ms = (NowNs() - t0) * 1e-6;
      std::fprintf(stderr, "  %s %.1f ms", names[bi].c_str(), ms);
      rounds_ms[names[bi]].push_back(ms);
    }
    std::fprintf(stderr, "\n");
  }
  std::fprintf(stderr,
               "%-12s %10s %10s   (c=%lld, context %lld, %s KV, %.2f GB per step; %lld layers, "
               "%lld:%lld heads of %lld)\n",
               "op", "ms", "GB/s", static_cast<long long>(c), static_cast<long long>(*context),
               std::string(KvDtypeName(*dtype)).c_str(), total_bytes * 1e-9,
               static_cast<long long>(kLayers), static_cast<long long>(kHeads),
               static_cast<long long>(kKvHeads), static_cast<long long>(kHeadDim));
  nlohmann::json results = nlohmann::json::object();
  for (const std::string& name : names) {
    const std::vector<double>& all = rounds_ms[name];
    const double ms = *std::min_element(all.begin(), all.end());
    std::fprintf(stderr, "%-12s %10.2f %10.2f\n", name.c_str(), ms, total_bytes / ms * 1e-6);
    results[name] = {{"best_ms", ms}, {"gb_per_s", total_bytes / ms * 1e-6}, {"rounds_ms", all}};
  }
  nlohmann::json j = {{"concurrency", c},
                      {"context", *context},
                      {"kv_dtype", KvDtypeName(*dtype)},
                      {"threads", *threads},
                      {"bytes_per_step", total_bytes},
                      {"results", results},
                      {"layers", kLayers},
                      {"heads", kHeads},
                      {"kv_heads", kKvHeads},
                      {"head_dim", kHeadDim}};
  std::cout << j.dump(2) << "\n";
  return 0;
}
