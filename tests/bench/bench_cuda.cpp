// CUDA decode matmul benchmark. First the device's practical memory rate: a
// device-to-device cudaMemcpyAsync of a large buffer, best of several, timed
// with CUDA events (GB/s counts the bytes read plus the bytes written, as
// STREAM's copy does). Then the Gemv kernels (cuda_ops.h) in BF16 and NVFP4 on
// the decode matmuls of an 8B-class model — 4096 x 4096 (q, o), 14336 x 4096
// (gate, up), 16384 x 4096 (n x k) — at 1, 4 and 8 activation rows: time per
// call, effective GB/s (weights and scales read, activations read, outputs
// written) and that rate as a fraction of the copy's; NVFP4 also through the
// integer kernel ("nvfp4-int": LaunchPackNvfp4Int + LaunchGemvNvfp4Int, the
// packing in every call). Each call reads its
// weights from DRAM: calls rotate through enough copies of the matrix to
// exceed the L2 cache four times over. Last, the prefill matmuls of the same
// model at --gemm-rows rows (default 2048) through the CUDA backend's Matmul
// (f32 activations converted to BF16, cuBLAS BF16 tensor-core GEMM, f32
// out), in both of its modes: "split" (the default: the activations as a
// BF16 high and low part, two GEMMs, for f32-like accuracy) and "bf16"
// (OCTET_CUDA_MATMUL=bf16: one GEMM, activations rounded to BF16 as the
// usual serving engines keep them). The "bf16" rate is the cuBLAS BF16 GEMM
// rate the engine's prefill is measured against. And the cost of a kernel
// launch: 1,000 tiny GEMVs (64 x 64) queued one by one on the stream — the
// host's time to queue each and the time per kernel until the last one has
// run — against the same 1,000 captured once as a CUDA graph and replayed
// (one launch): how much of a decode step of small kernels is launch cost.
//
// Prints a table; --json FILE also writes one JSON document. Without a usable
// CUDA device prints "no usable CUDA device: <why>" and exits 77.
//
//   bench_cuda [--rows 1,4,8] [--rounds 5] [--iters 40] [--copy-mib 1024]
//              [--gemm-rows 2048] [--json FILE]
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "octet/base/args.h"
#include "octet/base/json.h"
#include "octet/kernels/cuda/cuda_backend.h"
#include "octet/kernels/cuda/cuda_device.h"
#include "octet/kernels/cuda/cuda_ops.h"
#include "octet/kernels/weight.h"

using namespace octet;
using namespace octet::kernels;
using namespace octet::kernels::cuda;

namespace {

// Random bytes, quickly (a linear congruential generator).
void FillRandom(std::vector<uint8_t>* v, uint64_t seed) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& b : *v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    b = static_cast<uint8_t>(s >> 40);
  }
}

// A matrix on the device, `copies` times, each copy a separate allocation.
struct DeviceMatrix {
  std::vector<DeviceBuffer> data, scales;
  std::vector<WeightMatrix> views;
};

// BF16 values of magnitude 2^-7..2^-5 (high byte 0x3c, random sign and
// mantissa); NVFP4 random codes, scale codes 2^-3..2^2 (as ModelOpt writes
// for such weights), global scale 1/448. The values do not change the
// timing; they only keep the sums finite.
Result<DeviceMatrix> MakeMatrix(WeightFormat f, int64_t n, int64_t k, int copies,
                                const CudaStream& stream) {
  DeviceMatrix m;
  std::vector<uint8_t> data(f == WeightFormat::kBF16 ? n * k * 2 : n * k / 2);
  std::vector<uint8_t> scales(f == WeightFormat::kNvfp4 ? n * k / kNvfp4BlockSize : 0);
  FillRandom(&data, n * 31 + k);
  if (f == WeightFormat::kBF16) {
    for (size_t i = 0; i + 1 < data.size(); i += 2) {
      data[i + 1] = static_cast<uint8_t>(0x3c | (data[i + 1] & 0x80));
    }
  } else {
    FillRandom(&scales, n * 37 + k);
    for (auto& s : scales) s = static_cast<uint8_t>(0x20 + s % 0x30);
  }
  for (int c = 0; c < copies; ++c) {
    OCTET_ASSIGN_OR_RETURN(DeviceBuffer d, DeviceBuffer::Allocate(data.size()));
    OCTET_RETURN_IF_ERROR(d.CopyFromHost(data.data(), data.size(), stream));
    DeviceBuffer s;
    if (!scales.empty()) {
      OCTET_ASSIGN_OR_RETURN(s, DeviceBuffer::Allocate(scales.size()));
      OCTET_RETURN_IF_ERROR(s.CopyFromHost(scales.data(), scales.size(), stream));
    }
    m.views.push_back(
        f == WeightFormat::kBF16
            ? WeightMatrix::Dense(f, d.data(), n, k)
            : WeightMatrix::Nvfp4(d.as<uint8_t>(), s.as<uint8_t>(), 1.0f / 448, n, k));
    m.data.push_back(std::move(d));
    m.scales.push_back(std::move(s));
  }
  return m;
}

// `n` activation values in [-0.5, 0.5] on the device.
Result<DeviceBuffer> Activations(int64_t n, const CudaStream& stream) {
  std::vector<float> host(n);
  for (size_t i = 0; i < host.size(); ++i)
    host[i] = 0.01f * static_cast<float>((i * 37) % 101) - 0.5f;
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer x, DeviceBuffer::Allocate(host.size() * sizeof(float)));
  OCTET_RETURN_IF_ERROR(x.CopyFromHost(host.data(), host.size() * sizeof(float), stream));
  return x;
}

// Best milliseconds per repetition of `body` (which queues `iters` operations).
template <typename Body>
Result<double> BestMs(const CudaStream& stream, int rounds, int iters, const Body& body) {
  OCTET_ASSIGN_OR_RETURN(CudaEvent start, CudaEvent::Create());
  OCTET_ASSIGN_OR_RETURN(CudaEvent end, CudaEvent::Create());
  OCTET_RETURN_IF_ERROR(body(2));  // warm-up (first launches, page mappings)
  OCTET_RETURN_IF_ERROR(stream.Synchronize());
  double best = 1e30;
  for (int r = 0; r < rounds; ++r) {
    OCTET_RETURN_IF_ERROR(start.Record(stream));
    OCTET_RETURN_IF_ERROR(body(iters));
    OCTET_RETURN_IF_ERROR(end.Record(stream));
    OCTET_ASSIGN_OR_RETURN(float ms, CudaEvent::ElapsedMs(start, end));
    best = std::min(best, static_cast<double>(ms) / iters);
  }
  return best;
}

// Best TFLOP/s of y[m, n] = x[m, k] · Wᵀ through `backend`'s Matmul over
// `rounds` rounds of `iters` calls (wall clock around a synchronized batch:
// each call is a fraction of a millisecond of tensor-core work).
Result<double> GemmTflops(KernelBackend& backend, const WeightMatrix& w, const float* x, int64_t m,
                          float* y, int rounds, int iters) {
  const int64_t n = w.rows, k = w.cols;
  auto batch = [&](int calls) -> Result<double> {
    OCTET_RETURN_IF_ERROR(backend.Synchronize());
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) backend.Matmul(x, m, k, w, y, n, false);
    OCTET_RETURN_IF_ERROR(backend.Synchronize());
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  OCTET_RETURN_IF_ERROR(batch(2).status());  // warm-up: cuBLAS picks and loads its kernels
  double best = 1e30;
  for (int r = 0; r < rounds; ++r) {
    OCTET_ASSIGN_OR_RETURN(double sec, batch(iters));
    best = std::min(best, sec / iters);
  }
  return 2.0 * m * n * k / best / 1e12;
}

Status CudaCheck(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::Ok();
  return InternalError(std::string(what) + ": " + cudaGetErrorString(e));
}

// The launch-cost figures (see the file comment).
struct LaunchCost {
  double queue_us = 0;   // host time to queue one launch
  double stream_us = 0;  // per kernel, queued one by one, until the last has run
  double graph_us = 0;   // per kernel, replayed as one CUDA graph
};

Result<LaunchCost> MeasureLaunchCost(const CudaStream& stream, int rounds) {
  constexpr int kLaunches = 1000;
  constexpr int64_t kDim = 64;
  OCTET_ASSIGN_OR_RETURN(DeviceMatrix w, MakeMatrix(WeightFormat::kBF16, kDim, kDim, 1, stream));
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer x, DeviceBuffer::Allocate(kDim * sizeof(float)));
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer y, DeviceBuffer::Allocate(kDim * sizeof(float)));
  OCTET_RETURN_IF_ERROR(x.Fill(0, stream));
  auto queue = [&]() -> Status {
    for (int i = 0; i < kLaunches; ++i) {
      OCTET_RETURN_IF_ERROR(
          LaunchGemv(stream.get(), x.as<float>(), 1, kDim, w.views[0], y.as<float>(), kDim, false));
    }
    return Status::Ok();
  };
  using Clock = std::chrono::steady_clock;
  auto us = [](Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); };
  LaunchCost best{1e30, 1e30, 1e30};
  OCTET_RETURN_IF_ERROR(queue());  // warm-up
  OCTET_RETURN_IF_ERROR(stream.Synchronize());
  for (int r = 0; r < rounds; ++r) {
    const auto t0 = Clock::now();
    OCTET_RETURN_IF_ERROR(queue());
    const auto t1 = Clock::now();
    OCTET_RETURN_IF_ERROR(stream.Synchronize());
    best.queue_us = std::min(best.queue_us, us(t1 - t0) / kLaunches);
    best.stream_us = std::min(best.stream_us, us(Clock::now() - t0) / kLaunches);
  }
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  OCTET_RETURN_IF_ERROR(
      CudaCheck(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeThreadLocal),
                "cudaStreamBeginCapture"));
  const Status captured = queue();
  const cudaError_t ended = cudaStreamEndCapture(stream.get(), &graph);
  OCTET_RETURN_IF_ERROR(captured);
  OCTET_RETURN_IF_ERROR(CudaCheck(ended, "cudaStreamEndCapture"));
  Status s = CudaCheck(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  for (int r = 0; s.ok() && r <= rounds; ++r) {  // round 0 warms up
    const auto t0 = Clock::now();
    s = CudaCheck(cudaGraphLaunch(exec, stream.get()), "cudaGraphLaunch");
    if (s.ok()) s = stream.Synchronize();
    if (r > 0) best.graph_us = std::min(best.graph_us, us(Clock::now() - t0) / kLaunches);
  }
  if (exec) cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  OCTET_RETURN_IF_ERROR(s);
  return best;
}

int Fail(const Status& s) {
  std::cerr << "bench_cuda: " << s.ToString() << "\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  ArgParser args("bench_cuda", "Device copy bandwidth and the CUDA decode matmuls against it.");
  args.Option("rows", "M,...", "activation rows (decode batch sizes, 1..8)", "1,4,8");
  args.Option("rounds", "N", "timed rounds (the best is reported)", "5");
  args.Option("iters", "N", "calls per round", "40");
  args.Option("copy-mib", "MiB", "size of the copied buffer", "1024");
  args.Option("gemm-rows", "M", "rows of the prefill GEMMs (0: skip them)", "2048");
  args.Option("json", "FILE", "also write the figures as one JSON document");
  if (Status s = args.Parse(argc, argv); !s.ok()) {
    std::cerr << "bench_cuda: " << s.message() << "\n";
    return 2;
  }
  if (args.help_requested()) {
    std::cout << args.Usage();
    return 0;
  }
  auto rows = args.GetIntList("rows");
  auto rounds = args.GetInt("rounds");
  auto iters = args.GetInt("iters");
  auto copy_mib = args.GetInt("copy-mib");
  if (!rows.ok() || rows->empty() || !rounds.ok() || !iters.ok() || !copy_mib.ok() || *rounds < 1 ||
      *iters < 1 || *copy_mib < 1) {
    std::cerr << "bench_cuda: --rows, --rounds, --iters and --copy-mib take positive integers\n";
    return 2;
  }
  for (int64_t m : *rows) {
    if (m < 1 || m > kGemvMaxRows) {
      std::cerr << "bench_cuda: --rows takes 1.." << kGemvMaxRows << "\n";
      return 2;
    }
  }

  const CudaProbeResult probe = CudaProbe();
  if (!probe.usable) {
    std::printf("no usable CUDA device: %s\n", probe.why.c_str());
    return 77;
  }
  const CudaDeviceInfo& dev = probe.devices[0];
  std::printf("%s\n", probe.why.c_str());
  auto stream_or = CudaStream::Create();
  if (!stream_or.ok()) return Fail(stream_or.status());
  const CudaStream& stream = *stream_or;

  // ---- copy bandwidth ----
  // At most a quarter of the free memory (two buffers), at least 1 MiB.
  const size_t copy_bytes =
      std::max<size_t>(1 << 20, std::min<size_t>(static_cast<size_t>(*copy_mib) << 20,
                                                 static_cast<size_t>(dev.free_memory_bytes) / 4));
  double copy_gbps = 0.0;
  {
    auto a = DeviceBuffer::Allocate(copy_bytes);
    if (!a.ok()) return Fail(a.status());
    auto b = DeviceBuffer::Allocate(copy_bytes);
    if (!b.ok()) return Fail(b.status());
    if (Status s = a->Fill(0x3c, stream); !s.ok()) return Fail(s);
    auto ms = BestMs(stream, static_cast<int>(*rounds), 10, [&](int n) {
      for (int i = 0; i < n; ++i) {
        // Alternate directions so neither buffer stays the source.
        const bool even = i % 2 == 0;
        OCTET_RETURN_IF_ERROR(CopyDeviceToDeviceAsync(
            even ? b->data() : a->data(), even ? a->data() : b->data(), copy_bytes, stream));
      }
      return Status::Ok();
    });
    if (!ms.ok()) return Fail(ms.status());
    copy_gbps = 2.0 * copy_bytes / (*ms * 1e-3) / 1e9;
  }
  std::printf("device-to-device copy: %.1f MiB, %.1f GB/s (read + write)", copy_bytes / 1048576.0,
              copy_gbps);
  if (dev.PeakBandwidthGBs() > 0) {
    std::printf(", %.0f%% of the %.0f GB/s peak", 100.0 * copy_gbps / dev.PeakBandwidthGBs(),
                dev.PeakBandwidthGBs());
  }
  std::printf("\n\n%-9s %6s %6s %2s %10s %9s %8s\n", "format", "n", "k", "m", "us/call", "GB/s",
              "of copy");

  nlohmann::json out;
  out["device"] = {
      {"name", dev.name},
      {"compute_capability", std::to_string(dev.major) + "." + std::to_string(dev.minor)},
      {"sm_count", dev.sm_count},
      {"memory_bytes", dev.total_memory_bytes},
      {"l2_bytes", dev.l2_cache_bytes},
      {"integrated", dev.integrated},
      {"peak_gbps", dev.PeakBandwidthGBs()}};
  out["cuda_architectures"] = CudaCompiledArchitectures();
  out["copy"] = {{"bytes", copy_bytes}, {"gbps", copy_gbps}};
  out["gemv"] = nlohmann::json::array();

  const int64_t max_m = *std::max_element(rows->begin(), rows->end());
  struct Shape {
    int64_t n, k;
  };
  for (WeightFormat f : {WeightFormat::kBF16, WeightFormat::kNvfp4}) {
    for (Shape shape : {Shape{4096, 4096}, Shape{14336, 4096}, Shape{16384, 4096}}) {
      const int64_t n = shape.n, k = shape.k;
      const int64_t matrix_bytes =
          f == WeightFormat::kBF16 ? n * k * 2 : n * k / 2 + n * k / kNvfp4BlockSize;
      const int copies = static_cast<int>(
          std::max<int64_t>(1, (4 * dev.l2_cache_bytes + matrix_bytes - 1) / matrix_bytes));
      auto matrix = MakeMatrix(f, n, k, copies, stream);
      if (!matrix.ok()) return Fail(matrix.status());
      auto x = Activations(max_m * k, stream);
      if (!x.ok()) return Fail(x.status());
      auto y = DeviceBuffer::Allocate(max_m * n * sizeof(float));
      if (!y.ok()) return Fail(y.status());
      auto packed = DeviceBuffer::Allocate(Nvfp4IntPackedBytes(max_m, k));
      if (!packed.ok()) return Fail(packed.status());
      for (int64_t m : *rows) {
        // NVFP4 twice: the float kernel (LaunchGemv) and the integer one
        // (OCTET_CUDA_NVFP4_GEMV=int), its activation packing counted in
        // each call as the backend does it for a single matmul.
        for (const bool integer : {false, true}) {
          if (integer && f != WeightFormat::kNvfp4) continue;
          int next = 0;
          auto ms =
              BestMs(stream, static_cast<int>(*rounds), static_cast<int>(*iters), [&](int calls) {
                for (int i = 0; i < calls; ++i) {
                  const WeightMatrix& w = matrix->views[next];
                  next = (next + 1) % copies;
                  if (integer) {
                    OCTET_RETURN_IF_ERROR(LaunchPackNvfp4Int(stream.get(), x->as<float>(), m, k, k,
                                                             packed->data(),
                                                             Nvfp4IntPackedBytes(m, k)));
                    OCTET_RETURN_IF_ERROR(LaunchGemvNvfp4Int(stream.get(), packed->data(), m, w,
                                                             y->as<float>(), n, false));
                  } else {
                    OCTET_RETURN_IF_ERROR(LaunchGemv(stream.get(), x->as<float>(), m, k, w,
                                                     y->as<float>(), n, false));
                  }
                }
                return Status::Ok();
              });
          if (!ms.ok()) return Fail(ms.status());
          const double bytes =
              static_cast<double>(matrix->views[0].BytesRead()) + 4.0 * m * (k + n);
          const double gbps = bytes / (*ms * 1e-3) / 1e9;
          const char* name = f == WeightFormat::kBF16 ? "bf16" : integer ? "nvfp4-int" : "nvfp4";
          std::printf("%-9s %6lld %6lld %2lld %10.2f %9.1f %7.0f%%\n", name,
                      static_cast<long long>(n), static_cast<long long>(k),
                      static_cast<long long>(m), *ms * 1e3, gbps, 100.0 * gbps / copy_gbps);
          out["gemv"].push_back({{"format", name},
                                 {"n", n},
                                 {"k", k},
                                 {"m", m},
                                 {"us_per_call", *ms * 1e3},
                                 {"gbps", gbps},
                                 {"fraction_of_copy", gbps / copy_gbps},
                                 {"weight_copies", copies}});
        }
      }
    }
  }

  // ---- prefill GEMMs through the backend ----
  // The Qwen3-8B projections: q+k+v, o, gate+up, down.
  const int64_t gemm_m = args.GetInt("gemm-rows").value_or(0);
  out["gemm"] = nlohmann::json::array();
  if (gemm_m > 0) {
    std::printf("\nprefill matmuls through the CUDA backend, %lld rows (TFLOP/s):\n",
                static_cast<long long>(gemm_m));
    std::printf("%6s %6s %10s %10s\n", "n", "k", "split", "bf16");
    struct Shape {
      int64_t n, k;
    };
    const Shape shapes[] = {{6144, 4096}, {4096, 4096}, {24576, 4096}, {4096, 12288}};
    std::unique_ptr<KernelBackend> backends[2];
    for (int mode = 0; mode < 2; ++mode) {
      // The mode is read when a backend is created.
      if (mode == 1) setenv("OCTET_CUDA_MATMUL", "bf16", 1);
      auto b = CreateCudaBackend();
      if (!b.ok()) return Fail(b.status());
      backends[mode] = std::move(*b);
    }
    unsetenv("OCTET_CUDA_MATMUL");
    for (Shape shape : shapes) {
      auto matrix = MakeMatrix(WeightFormat::kBF16, shape.n, shape.k, 1, stream);
      if (!matrix.ok()) return Fail(matrix.status());
      auto x = Activations(gemm_m * shape.k, stream);
      if (!x.ok()) return Fail(x.status());
      auto y = DeviceBuffer::Allocate(gemm_m * shape.n * sizeof(float));
      if (!y.ok()) return Fail(y.status());
      if (Status s = stream.Synchronize(); !s.ok()) return Fail(s);
      double tflops[2];
      for (int mode = 0; mode < 2; ++mode) {
        auto t = GemmTflops(*backends[mode], matrix->views[0], x->as<float>(), gemm_m,
                            y->as<float>(), static_cast<int>(*rounds), 10);
        if (!t.ok()) return Fail(t.status());
        tflops[mode] = *t;
      }
      std::printf("%6lld %6lld %10.1f %10.1f\n", static_cast<long long>(shape.n),
                  static_cast<long long>(shape.k), tflops[0], tflops[1]);
      out["gemm"].push_back({{"m", gemm_m},
                             {"n", shape.n},
                             {"k", shape.k},
                             {"split_tflops", tflops[0]},
                             {"bf16_tflops", tflops[1]}});
    }
  }

  // ---- launch cost ----
  {
    auto cost = MeasureLaunchCost(stream, static_cast<int>(*rounds));
    if (!cost.ok()) return Fail(cost.status());
    std::printf(
        "\nlaunch cost, 1000 tiny GEMVs: %.2f us to queue each, %.2f us a kernel queued one by "
        "one, %.2f us a kernel replayed as a CUDA graph\n",
        cost->queue_us, cost->stream_us, cost->graph_us);
    out["launch"] = {{"kernels", 1000},
                     {"queue_us", cost->queue_us},
                     {"stream_us_per_kernel", cost->stream_us},
                     {"graph_us_per_kernel", cost->graph_us}};
  }

  if (args.Has("json")) {
    std::ofstream f(args.GetString("json"));
    f << out.dump(2) << "\n";
    if (!f) {
      std::cerr << "bench_cuda: cannot write " << args.GetString("json") << "\n";
      return 1;
    }
  }
  return 0;
}
