// Backend registry: which backends this build has, which this machine runs.
#include "octet/kernels/backend.h"

#include <cstdlib>
#include <iterator>
#include <memory>
#include <mutex>

#if defined(__x86_64__)
#include <cpuid.h>
#endif
#if defined(__aarch64__)
#include <sys/auxv.h>
#endif

#include "cpu/cpu_backend.h"
#include "octet/base/log.h"

namespace octet::kernels {
namespace {

#if defined(__x86_64__)
// F16C from CPUID leaf 1 (ECX bit 29): clang before 15 has no "f16c" for
// __builtin_cpu_supports, and the fuzz build is clang.
bool HasF16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return false;
  return (ecx & (1u << 29)) != 0;
}
#endif

[[maybe_unused]] bool HasAvx2() {  // unused on aarch64
#if defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && HasF16c();
#else
  return false;
#endif
}

[[maybe_unused]] bool HasAvx512() {  // unused on aarch64
#if defined(__x86_64__)
  return HasAvx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512vbmi");
#else
  return false;
#endif
}

#if defined(__aarch64__)
// The aarch64 extensions the NEON tables use, as Linux reports them (the
// HWCAP bits of <asm/hwcap.h>, spelt out for older headers).
bool HasDotprod() { return (getauxval(AT_HWCAP) & (1ul << 20)) != 0; }  // HWCAP_ASIMDDP
bool HasBf16() {
  return HasDotprod() && (getauxval(AT_HWCAP2) & (1ul << 14)) != 0;  // HWCAP2_BF16
}
#endif

#if defined(__x86_64__)
// avx512-rows runs on every AVX-512 CPU (so the tests check it everywhere) but
// is auto's choice on AMD's only: measured faster there (Zen 4); Intel's
// AVX-512 machines keep the kernels measured on them (docs/performance.md).
bool IsAmd() {
  __builtin_cpu_init();
  return __builtin_cpu_is("amd");
}
#endif

const cpu::IsaKernels* IsaFor(std::string_view name) {
  if (name == "scalar") return &cpu::ScalarKernels();
#if defined(__x86_64__)
  if (name == "avx2" && HasAvx2()) return &cpu::Avx2Kernels();
  if (name == "avx512" && HasAvx512()) return &cpu::Avx512Kernels();
  if (name == "avx512-amx" && HasAvx512() && cpu::AmxUsable()) return &cpu::AmxKernels();
  if (name == "avx512-rows" && HasAvx512()) return &cpu::Avx512RowsKernels();
#endif
#if defined(__aarch64__)
  if (name == "neon") return &cpu::NeonKernels();
  if (name == "neon-dotprod" && HasDotprod()) return &cpu::NeonDotprodKernels();
  if (name == "neon-bf16" && HasBf16()) return &cpu::NeonBf16Kernels();
#endif
  return nullptr;
}

// OCTET_CPU_MATMUL=bf16: prefill GEMMs of BF16 (and NVFP4) weights with the
// activations rounded to BF16, on VDPBF16PS (isa_avx512_gemm.cpp), for the
// AVX-512 tables without AMX on CPUs with AVX512-BF16; unset or "exact":
// f32 activations. Said in one line a process for each way it goes.
void ApplyMatmulMode(const std::string& backend, cpu::IsaKernels* table) {
  const char* mode = std::getenv("OCTET_CPU_MATMUL");
  if (mode == nullptr || *mode == '\0' || std::string_view(mode) == "exact") return;
  static std::once_flag said_unknown;
  if (std::string_view(mode) != "bf16") {
    std::call_once(said_unknown, [&] {
      OCTET_LOG(WARNING) << "OCTET_CPU_MATMUL='" << mode
                         << "' is not a CPU matmul mode (bf16 or exact); using exact";
    });
    return;
  }
  bool applied = false;
#if defined(__x86_64__)
  if (backend == "avx512" || backend == "avx512-rows") {
    applied = cpu::AddAvx512Bf16GemmKernels(table);
  }
#endif
  // Once for each outcome: a process that creates a scalar backend first and
  // an AVX-512 one later still says that the mode applied.
  static std::once_flag said_applied, said_not;
  if (applied) {
    std::call_once(said_applied, [&] {
      OCTET_LOG(INFO) << "OCTET_CPU_MATMUL=bf16: " << backend
                      << " prefill GEMMs round activations to BF16 (VDPBF16PS)";
    });
  } else {
    std::call_once(said_not, [&] {
      OCTET_LOG(INFO) << "OCTET_CPU_MATMUL=bf16: not for backend " << backend
                      << " (only avx512 and avx512-rows on a CPU with AVX512-BF16); "
                         "activations stay f32";
    });
  }
}

}  // namespace

std::string_view MemoryKindName(MemoryKind kind) {
  switch (kind) {
    case MemoryKind::kHost:
      return "host";
    case MemoryKind::kDevice:
      return "device";
    case MemoryKind::kHostPinned:
      return "host-pinned";
  }
  return "?";
}

Result<MemoryBudget> KernelBackend::AvailableMemory(const std::string& meminfo_path) const {
  OCTET_ASSIGN_OR_RETURN(const MemInfo mi, ReadMemInfo(meminfo_path));
  return MemoryBudget{static_cast<int64_t>(mi.available_bytes), "MemAvailable"};
}

MemoryBudget DeviceMemoryBudget(int64_t device_free, bool unified, const Result<MemInfo>& meminfo) {
  const std::string driver = "the device's free memory (cudaMemGetInfo)";
  if (!unified || !meminfo.ok()) return {device_free, driver};
  const auto available = static_cast<int64_t>(meminfo->available_bytes);
  auto mib = [](int64_t b) { return std::to_string((b + (1 << 19)) >> 20) + " MiB"; };
  if (available > device_free) {
    return {available, "MemAvailable (unified memory: the driver's free figure, " +
                           mib(device_free) + ", leaves out the page cache)"};
  }
  return {device_free, driver + " (unified memory; MemAvailable " + mib(available) + ")"};
}

std::string_view OpName(Op op) {
  static constexpr std::string_view kNames[] = {"matmul",
                                                "gemm",
                                                "embedding",
                                                "rms_norm",
                                                "rope",
                                                "attention",
                                                "kv_store",
                                                "silu_mul",
                                                "relu2",
                                                "add",
                                                "add_row_vector",
                                                "fill",
                                                "gather_rows",
                                                "scatter_add_rows",
                                                "scale",
                                                "soft_cap",
                                                "softmax",
                                                "argmax",
                                                "top_k",
                                                "matmul_grouped",
                                                "matmul_scatter_add"};
  static_assert(std::size(kNames) == static_cast<size_t>(Op::kCount));
  const auto i = static_cast<size_t>(op);
  return i < std::size(kNames) ? kNames[i] : "?";
}

std::string_view KvDtypeName(KvDtype dtype) { return dtype == KvDtype::kF16 ? "f16" : "f32"; }

int64_t KvDtypeBytes(KvDtype dtype) { return dtype == KvDtype::kF16 ? 2 : 4; }

Result<KvDtype> ParseKvDtype(std::string_view name) {
  if (name == "f32" || name == "float32") return KvDtype::kF32;
  if (name == "f16" || name == "float16") return KvDtype::kF16;
  return InvalidArgumentError("unknown KV cache type '" + std::string(name) +
                              "' (choose f32 or f16)");
}

std::vector<BackendInfo> ProbeBackends() {
  std::vector<BackendInfo> out;
  out.push_back({"scalar", "portable C++ reference kernels", true});
#if defined(__x86_64__)
  out.push_back({"avx2", "x86-64 AVX2 + FMA + F16C, prefill attention in 8-row tiles", HasAvx2()});
  out.push_back({"avx512",
                 "x86-64 AVX2, with AVX-512 (F/BW/DQ/VL/VBMI) NVFP4 and batched-decode kernels "
                 "(and, with VNNI, NVFP4 single-row decode from a tile copy), prefill attention "
                 "in 16-row tiles",
                 HasAvx512()});
  out.push_back({"avx512-amx", "x86-64 AVX-512, with AMX-BF16 batched decode of BF16 weights",
                 HasAvx512() && cpu::AmxUsable()});
  out.push_back({"avx512-rows",
                 "x86-64 AVX-512, with single-row decode reading BF16/F16 weights a row and NVFP4 "
                 "tiles a 16-row group at a time (one memory stream a core), batched decode with "
                 "the activations in registers, F32 rows of up to 2048 columns in 512-bit lanes "
                 "for every batch size (auto's choice on AMD CPUs)",
                 HasAvx512(), IsAmd()});
#endif
#if defined(__aarch64__)
  out.push_back({"neon", "aarch64 NEON (every aarch64 CPU)", true});
  out.push_back({"neon-dotprod", "aarch64 NEON, with SDOT NVFP4 decode from tiles", HasDotprod()});
  out.push_back({"neon-bf16",
                 "aarch64 NEON with SDOT, and BFMMLA batched decode and prefill of BF16 and NVFP4 "
                 "weights",
                 HasBf16()});
#endif
  return out;
}

Result<std::unique_ptr<KernelBackend>> CreateBackend(std::string_view name,
                                                     const BackendOptions& options) {
  // A thread each is created up front: a count no machine has would end in
  // std::system_error from thread creation instead of an error.
  constexpr int kMaxThreads = 4096;
  if (options.threads > kMaxThreads) {
    return InvalidArgumentError("--threads " + std::to_string(options.threads) +
                                " is more than a backend takes (at most " +
                                std::to_string(kMaxThreads) + ")");
  }
  std::string chosen(name);
  if (name == "auto") {
    chosen = "scalar";
    for (const auto& b : ProbeBackends()) {
      if (b.available && b.auto_choice && b.name != "scalar") chosen = b.name;
    }
  }
  const cpu::IsaKernels* isa = IsaFor(chosen);
  if (!isa) {
    std::string known;
    for (const auto& b : ProbeBackends()) {
      if (!known.empty()) known += ", ";
      known += b.name + (b.available ? "" : " (not on this CPU)");
    }
    return InvalidArgumentError("kernel backend '" + std::string(name) +
                                "' is not available here (backends: " + known + ", auto)");
  }
  cpu::IsaKernels table = *isa;
  ApplyMatmulMode(chosen, &table);
  return std::unique_ptr<KernelBackend>(new cpu::CpuBackend(table, options.threads));
}

}  // namespace octet::kernels
