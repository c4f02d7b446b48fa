// Batched-decode GEMV benchmark: the matmuls of one Qwen3-0.6B decode step
// (28 layers of q/k/v 2048/1024/1024 x 1024, o 1024 x 2048, gate/up
// 3072 x 1024, down 1024 x 3072, then the 151936 x 1024 lm_head), random
// weights streamed from memory as in serving (BF16: 1.15 GB; --format nvfp4:
// the layers in NVFP4 as ModelOpt stores them, 0.26 GB, and the tied lm_head
// in BF16 as in the published checkpoints), through the backend's Matmul /
// MatmulMulti as the engine calls them, at M activation rows.
// Backends are compared interleaved, round by round, in one run (the machine is
// shared: separate runs are not comparable). Prints a table on stderr and one
// JSON document on stdout.
//
//   bench_gemv [--threads 2] [--rows 1,2,4,8] [--rounds 5]
//              [--backends avx512,avx512-amx] [--format bf16|nvfp4] [--tiles on|off|both]
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "octet/base/args.h"
#include "octet/base/deadline.h"
#include "octet/base/huge_page_arena.h"
#include "octet/kernels/backend.h"

using namespace octet;
using namespace octet::kernels;

namespace {

struct Matrix {
  std::vector<uint16_t> data;
  std::vector<uint8_t> packed, scales;  // NVFP4
  WeightMatrix view;                    // with the tile copy when there is one
  WeightMatrix plain;                   // without
  const WeightMatrix* get(bool tiled) const { return tiled ? &view : &plain; }
};

// Random codes (every E2M1 value) and scale codes in the range ModelOpt
// produces for such weights (e4m3 of about 2^-3..2^3), global scale 1/448.
Matrix RandomNvfp4(int64_t rows, int64_t cols, uint64_t seed) {
  Matrix m;
  m.packed.resize(rows * cols / 2);
  m.scales.resize(rows * cols / kNvfp4BlockSize);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& b : m.packed) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    b = static_cast<uint8_t>(s >> 40);
  }
  for (auto& b : m.scales) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    b = static_cast<uint8_t>(0x20 + ((s >> 40) % 0x30));
  }
  m.view = WeightMatrix::Nvfp4(m.packed.data(), m.scales.data(), 1.0f / 448, rows, cols);
  return m;
}

Matrix RandomBf16(int64_t rows, int64_t cols, uint64_t seed) {
  Matrix m;
  m.data.resize(rows * cols);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& v : m.data) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    // Values in about +-0.03 (exponent 0x3c..0x3d), random sign and mantissa.
    v = static_cast<uint16_t>(0x3c80 | ((s >> 33) & 0x7f) | ((s >> 40) & 0x8000));
  }
  m.view = WeightMatrix::Dense(WeightFormat::kBF16, m.data.data(), rows, cols);
  m.plain = m.view;
  return m;
}

struct Layer {
  Matrix q, k, v, o, gate, up, down;
};

// Seconds per op class for one decode step.
struct StepTimes {
  double qkv = 0, o = 0, gate_up = 0, down = 0, lm_head = 0;
  double total() const { return qkv + o + gate_up + down + lm_head; }
};

}  // namespace

int main(int argc, char** argv) {
  ArgParser args("bench_gemv", "Batched-decode GEMV on the matmuls of a Qwen3-0.6B decode step.");
  args.Option("threads", "N", "backend threads", "2");
  args.Option("rows", "M,...", "activation rows (decode batch sizes)", "1,2,4,8");
  args.Option("rounds", "N", "interleaved rounds (the best round is reported)", "5");
  args.Option("backends", "A,B", "kernel backends to compare", "avx512,avx512-amx");
  args.Option("format", "bf16|nvfp4", "the layers' weight format (lm_head stays BF16)", "bf16");
  args.Option("tiles", "on|off|both",
              "NVFP4: give the matrices their tile copy (weight.h), as the engine's loader does "
              "for a backend that reads it (backends that do not ignore it); both: each backend "
              "with and without, interleaved (\"NAME+tiles\")",
              "on");
  if (Status s = args.Parse(argc, argv); !s.ok()) {
    std::cerr << "bench_gemv: " << s.message() << "\n";
    return 2;
  }
  if (args.help_requested()) {
    std::cout << args.Usage();
    return 0;
  }
  auto threads_arg = args.GetInt("threads");
  auto rounds_arg = args.GetInt("rounds");
  auto rows_list = args.GetIntList("rows");
  if (!threads_arg.ok() || !rounds_arg.ok() || !rows_list.ok() || rows_list->empty()) {
    std::cerr << "bench_gemv: --threads, --rounds and --rows take integers\n";
    return 2;
  }
  const std::string format = args.GetString("format");
  if (format != "bf16" && format != "nvfp4") {
    std::cerr << "bench_gemv: --format takes bf16 or nvfp4\n";
    return 2;
  }
  const bool nvfp4 = format == "nvfp4";
  const std::string tiles_arg = args.GetString("tiles");
  if (tiles_arg != "on" && tiles_arg != "off" && tiles_arg != "both") {
    std::cerr << "bench_gemv: --tiles takes on, off or both\n";
    return 2;
  }
  const bool tiles = nvfp4 && tiles_arg != "off";
  // The variants each backend runs: with the tile copy, without, or both.
  std::vector<bool> variants;
  variants.push_back(tiles);
  if (nvfp4 && tiles_arg == "both") variants.push_back(false);
  const int threads = static_cast<int>(*threads_arg);
  const int rounds = static_cast<int>(*rounds_arg);
  for (int64_t m : *rows_list) {
    if (m < 1 || m > 8) {
      std::cerr << "bench_gemv: --rows takes decode batch sizes 1..8\n";
      return 2;
    }
  }
  const std::vector<std::string> names = args.GetList("backends");
  std::vector<std::unique_ptr<KernelBackend>> backends;
  for (const auto& n : names) {
    auto b = CreateBackend(n, BackendOptions{threads});
    if (!b.ok()) {
      std::cerr << "bench_gemv: " << b.status().message() << "\n";
      return 1;
    }
    backends.push_back(std::move(*b));
  }

  constexpr int kLayers = 28;
  constexpr int64_t kHidden = 1024, kQ = 2048, kKv = 1024, kInter = 3072, kVocab = 151936;
  std::vector<Layer> layers(kLayers);
  uint64_t seed = 1;
  HugePageArena tile_arena;
  auto random = [&](int64_t rows, int64_t cols) {
    if (!nvfp4) return RandomBf16(rows, cols, seed++);
    Matrix m = RandomNvfp4(rows, cols, seed++);
    m.plain = m.view;
    if (tiles && CanTileNvfp4(m.view)) {  // where the engine's loader puts them
      if (uint8_t* mem = tile_arena.Allocate(static_cast<size_t>(Nvfp4TilesBytes(m.view)))) {
        m.view = TileNvfp4(m.view, mem);
      }
    }
    return m;
  };
  for (auto& l : layers) {
    l.q = random(kQ, kHidden);
    l.k = random(kKv, kHidden);
    l.v = random(kKv, kHidden);
    l.o = random(kHidden, kQ);
    l.gate = random(kInter, kHidden);
    l.up = random(kInter, kHidden);
    l.down = random(kHidden, kInter);
  }
  Matrix lm_head = RandomBf16(kVocab, kHidden, seed++);
  double weight_bytes = lm_head.view.BytesRead();
  double macs_per_row = static_cast<double>(kVocab) * kHidden;
  for (auto& l : layers) {
    for (const Matrix* m : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down}) {
      weight_bytes += m->view.BytesRead();
      macs_per_row += static_cast<double>(m->view.rows) * m->view.cols;
    }
  }

  const int64_t max_m = *std::max_element(rows_list->begin(), rows_list->end());
  std::vector<float> x(max_m * kInter), y(max_m * kVocab), y2(max_m * kInter), y3(max_m * kInter);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.01f * static_cast<float>((i * 37) % 101) - 0.5f;

  auto step = [&](KernelBackend& b, int64_t m, bool tiled) {
    StepTimes t;
    for (auto& l : layers) {
      int64_t t0 = NowNs();
      const KernelBackend::MatmulOutput qkv[3] = {{l.q.get(tiled), y.data(), kQ},
                                                  {l.k.get(tiled), y2.data(), kKv},
                                                  {l.v.get(tiled), y3.data(), kKv}};
      b.MatmulMulti(x.data(), m, kHidden, qkv, 3);
      int64_t t1 = NowNs();
      b.Matmul(x.data(), m, kQ, *l.o.get(tiled), y2.data(), kHidden, false);
      int64_t t2 = NowNs();
      const KernelBackend::MatmulOutput gu[2] = {{l.gate.get(tiled), y.data(), kInter},
                                                 {l.up.get(tiled), y2.data(), kInter}};
      b.MatmulMulti(x.data(), m, kHidden, gu, 2);
      int64_t t3 = NowNs();
      b.Matmul(x.data(), m, kInter, *l.down.get(tiled), y3.data(), kHidden, false);
      int64_t t4 = NowNs();
      t.qkv += (t1 - t0) * 1e-9;
      t.o += (t2 - t1) * 1e-9;
      t.gate_up += (t3 - t2) * 1e-9;
      t.down += (t4 - t3) * 1e-9;
    }
    const int64_t t5 = NowNs();
    b.Matmul(x.data(), m, kHidden, lm_head.view, y.data(), kVocab, false);
    t.lm_head = (NowNs() - t5) * 1e-9;
    return t;
  };

  // What runs, in turn: each backend with each variant of the matrices.
  struct Run {
    KernelBackend* backend;
    bool tiled;
    std::string name;
  };
  std::vector<Run> runs;
  for (auto& b : backends) {
    for (bool v : variants) {
      runs.push_back(
          {b.get(), v, std::string(b->name()) + (v && variants.size() > 1 ? "+tiles" : "")});
    }
  }
  // best[run][m]: the round with the least total time.
  std::map<std::string, std::map<int64_t, StepTimes>> best;
  for (const Run& run : runs) step(*run.backend, 1, run.tiled);  // touch every page once
  for (int r = 0; r < rounds; ++r) {
    for (int64_t m : *rows_list) {
      for (const Run& run : runs) {
        StepTimes t = step(*run.backend, m, run.tiled);
        auto& slot = best[run.name];
        if (!slot.count(m) || t.total() < slot[m].total()) slot[m] = t;
      }
    }
  }

  nlohmann::json out;
  out["threads"] = threads;
  out["format"] = format;
  out["tiles"] = tiles_arg;
  out["weight_bytes"] = weight_bytes;
  std::fprintf(stderr, "%-18s %3s %9s %9s %9s %8s %8s %8s %8s %8s\n", "backend", "M", "step ms",
               "GFLOP/s", "GB/s", "qkv ms", "o ms", "gu ms", "down ms", "lm ms");
  for (int64_t m : *rows_list) {
    for (const Run& run : runs) {
      const std::string& name = run.name;
      const StepTimes& t = best[name][m];
      const double gflops = 2.0 * macs_per_row * m / t.total() * 1e-9;
      const double gbs = weight_bytes / t.total() * 1e-9;
      std::fprintf(stderr, "%-18s %3lld %9.2f %9.1f %9.2f %8.2f %8.2f %8.2f %8.2f %8.2f\n",
                   name.c_str(), static_cast<long long>(m), t.total() * 1e3, gflops, gbs,
                   t.qkv * 1e3, t.o * 1e3, t.gate_up * 1e3, t.down * 1e3, t.lm_head * 1e3);
      out["results"].push_back({{"backend", name},
                                {"m", m},
                                {"step_ms", t.total() * 1e3},
                                {"gflops", gflops},
                                {"weight_gbps", gbs},
                                {"qkv_ms", t.qkv * 1e3},
                                {"o_ms", t.o * 1e3},
                                {"gate_up_ms", t.gate_up * 1e3},
                                {"down_ms", t.down * 1e3},
                                {"lm_head_ms", t.lm_head * 1e3}});
    }
  }
  std::cout << out.dump(2) << "\n";
  return 0;
}
