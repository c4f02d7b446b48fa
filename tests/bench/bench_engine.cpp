// Engine benchmark: writes random-weight checkpoints with the real shapes of
// Qwen3-0.6B (BF16 and ModelOpt NVFP4), Llama-3.2-1B (BF16) and the layers of
// Qwen3-30B-A3B (a mixture of experts, NVFP4 experts, as many of its 48
// layers as fit in half of this machine's available memory), then measures
//   prefill tok/s and GFLOP/s for a 512-token prompt,
//   decode tok/s for 128 tokens (one sequence, from an empty cache; with
//   --repeats N, N such runs and the one with the median roofline share),
//   bytes read per decoded token (weights + KV cache),
//   this machine's memory bandwidth (STREAM-style copy/scale/add/triad and a
//   read-only sweep, same threads, same program),
//   and decode tok/s as a percentage of the roofline bandwidth / bytes-per-token
//   (for a mixture of experts, the bytes of the experts a token is routed to),
//   and aggregate decode tok/s with c sequences per step (the median of
//   --repeats runs of each c), and its ratio to c = 1.
// Prints a table on stderr and one JSON document on stdout.
//
//   octet_bench_engine [--threads 2] [--dir /tmp/octet-bench] [--models a,b]
//                      [--prompt 512] [--decode 128] [--repeats 1] [--backend auto]
//                      [--moe-layers 0] [--layers 0] [--quantize off|nvfp4] [--moe-ab N]
//
// --moe-ab N (mixture-of-experts models): N more rounds, each a c1 decode run
// (and a batched one at the largest --concurrency) with the chosen experts
// in grouped backend calls and one with a matmul call per expert
// (Model::set_grouped_experts), in alternating order; the median tok/s of
// each, the per-round ratios and their median.
//
// With a device backend (--backend cuda) the roofline bandwidth is the
// device's, measured through the backend's own ops (Scale in place: copy-like
// read + write; Add: two reads, one write) on device buffers of the same size.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "octet/base/args.h"
#include "octet/base/deadline.h"
#include "octet/base/file_util.h"
#include "octet/base/json.h"
#include "octet/base/mem_info.h"
#include "octet/base/xorshift_rng.h"
#include "octet/engine/generate.h"
#include "octet/engine/model.h"
#include "octet/kernels/backend.h"
#include "octet/kernels/backends.h"
#include "octet/kernels/thread_pool.h"
#include "random_checkpoint.h"

using namespace octet;
using namespace octet::engine;

namespace {

// ---- random-weight checkpoints -----------------------------------------------

struct Shape {
  std::string name;  // folder name
  RandomModelShape shape;
  int64_t full_layers = 0;  // the real model's layer count, where the shape takes fewer
};

const std::vector<Shape>& Shapes() {
  static const std::vector<Shape> shapes = [] {
    RandomModelShape qwen = RandomModelShape::Qwen3_0_6B();
    RandomModelShape qwen_fp4 = qwen;
    qwen_fp4.nvfp4 = true;
    RandomModelShape llama;  // Llama-3.2-1B
    llama.architecture = "LlamaForCausalLM";
    llama.vocab_size = 128256;
    llama.hidden_size = 2048;
    llama.intermediate_size = 8192;
    llama.num_layers = 16;
    llama.num_heads = 32;
    llama.num_kv_heads = 8;
    llama.head_dim = 64;
    llama.rope_theta = 5e5;
    llama.tie_word_embeddings = true;
    llama.llama3_rope_scaling = true;
    RandomModelShape qwen8b = qwen;  // Qwen3-8B
    qwen8b.hidden_size = 4096;
    qwen8b.intermediate_size = 12288;
    qwen8b.num_layers = 36;
    qwen8b.num_heads = 32;
    qwen8b.num_kv_heads = 8;
    qwen8b.tie_word_embeddings = false;
    RandomModelShape qwen8b_fp4 = qwen8b;
    qwen8b_fp4.nvfp4 = true;
    return std::vector<Shape>{{"qwen3-0.6b-bf16", qwen},
                              {"qwen3-0.6b-nvfp4", qwen_fp4},
                              {"llama3.2-1b-bf16", llama},
                              {"qwen3-8b-bf16", qwen8b},  // ~16.4 GB
                              {"qwen3-8b-nvfp4", qwen8b_fp4},
                              // Layer count chosen at run time (MoeLayers).
                              {"qwen3-30b-a3b-nvfp4", RandomModelShape::Qwen3_30B_A3B(0), 48}};
  }();
  return shapes;
}

// Bytes a layer of a mixture-of-experts shape holds in memory once loaded:
// its checkpoint bytes (mapped, in the page cache) and the NVFP4 tile copy of
// its experts (LoadOptions::nvfp4_tiles). `fixed`: the layer-independent part
// (embeddings, lm_head).
struct MoeFootprint {
  int64_t per_layer = 0, fixed = 0;
};
MoeFootprint MoeBytes(const RandomModelShape& s) {
  const int64_t H = s.hidden_size, F = s.moe_intermediate_size;
  const int64_t nvfp4 = 3 * H * F / 2 + 3 * H * F / 16;  // packed + e4m3 scales, one expert
  const int64_t attention = 2 * H * s.head_dim * (s.num_heads + s.num_kv_heads) * 2;  // BF16
  MoeFootprint f;
  f.per_layer = s.num_experts * (2 * nvfp4 + 16) + attention + s.num_experts * H * 2;
  f.fixed = s.vocab_size * H * 2 * (s.tie_word_embeddings ? 1 : 2);
  return f;
}

// The layer count of a mixture-of-experts shape: `requested` when > 0, else
// as many of the model's `full` layers as fit in half of MemAvailable (the
// machine is shared: the other half stays for other work and the page cache).
// `existing`: the layers of a checkpoint already written (0: none), kept when
// it fits and is within two layers of what fits, so a small change in free
// memory does not rewrite gigabytes.
Result<int64_t> MoeLayers(const RandomModelShape& s, int64_t full, int64_t requested,
                          int64_t existing) {
  if (requested > 0) return requested;
  OCTET_ASSIGN_OR_RETURN(MemInfo mi, ReadMemInfo());
  const MoeFootprint f = MoeBytes(s);
  const int64_t budget = static_cast<int64_t>(mi.available_bytes / 2) - f.fixed;
  const int64_t fit = std::min<int64_t>(full, budget / f.per_layer);
  if (fit < 1) {
    return ResourceExhaustedError(
        "not even one layer of the mixture-of-experts shape fits in half of MemAvailable (" +
        std::to_string(mi.available_bytes >> 20) + " MiB); pass --moe-layers to force a count");
  }
  if (existing > 0 && existing <= fit && existing >= fit - 2) return existing;
  return fit;
}

// Prompt ids: uniform in [-1, 1), mapped onto the vocabulary.
using Rng = XorShiftRng;

// ---- timing ------------------------------------------------------------------

// Wall time and this process's CPU time. On a machine shared with other work,
// wall-clock rates drop with our share of the cores; CPU-time rates
// (work / (cpu seconds / threads)) estimate the rate on dedicated cores. Both
// are reported; the roofline percentage is given for each, computed from
// figures measured the same way.
double CpuSeconds() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

struct Stopwatch {
  int64_t wall0 = NowNs();
  double cpu0 = CpuSeconds();
  double wall() const { return (NowNs() - wall0) * 1e-9; }
  double cpu(int threads) const { return (CpuSeconds() - cpu0) / threads; }
};

// ---- STREAM-style bandwidth --------------------------------------------------

struct Bandwidth {
  // GB/s, best of the repetitions. copy/scale/add/triad count STREAM's bytes
  // (reads + writes, no write-allocate); `read` is the engine's own F32 GEMV
  // streaming a matrix of the same size (read-only, the access pattern of decode).
  double copy = 0, scale = 0, add = 0, triad = 0, read = 0;
  double best_cpu = 0;  // best of all five on CPU time (see Stopwatch)
  double best() const { return std::max({copy, scale, add, triad, read}); }
};

Bandwidth MeasureBandwidth(int threads, int64_t n, int reps) {
  kernels::ThreadPool pool(threads);
  auto backend = std::move(*kernels::CreateBackend("auto", {threads}));
  std::vector<float> a(n), b(n), c(n);
  const int64_t chunk = 1 << 18;
  const int64_t tasks = (n + chunk - 1) / chunk;
  auto par = [&](auto fn) {
    pool.ParallelFor(tasks, [&](int64_t t, int) {
      const int64_t i0 = t * chunk, i1 = std::min(n, i0 + chunk);
      fn(a.data() + i0, b.data() + i0, c.data() + i0, i1 - i0);
    });
  };
  par([&](float* pa, float* pb, float* pc, int64_t len) {
    for (int64_t i = 0; i < len; ++i) pa[i] = 1.0f, pb[i] = 2.0f, pc[i] = 0.0f;
  });
  // The read sweep: y[1, rows] = x[1, 4096] · A[rows, 4096]ᵀ over all of `a`.
  const int64_t cols = 4096, rows = n / cols;
  const auto mat = kernels::WeightMatrix::Dense(kernels::WeightFormat::kF32, a.data(), rows, cols);
  std::vector<float> x(cols, 1.0f), y(rows);
  Bandwidth bw;
  const double bytes = static_cast<double>(n) * sizeof(float);
  auto run = [&](double moved, double* best, auto fn) {
    Stopwatch sw;
    fn();
    *best = std::max(*best, moved / sw.wall() / 1e9);
    bw.best_cpu = std::max(bw.best_cpu, moved / sw.cpu(threads) / 1e9);
  };
  for (int rep = 0; rep < reps; ++rep) {
    run(2 * bytes, &bw.copy, [&] {
      par([](float* pa, float*, float* pc, int64_t len) {
        std::memcpy(pc, pa, len * sizeof(float));
      });
    });
    run(2 * bytes, &bw.scale, [&] {
      par([](float*, float* pb, float* pc, int64_t len) {
        for (int64_t i = 0; i < len; ++i) pb[i] = 3.0f * pc[i];
      });
    });
    run(3 * bytes, &bw.add, [&] {
      par([](float* pa, float* pb, float* pc, int64_t len) {
        for (int64_t i = 0; i < len; ++i) pc[i] = pa[i] + pb[i];
      });
    });
    run(3 * bytes, &bw.triad, [&] {
      par([](float* pa, float* pb, float* pc, int64_t len) {
        for (int64_t i = 0; i < len; ++i) pa[i] = pb[i] + 3.0f * pc[i];
      });
    });
    run(double(rows) * cols * sizeof(float), &bw.read,
        [&] { backend->Matmul(x.data(), 1, cols, mat, y.data(), rows, false); });
  }
  return bw;
}

// The device's bandwidth through `be`'s ops (a device backend): Scale in place
// moves 2n floats, Add 3n; best of `reps`. copy/scale hold the Scale figure,
// add/triad the Add one; read is left 0.
Bandwidth MeasureDeviceBandwidth(kernels::KernelBackend& be, int64_t n, int reps) {
  Bandwidth bw;
  auto a = be.Allocate(n * 4), b = be.Allocate(n * 4), c = be.Allocate(n * 4);
  if (!a.ok() || !b.ok() || !c.ok()) return bw;
  float* pa = a->as<float>();
  float* pb = b->as<float>();
  float* pc = c->as<float>();
  be.Fill(pa, n, 1.0f);
  be.Fill(pb, n, 2.0f);
  if (!be.Synchronize().ok()) return bw;
  const double bytes = static_cast<double>(n) * sizeof(float);
  for (int rep = 0; rep < reps; ++rep) {
    Stopwatch s1;
    be.Scale(pa, n, 1.0f);
    if (!be.Synchronize().ok()) return bw;
    bw.copy = bw.scale = std::max(bw.copy, 2 * bytes / s1.wall() / 1e9);
    Stopwatch s2;
    be.Add(pa, pb, n, pc);
    if (!be.Synchronize().ok()) return bw;
    bw.add = bw.triad = std::max(bw.add, 3 * bytes / s2.wall() / 1e9);
  }
  bw.best_cpu = bw.best();
  return bw;
}

// The greedy token of host logits (ForwardOutput is host memory whatever the
// backend): first index of the largest value.
int32_t HostArgmax(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (x[i] > x[best]) best = i;
  }
  return static_cast<int32_t>(best);
}

// ---- one model -----------------------------------------------------------------

// One decode run of n_decode tokens and the bandwidth around it.
struct DecodeRun {
  double tps = 0, tps_cpu = 0;
  double bandwidth_gbs = 0, bandwidth_gbs_cpu = 0;  // the better of just before and just after
  double kv_bytes_per_token = 0;
  double roofline_tps = 0, roofline_pct = 0, roofline_pct_cpu = 0;
};

struct ModelResult {
  std::string name, weights;
  int64_t layers = 0, full_layers = 0;  // full_layers: the real model's, where it has more
  std::vector<DecodeRun> decode_runs;   // in order
  DecodeRun decode;                     // the run with the median roofline share
  int64_t weight_bytes_per_token = 0;
  double prefill_tps = 0, prefill_gflops = 0, prefill_seconds = 0;
  // Batched decode: aggregate tok/s with c sequences decoding in one step
  // each, the median run (the lower middle one of an even count) of those in
  // batched_runs (wall, CPU time), one list per batch size in the order of
  // batched_tps.
  std::vector<std::pair<int64_t, double>> batched_tps, batched_tps_cpu;
  std::vector<std::vector<std::pair<double, double>>> batched_runs;
  // The same on CPU time (estimates for dedicated cores; see Stopwatch).
  double prefill_tps_cpu = 0;
  // --moe-ab: per round, tok/s with the grouped expert calls (on) and with a
  // call per expert (off), at c1 and at c = ab_batch.
  std::vector<double> ab_on, ab_off, ab_on_batch, ab_off_batch;
  int64_t ab_batch = 0;
};

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// `concurrency`: batch sizes for the aggregate decode figure (c sequences,
// one token each per step, weights read once per step for all of them).
Result<ModelResult> RunModel(const Shape& s, const std::string& dir, int threads,
                             kernels::KvDtype kv_dtype, int64_t decode_context, int64_t n_prompt,
                             int64_t n_decode, int repeats, int64_t stream_n,
                             const std::vector<int64_t>& concurrency, bool nvfp4_tiles,
                             const std::string& backend, LoadQuantize quantize, int moe_ab) {
  LoadOptions lo;
  lo.threads = threads;
  lo.backend = backend;
  lo.nvfp4_tiles = nvfp4_tiles;
  lo.quantize = quantize;
  OCTET_ASSIGN_OR_RETURN(auto model, Model::Load(dir, lo));
  Model& m = *model;
  const ModelConfig& c = m.config();
  ModelResult r;
  r.name = s.name;
  r.layers = c.num_layers;
  r.full_layers = std::max(s.full_layers, c.num_layers);
  r.weights = m.WeightFormatSummary();
  r.weight_bytes_per_token = m.WeightBytesPerToken();
  KvCache cache = *m.NewKvCache(2, n_prompt + n_decode + 1, kv_dtype);
  Rng rng(7);
  std::vector<int32_t> prompt(n_prompt);
  for (auto& t : prompt) t = static_cast<int32_t>((rng.Next() * 0.5f + 0.5f) * (c.vocab_size - 1));

  // Prefill: one forward over the whole prompt (logits for the last token only).
  ForwardOutput out;
  std::vector<SequenceChunk> batch(1);
  batch[0].slot = 0;
  batch[0].tokens = prompt;
  Stopwatch prefill;
  OCTET_RETURN_IF_ERROR(m.Forward(batch, cache, &out));
  r.prefill_seconds = prefill.wall();
  r.prefill_tps = n_prompt / r.prefill_seconds;
  r.prefill_tps_cpu = n_prompt / prefill.cpu(threads);
  // FLOPs: 2 per weight per token in the layer matmuls, attention QK and PV
  // over the causal prefix, and the lm_head for the one logits row.
  // A mixture-of-experts layer counts its router, shared expert and
  // experts_per_token of its experts (each token's share).
  double linear = 0;
  auto weights = [](const Linear& li) { return double(li.weight.rows) * li.weight.cols; };
  auto mlp = [&](const GatedMlp& g) { return weights(g.gate) + weights(g.up) + weights(g.down); };
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const LayerWeights& L = m.layer(l);
    for (const Linear* li : {&L.q, &L.k, &L.v, &L.o, &L.gate, &L.up, &L.down}) {
      linear += weights(*li);
    }
    if (L.is_moe()) {
      linear += weights(L.moe.router) + mlp(L.moe.shared) +
                mlp(L.moe.experts[0]) * double(c.moe.experts_per_token);
    }
  }
  const double attn =
      2.0 * 2.0 * c.num_layers * c.num_heads * c.head_dim * (double(n_prompt) * (n_prompt + 1) / 2);
  const double flops = 2.0 * linear * n_prompt + attn + 2.0 * c.vocab_size * c.hidden_size;
  r.prefill_gflops = flops / r.prefill_seconds / 1e9;

  // Decode: a fresh sequence, one token per step, greedy, `repeats` times.
  // The bandwidth is measured right before each run and again right after it
  // (other processes' load changes over a run), the better of the two: a
  // reading that came out low would flatter the decode's share of the
  // roofline. The run with the median share is reported; on a shared machine
  // one run can land in a minute of others' memory traffic.
  const int64_t kvd = m.local_kv_heads() * c.head_dim;
  const bool device = m.backend().memory_kind() == kernels::MemoryKind::kDevice;
  auto measure = [&] {
    return device ? MeasureDeviceBandwidth(m.backend(), stream_n, 3)
                  : MeasureBandwidth(threads, stream_n, 3);
  };
  Bandwidth before = measure();
  for (int rep = 0; rep < repeats; ++rep) {
    batch[0].slot = 1;
    batch[0].start_pos = 0;
    batch[0].tokens = {prompt[0]};
    OCTET_RETURN_IF_ERROR(m.Forward(batch, cache, &out));  // position 0 (not timed)
    double kv_bytes = 0;
    Stopwatch decode;
    for (int64_t i = 0; i < n_decode; ++i) {
      batch[0].start_pos = cache.length(1);
      batch[0].tokens = {HostArgmax(out.Last(0), out.vocab)};
      kv_bytes += 2.0 * c.num_layers * double(batch[0].start_pos + 1) * kvd *
                  kernels::KvDtypeBytes(kv_dtype);
      OCTET_RETURN_IF_ERROR(m.Forward(batch, cache, &out));
    }
    DecodeRun d;
    d.tps = n_decode / decode.wall();
    d.tps_cpu = n_decode / decode.cpu(threads);
    const Bandwidth after = measure();
    d.bandwidth_gbs = std::max(before.best(), after.best());
    d.bandwidth_gbs_cpu = std::max(before.best_cpu, after.best_cpu);
    d.kv_bytes_per_token = kv_bytes / n_decode;
    const double bytes = r.weight_bytes_per_token + d.kv_bytes_per_token;
    d.roofline_tps = d.bandwidth_gbs * 1e9 / bytes;
    d.roofline_pct = 100.0 * d.tps / d.roofline_tps;
    d.roofline_pct_cpu = 100.0 * d.tps_cpu / (d.bandwidth_gbs_cpu * 1e9 / bytes);
    r.decode_runs.push_back(d);
    before = after;
  }
  std::vector<DecodeRun> sorted = r.decode_runs;
  std::sort(sorted.begin(), sorted.end(),
            [](const DecodeRun& a, const DecodeRun& b) { return a.roofline_pct < b.roofline_pct; });
  r.decode = sorted[(sorted.size() - 1) / 2];

  // Batched decode: c sequences, one token each per step. With a decode
  // context, every sequence starts at that position over a cache already
  // holding that many (zero) keys and values, so attention reads as much of
  // the cache as it would after a real prompt of that length; c = 1 is
  // measured the same way then, for a like-for-like c / 1 ratio. Each batch
  // size runs `repeats` times too, in rounds over the sizes, and the median
  // round is reported: one short run is as exposed to a burst of others'
  // memory traffic as one c = 1 run, and the c / 1 ratio should not rest on
  // a median on one side and a single sample on the other.
  auto batched_run = [&](int64_t c) -> Result<std::pair<double, double>> {
    const int64_t steps = std::max<int64_t>(8, n_decode / 4);
    KvCache bc = *m.NewKvCache(static_cast<int>(c), decode_context + steps + 2, kv_dtype);
    std::vector<SequenceChunk> b(c);
    for (int64_t i = 0; i < c; ++i) {
      b[i].slot = static_cast<int>(i);
      b[i].tokens = {prompt[i % n_prompt]};
      bc.set_length(static_cast<int>(i), decode_context);
      b[i].start_pos = decode_context;
    }
    OCTET_RETURN_IF_ERROR(m.Forward(b, bc, &out));  // position 0 of each (not timed)
    Stopwatch sw;
    for (int64_t step = 0; step < steps; ++step) {
      for (int64_t i = 0; i < c; ++i) {
        b[i].start_pos = bc.length(static_cast<int>(i));
        b[i].tokens = {HostArgmax(out.Last(i), out.vocab)};
      }
      OCTET_RETURN_IF_ERROR(m.Forward(b, bc, &out));
    }
    return std::make_pair(double(c * steps) / sw.wall(), double(c * steps) / sw.cpu(threads));
  };
  std::vector<int64_t> batch_sizes;
  for (int64_t c : concurrency) {
    if (c > 1 || decode_context > 0) batch_sizes.push_back(c);
  }
  r.batched_runs.resize(batch_sizes.size());
  for (int rep = 0; rep < repeats; ++rep) {
    for (size_t i = 0; i < batch_sizes.size(); ++i) {
      OCTET_ASSIGN_OR_RETURN(auto tps, batched_run(batch_sizes[i]));
      r.batched_runs[i].push_back(tps);
    }
  }
  for (size_t i = 0; i < batch_sizes.size(); ++i) {
    std::vector<std::pair<double, double>> sorted_runs = r.batched_runs[i];
    std::sort(sorted_runs.begin(), sorted_runs.end());
    const auto& median = sorted_runs[(sorted_runs.size() - 1) / 2];
    r.batched_tps.emplace_back(batch_sizes[i], median.first);
    r.batched_tps_cpu.emplace_back(batch_sizes[i], median.second);
  }

  // --moe-ab: the grouped expert calls against one call per expert, in
  // alternating order, the same decode as above (greedy from position 1).
  if (moe_ab > 0 && c.moe.num_experts > 0) {
    auto c1_run = [&]() -> Result<double> {
      batch.resize(1);
      batch[0].slot = 1;
      batch[0].start_pos = 0;
      batch[0].tokens = {prompt[0]};
      OCTET_RETURN_IF_ERROR(m.Forward(batch, cache, &out));
      Stopwatch sw;
      for (int64_t i = 0; i < n_decode; ++i) {
        batch[0].start_pos = cache.length(1);
        batch[0].tokens = {HostArgmax(out.Last(0), out.vocab)};
        OCTET_RETURN_IF_ERROR(m.Forward(batch, cache, &out));
      }
      return n_decode / sw.wall();
    };
    const int64_t cb =
        concurrency.empty() ? 0 : *std::max_element(concurrency.begin(), concurrency.end());
    r.ab_batch = cb > 1 ? cb : 0;
    std::optional<KvCache> bc;
    if (r.ab_batch > 0) {
      bc = *m.NewKvCache(static_cast<int>(cb), std::max<int64_t>(8, n_decode / 4) + 2, kv_dtype);
    }
    auto batch_run = [&]() -> Result<double> {
      const int64_t steps = std::max<int64_t>(8, n_decode / 4);
      std::vector<SequenceChunk> b(cb);
      for (int64_t i = 0; i < cb; ++i) {
        b[i].slot = static_cast<int>(i);
        b[i].tokens = {prompt[i % n_prompt]};
        b[i].start_pos = 0;
      }
      OCTET_RETURN_IF_ERROR(m.Forward(b, *bc, &out));
      Stopwatch sw;
      for (int64_t step = 0; step < steps; ++step) {
        for (int64_t i = 0; i < cb; ++i) {
          b[i].start_pos = bc->length(static_cast<int>(i));
          b[i].tokens = {HostArgmax(out.Last(i), out.vocab)};
        }
        OCTET_RETURN_IF_ERROR(m.Forward(b, *bc, &out));
      }
      return double(cb * steps) / sw.wall();
    };
    for (int round = 0; round < moe_ab; ++round) {
      for (int half = 0; half < 2; ++half) {
        const bool on = (round + half) % 2 == 0;  // on first in even rounds
        m.set_grouped_experts(on);
        OCTET_ASSIGN_OR_RETURN(double tps, c1_run());
        (on ? r.ab_on : r.ab_off).push_back(tps);
        if (r.ab_batch > 0) {
          OCTET_ASSIGN_OR_RETURN(double btps, batch_run());
          (on ? r.ab_on_batch : r.ab_off_batch).push_back(btps);
        }
      }
    }
    m.set_grouped_experts(std::nullopt);  // the backend's choice
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  ArgParser p(
      "octet_bench_engine",
      "Engine prefill/decode throughput on random-weight checkpoints of real model shapes,\n"
      "against this machine's measured memory bandwidth.");
  p.Option("threads", "N", "threads (0: all cores)", "0")
      .Option("dir", "DIR", "where the checkpoints are written (reused when present)",
              "/tmp/octet-bench-engine")
      .Option("models", "LIST",
              "qwen3-0.6b-bf16, qwen3-0.6b-nvfp4, llama3.2-1b-bf16, qwen3-8b-bf16, qwen3-8b-nvfp4 "
              "(Qwen3-8B: 36 layers of 4096, MLP 12288, untied lm_head), qwen3-30b-a3b-nvfp4 "
              "(Qwen3-30B-A3B "
              "layers: 128 experts of 768, top-8, NVFP4 experts, BF16 attention)",
              "qwen3-0.6b-bf16,qwen3-0.6b-nvfp4,llama3.2-1b-bf16")
      .Option("moe-layers", "N",
              "layers of qwen3-30b-a3b-nvfp4 (it has 48); 0: as many as fit in half of "
              "MemAvailable (checkpoint + NVFP4 tile copy)",
              "0")
      .Option("layers", "N",
              "layers of the dense shapes (0: the model's own); fewer write and load faster, "
              "and the report says how many of the model's it holds",
              "0")
      .Option("prompt", "N", "prefill tokens", "512")
      .Option("decode", "N", "decode tokens", "128")
      .Option("repeats", "N",
              "decode runs per model, the bandwidth measured between them; the run with the "
              "median roofline share (the lower middle one of an even count) is reported, all "
              "of them in the JSON; as many batched runs per --concurrency size, in rounds, "
              "the median one reported",
              "1")
      .Option("stream-mib", "MIB", "size of each STREAM array", "256")
      .Option("concurrency", "LIST", "batch sizes for aggregate decode tok/s", "1,4,8")
      .Option("kv-dtype", "f32|f16", "KV cache element type", "f32")
      .Option("decode-context", "N",
              "batched decode starts each sequence at this position (a cache of N keys and "
              "values); 0: fresh sequences",
              "0")
      .Option("nvfp4-tiles", "on|off",
              "NVFP4 weights get their tile copy where the backend reads it (LoadOptions)", "on")
      .Option("backend", "NAME", "kernel backend: " + kernels::BackendNamesForHelp(), "auto")
      .Option("moe-ab", "N",
              "mixture-of-experts models: N rounds of decode with the grouped expert calls "
              "against a call per expert, alternating (median tok/s and ratio)",
              "0")
      .Option("quantize", "nvfp4|off",
              "nvfp4: every BF16 linear weight (a tied lm_head as a copy) quantized to NVFP4 at "
              "load (LoadOptions::quantize)",
              "off");
  if (Status s = p.Parse(argc, argv); !s.ok()) {
    std::cerr << s.message() << "\n";
    return 2;
  }
  if (p.help_requested()) {
    std::cout << p.Usage();
    return 0;
  }
  int threads = static_cast<int>(p.GetInt("threads").value_or(0));
  if (threads <= 0) threads = kernels::ThreadPool::HardwareThreads();
  const int64_t n_prompt = p.GetInt("prompt").value_or(512);
  const int64_t n_decode = p.GetInt("decode").value_or(128);
  const int64_t repeats = p.GetInt("repeats").value_or(1);
  if (n_decode < 1 || repeats < 1) {
    std::cerr << "--decode and --repeats take positive counts\n";
    return 2;
  }
  const int64_t stream_n = p.GetInt("stream-mib").value_or(256) * (1 << 20) / 4;

  std::fprintf(stderr, "measuring memory bandwidth (%d threads, 3 x %lld MiB arrays)...\n", threads,
               static_cast<long long>(stream_n * 4 >> 20));
  const Bandwidth bw = MeasureBandwidth(threads, stream_n, 6);
  std::fprintf(stderr, "  copy %.1f  scale %.1f  add %.1f  triad %.1f  read %.1f GB/s\n", bw.copy,
               bw.scale, bw.add, bw.triad, bw.read);

  nlohmann::json j;
  j["threads"] = threads;
  j["backend"] = p.GetString("backend");
  j["prompt_tokens"] = n_prompt;
  j["kv_dtype"] = p.GetString("kv-dtype");
  j["decode_context"] = p.GetInt("decode-context").value_or(0);
  j["nvfp4_tiles"] = p.GetString("nvfp4-tiles");
  j["quantize"] = p.GetString("quantize");
  auto quantize = ParseLoadQuantize(p.GetString("quantize"));
  if (!quantize.ok()) {
    std::cerr << quantize.status().message() << "\n";
    return 2;
  }
  j["decode_tokens"] = n_decode;
  j["decode_repeats"] = repeats;
  j["bandwidth_gbs"] = {{"copy", bw.copy},   {"scale", bw.scale}, {"add", bw.add},
                        {"triad", bw.triad}, {"read", bw.read},   {"roofline", bw.best()}};
  j["models"] = nlohmann::json::array();
  std::vector<ModelResult> results;
  for (const std::string& name : p.GetList("models")) {
    const Shape* shape = nullptr;
    for (const auto& s : Shapes()) {
      if (s.name == name) shape = &s;
    }
    if (!shape) {
      std::cerr << "octet_bench_engine: unknown model '" << name << "'\n";
      return 2;
    }
    const std::string dir = JoinPath(p.GetString("dir"), name);
    RandomModelShape to_write = shape->shape;
    bool stale = false;  // a checkpoint of this name with another layer count
    if (shape->full_layers > 0) {
      int64_t existing = 0;
      if (auto text = ReadFileToString(JoinPath(dir, "config.json")); text.ok()) {
        existing = nlohmann::json::parse(*text, nullptr, false).value("num_hidden_layers", 0);
      }
      auto layers =
          MoeLayers(shape->shape, shape->full_layers, p.GetInt("moe-layers").value_or(0), existing);
      if (!layers.ok()) {
        std::cerr << "octet_bench_engine: " << name << ": " << layers.status().ToString() << "\n";
        return 1;
      }
      to_write.num_layers = *layers;
      stale = existing > 0 && existing != *layers;
      std::fprintf(stderr, "%s: %lld of its %lld layers (~%lld MiB in memory with the tile copy)\n",
                   name.c_str(), static_cast<long long>(*layers),
                   static_cast<long long>(shape->full_layers),
                   static_cast<long long>(
                       (MoeBytes(to_write).fixed + *layers * MoeBytes(to_write).per_layer) >> 20));
      // config.json marks a complete checkpoint: removed first, so a rewrite
      // that stops halfway is not taken for one.
      if (stale) std::remove(JoinPath(dir, "config.json").c_str());
    }
    Shape run_shape = *shape;
    if (const int64_t want = p.GetInt("layers").value_or(0);
        shape->full_layers == 0 && want > 0 && want < shape->shape.num_layers) {
      to_write.num_layers = want;
      run_shape.full_layers = shape->shape.num_layers;
      int64_t existing = 0;
      if (auto text = ReadFileToString(JoinPath(dir, "config.json")); text.ok()) {
        existing = nlohmann::json::parse(*text, nullptr, false).value("num_hidden_layers", 0);
      }
      stale = existing > 0 && existing != want;
      if (stale) std::remove(JoinPath(dir, "config.json").c_str());
    }
    if (stale || !PathExists(JoinPath(dir, "config.json"))) {
      std::fprintf(stderr, "writing %s ...\n", dir.c_str());
      if (Status s = WriteRandomCheckpoint(to_write, dir); !s.ok()) {
        std::cerr << "octet_bench_engine: " << s.ToString() << "\n";
        return 1;
      }
    }
    std::fprintf(stderr, "running %s ...\n", name.c_str());
    auto conc = p.GetIntList("concurrency");
    if (!conc.ok()) {
      std::cerr << conc.status().message() << "\n";
      return 2;
    }
    auto kv_dtype = kernels::ParseKvDtype(p.GetString("kv-dtype"));
    if (!kv_dtype.ok()) {
      std::cerr << kv_dtype.status().message() << "\n";
      return 2;
    }
    const int64_t decode_context = std::max<int64_t>(0, p.GetInt("decode-context").value_or(0));
    const std::string tiles = p.GetString("nvfp4-tiles");
    if (tiles != "on" && tiles != "off") {
      std::cerr << "--nvfp4-tiles takes on or off\n";
      return 2;
    }
    auto r =
        RunModel(run_shape, dir, threads, *kv_dtype, decode_context, n_prompt, n_decode,
                 static_cast<int>(repeats), stream_n, *conc, tiles == "on", p.GetString("backend"),
                 *quantize, static_cast<int>(p.GetInt("moe-ab").value_or(0)));
    if (!r.ok()) {
      std::cerr << "octet_bench_engine: " << name << ": " << r.status().ToString() << "\n";
      return 1;
    }
    results.push_back(*r);
    nlohmann::json batched = nlohmann::json::object(), batched_cpu = nlohmann::json::object();
    nlohmann::json speedup = nlohmann::json::object();  // aggregate c / the c = 1 decode
    for (auto [c, tps] : r->batched_tps) {
      batched[std::to_string(c)] = tps;
      speedup[std::to_string(c)] = tps / r->decode.tps;
    }
    for (auto [c, tps] : r->batched_tps_cpu) batched_cpu[std::to_string(c)] = tps;
    j["models"].push_back({{"name", r->name},
                           {"weights", r->weights},
                           {"prefill_tps", r->prefill_tps},
                           {"prefill_gflops", r->prefill_gflops},
                           {"decode_tps", r->decode.tps},
                           {"weight_bytes_per_token", r->weight_bytes_per_token},
                           {"kv_bytes_per_token", r->decode.kv_bytes_per_token},
                           {"bandwidth_gbs", r->decode.bandwidth_gbs},
                           {"roofline_tps", r->decode.roofline_tps},
                           {"roofline_pct", r->decode.roofline_pct},
                           {"batched_decode_tps", nlohmann::json::object()},
                           {"cpu_time_normalised",
                            {{"prefill_tps", r->prefill_tps_cpu},
                             {"decode_tps", r->decode.tps_cpu},
                             {"bandwidth_gbs", r->decode.bandwidth_gbs_cpu},
                             {"roofline_pct", r->decode.roofline_pct_cpu},
                             {"batched_decode_tps", batched_cpu}}}});
    j["models"].back()["batched_decode_tps"] = batched;
    j["models"].back()["batched_over_c1"] = speedup;
    j["models"].back()["layers"] = r->layers;
    if (r->full_layers > r->layers) j["models"].back()["model_layers"] = r->full_layers;
    nlohmann::json runs = nlohmann::json::array();
    for (const DecodeRun& d : r->decode_runs) {
      runs.push_back({{"decode_tps", d.tps},
                      {"bandwidth_gbs", d.bandwidth_gbs},
                      {"kv_bytes_per_token", d.kv_bytes_per_token},
                      {"roofline_pct", d.roofline_pct},
                      {"decode_tps_cpu", d.tps_cpu},
                      {"bandwidth_gbs_cpu", d.bandwidth_gbs_cpu},
                      {"roofline_pct_cpu", d.roofline_pct_cpu}});
    }
    j["models"].back()["decode_runs"] = runs;
    nlohmann::json batched_runs = nlohmann::json::object();
    for (size_t i = 0; i < r->batched_tps.size(); ++i) {
      nlohmann::json list = nlohmann::json::array();
      for (auto [wall, cpu] : r->batched_runs[i]) list.push_back({{"tps", wall}, {"tps_cpu", cpu}});
      batched_runs[std::to_string(r->batched_tps[i].first)] = list;
    }
    j["models"].back()["batched_decode_runs"] = batched_runs;
    if (!r->ab_on.empty()) {
      auto ratios = [](const std::vector<double>& on, const std::vector<double>& off) {
        std::vector<double> q;
        for (size_t i = 0; i < on.size() && i < off.size(); ++i) q.push_back(on[i] / off[i]);
        return q;
      };
      nlohmann::json ab = {{"rounds", r->ab_on.size()},
                           {"c1_grouped_tps", r->ab_on},
                           {"c1_per_expert_tps", r->ab_off},
                           {"c1_ratio_median", Median(ratios(r->ab_on, r->ab_off))}};
      if (r->ab_batch > 0) {
        ab["batch"] = r->ab_batch;
        ab["batch_grouped_tps"] = r->ab_on_batch;
        ab["batch_per_expert_tps"] = r->ab_off_batch;
        ab["batch_ratio_median"] = Median(ratios(r->ab_on_batch, r->ab_off_batch));
      }
      j["models"].back()["moe_grouped_ab"] = ab;
    }
  }
  std::fprintf(stderr, "\n%-20s %-11s %11s %9s %10s %10s %8s %10s %8s\n", "model", "weights",
               "prefill t/s", "GFLOP/s", "decode t/s", "MB/token", "GB/s", "roof t/s", "% roof");
  for (const auto& r : results) {
    std::fprintf(stderr, "%-20s %-11s %11.1f %9.1f %10.2f %10.1f %8.1f %10.2f %7.1f%%\n",
                 r.name.c_str(), r.weights.c_str(), r.prefill_tps, r.prefill_gflops, r.decode.tps,
                 (r.weight_bytes_per_token + r.decode.kv_bytes_per_token) / 1e6,
                 r.decode.bandwidth_gbs, r.decode.roofline_tps, r.decode.roofline_pct);
  }
  if (repeats > 1) {
    std::fprintf(stderr,
                 "\ndecode runs in order, tok/s (%% of roofline); the median one is above:\n");
    for (const auto& r : results) {
      std::fprintf(stderr, "%-20s", r.name.c_str());
      for (const DecodeRun& d : r.decode_runs) {
        std::fprintf(stderr, "  %.2f (%.1f%%)", d.tps, d.roofline_pct);
      }
      std::fprintf(stderr, "\n");
      for (size_t i = 0; i < r.batched_tps.size(); ++i) {
        std::fprintf(stderr, "%-20s c=%lld runs, tok/s:", "",
                     static_cast<long long>(r.batched_tps[i].first));
        for (auto [wall, cpu] : r.batched_runs[i]) std::fprintf(stderr, " %.2f", wall);
        std::fprintf(stderr, "\n");
      }
    }
  }
  std::fprintf(stderr,
               "\naggregate decode tok/s with c sequences per step (wall | CPU time) "
               "[x c = 1 decode, wall]:\n");
  for (const auto& r : results) {
    std::fprintf(stderr, "%-20s c=1 %.2f | %.2f", r.name.c_str(), r.decode.tps, r.decode.tps_cpu);
    for (size_t i = 0; i < r.batched_tps.size(); ++i) {
      std::fprintf(stderr, "   c=%lld %.2f | %.2f [%.2fx]",
                   static_cast<long long>(r.batched_tps[i].first), r.batched_tps[i].second,
                   r.batched_tps_cpu[i].second, r.batched_tps[i].second / r.decode.tps);
    }
    std::fprintf(stderr, "\n");
  }
  for (const auto& r : results) {
    if (r.full_layers > r.layers) {
      std::fprintf(
          stderr, "%s: %lld of the model's %lld layers (what fits this machine, or --layers)\n",
          r.name.c_str(), static_cast<long long>(r.layers), static_cast<long long>(r.full_layers));
    }
  }
  std::fprintf(stderr,
               "\nthe same on CPU time (rate on dedicated cores when the machine is shared):\n");
  std::fprintf(stderr, "%-20s %11s %10s %8s %8s\n", "model", "prefill t/s", "decode t/s", "GB/s",
               "% roof");
  for (const auto& r : results) {
    std::fprintf(stderr, "%-20s %11.1f %10.2f %8.1f %7.1f%%\n", r.name.c_str(), r.prefill_tps_cpu,
                 r.decode.tps_cpu, r.decode.bandwidth_gbs_cpu, r.decode.roofline_pct_cpu);
  }
  for (const auto& r : results) {
    if (r.ab_on.empty()) continue;
    std::vector<double> q, qb;
    for (size_t i = 0; i < r.ab_on.size(); ++i) q.push_back(r.ab_on[i] / r.ab_off[i]);
    for (size_t i = 0; i < r.ab_on_batch.size(); ++i) {
      qb.push_back(r.ab_on_batch[i] / r.ab_off_batch[i]);
    }
    std::fprintf(stderr,
                 "\n%s, experts in grouped calls / a call per expert, %zu alternating rounds:\n"
                 "  c1 %.2f / %.2f tok/s (medians), ratio %.3f (median of rounds:",
                 r.name.c_str(), r.ab_on.size(), Median(r.ab_on), Median(r.ab_off), Median(q));
    for (double x : q) std::fprintf(stderr, " %.3f", x);
    std::fprintf(stderr, ")\n");
    if (r.ab_batch > 0) {
      std::fprintf(stderr, "  c%lld %.2f / %.2f tok/s, ratio %.3f (rounds:",
                   static_cast<long long>(r.ab_batch), Median(r.ab_on_batch),
                   Median(r.ab_off_batch), Median(qb));
      for (double x : qb) std::fprintf(stderr, " %.3f", x);
      std::fprintf(stderr, ")\n");
    }
  }
  std::fprintf(
      stderr,
      "GB/s: best of STREAM copy/scale/add/triad and a read-only GEMV sweep, measured just\n"
      "before and just after each decode run with the same threads; roof t/s = GB/s /\n"
      "bytes per token.\n");
  std::cout << j.dump(2) << "\n";
  return 0;
}
