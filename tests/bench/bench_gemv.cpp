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
//              [--shape qwen3-0.6b|8b]
//
// --shape 8b: four layers of an 8B-class model (q/o 4096 x 4096, k/v
// 1024 x 4096, gate/up 14336 x 4096, down 4096 x 14336) and a 16384 x 4096
// "lm_head" (BF16), 1.9 GB in BF16.
// A device backend (--backends cuda) gets its own copy of every matrix
// (PrepareWeight) and device activations; its step is timed to a
// Synchronize, and the per-op columns are not measured (0) for it: a
// synchronisation after every op would add its latency to each.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "octet/base/args.h"
#include "octet/base/deadline.h"
#include "octet/base/huge_page_arena.h"
#include "octet/base/json.h"
#include "octet/kernels/backend.h"
#include "octet/kernels/backends.h"

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
  args.Option("backends", "A,B", "kernel backends to compare: " + BackendNamesForHelp(),
              "avx512,avx512-amx");
  args.Option("shape", "qwen3-0.6b|8b", "the matrices (see the file comment)", "qwen3-0.6b");
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
    auto b = CreateAnyBackend(n, BackendOptions{threads});
    if (!b.ok()) {
      std::cerr << "bench_gemv: " << b.status().message() << "\n";
      return 1;
    }
    backends.push_back(std::move(*b));
  }

  const std::string shape = args.GetString("shape");
  if (shape != "qwen3-0.6b" && shape != "8b") {
    std::cerr << "bench_gemv: --shape takes qwen3-0.6b or 8b\n";
    return 2;
  }
  const bool big = shape == "8b";
  const int kLayers = big ? 4 : 28;
  const int64_t kHidden = big ? 4096 : 1024, kQ = big ? 4096 : 2048, kKv = 1024,
                kInter = big ? 14336 : 3072, kVocab = big ? 16384 : 151936;
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

  // What one backend's step reads: the matrices (7 per layer, then the
  // lm_head) and the activation buffers, host or device.
  struct Operands {
    std::vector<const WeightMatrix*> mats;
    float *x, *y, *y2, *y3;
    bool device = false;
  };
  auto host_operands = [&](bool tiled) {
    Operands o;
    for (auto& l : layers) {
      for (const Matrix* m : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down}) {
        o.mats.push_back(m->get(tiled));
      }
    }
    o.mats.push_back(&lm_head.view);
    o.x = x.data();
    o.y = y.data();
    o.y2 = y2.data();
    o.y3 = y3.data();
    return o;
  };
  // Device copies (kept for the whole run).
  std::vector<std::unique_ptr<WeightMatrix>> device_views;
  std::vector<Buffer> device_storage;
  auto device_operands = [&](KernelBackend& b) -> Result<Operands> {
    Operands o = host_operands(false);
    o.device = true;
    for (auto& m : o.mats) {
      OCTET_ASSIGN_OR_RETURN(WeightMatrix v, b.PrepareWeight(*m, &device_storage));
      device_views.push_back(std::make_unique<WeightMatrix>(v));
      m = device_views.back().get();
    }
    for (auto [ptr, host] :
         {std::pair{&o.x, &x}, std::pair{&o.y, &y}, std::pair{&o.y2, &y2}, std::pair{&o.y3, &y3}}) {
      OCTET_ASSIGN_OR_RETURN(Buffer buf, b.Allocate(static_cast<int64_t>(host->size() * 4)));
      b.CopyToDevice(buf.data(), host->data(), static_cast<int64_t>(host->size() * 4));
      *ptr = buf.as<float>();
      device_storage.push_back(std::move(buf));
    }
    OCTET_RETURN_IF_ERROR(b.Synchronize());
    return o;
  };

  auto step = [&](KernelBackend& b, int64_t m, const Operands& d) {
    StepTimes t;
    const int64_t start = NowNs();
    for (size_t li = 0; li < layers.size(); ++li) {
      const WeightMatrix* const* w = &d.mats[li * 7];
      int64_t t0 = NowNs();
      const KernelBackend::MatmulOutput qkv[3] = {
          {w[0], d.y, kQ}, {w[1], d.y2, kKv}, {w[2], d.y3, kKv}};
      b.MatmulMulti(d.x, m, kHidden, qkv, 3);
      int64_t t1 = NowNs();
      b.Matmul(d.x, m, kQ, *w[3], d.y2, kHidden, false);
      int64_t t2 = NowNs();
      const KernelBackend::MatmulOutput gu[2] = {{w[4], d.y, kInter}, {w[5], d.y2, kInter}};
      b.MatmulMulti(d.x, m, kHidden, gu, 2);
      int64_t t3 = NowNs();
      b.Matmul(d.x, m, kInter, *w[6], d.y3, kHidden, false);
      int64_t t4 = NowNs();
      t.qkv += (t1 - t0) * 1e-9;
      t.o += (t2 - t1) * 1e-9;
      t.gate_up += (t3 - t2) * 1e-9;
      t.down += (t4 - t3) * 1e-9;
    }
    const int64_t t5 = NowNs();
    b.Matmul(d.x, m, kHidden, *d.mats.back(), d.y, kVocab, false);
    t.lm_head = (NowNs() - t5) * 1e-9;
    if (d.device) {
      if (Status s = b.Synchronize(); !s.ok()) {
        std::cerr << "bench_gemv: " << b.name() << ": " << s.message() << "\n";
        std::exit(1);
      }
      // Only the whole step is measured (see the file comment).
      t = StepTimes{};
      t.lm_head = (NowNs() - start) * 1e-9;
    }
    return t;
  };

  // What runs, in turn: each backend with each variant of the matrices.
  struct Run {
    KernelBackend* backend;
    Operands operands;
    std::string name;
  };
  std::vector<Run> runs;
  for (auto& b : backends) {
    if (b->memory_kind() == MemoryKind::kDevice) {
      auto o = device_operands(*b);
      if (!o.ok()) {
        std::cerr << "bench_gemv: " << b->name() << ": " << o.status().message() << "\n";
        return 1;
      }
      runs.push_back({b.get(), *o, std::string(b->name())});
      continue;
    }
    for (bool v : variants) {
      runs.push_back({b.get(), host_operands(v),
                      std::string(b->name()) + (v && variants.size() > 1 ? "+tiles" : "")});
    }
  }
  // best[run][m]: the round with the least total time.
  std::map<std::string, std::map<int64_t, StepTimes>> best;
  for (const Run& run : runs) step(*run.backend, 1, run.operands);  // touch every page once
  for (int r = 0; r < rounds; ++r) {
    for (int64_t m : *rows_list) {
      for (const Run& run : runs) {
        StepTimes t = step(*run.backend, m, run.operands);
        auto& slot = best[run.name];
        if (!slot.count(m) || t.total() < slot[m].total()) slot[m] = t;
      }
    }
  }

  nlohmann::json out;
  out["threads"] = threads;
  out["format"] = format;
  out["shape"] = shape;
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
