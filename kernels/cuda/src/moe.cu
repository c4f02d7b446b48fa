// Mixture-of-experts decode with the routing on the device (cuda_ops.h):
// the router's choice per token and the router-weighted sum of the chosen
// experts' outputs. Between them LaunchGemvRouted (gemv.cu) runs the
// experts' matrices from a device table, so a layer needs no host round
// trip: without these the engine copies the router's logits to the host,
// waits for them, routes there and uploads the result, every layer.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "cuda_check.h"
#include "device_util.cuh"
#include "octet/kernels/cuda/cuda_ops.h"
#include "octet/kernels/moe_route.h"

namespace octet::kernels::cuda {
namespace {

// Experts a token may take here (local arrays of the routing kernel).
constexpr int kMaxExpertsPerToken = 16;
// Experts a router may have: its two scratch rows live in shared memory.
constexpr int kMaxExperts = 4096;

// One block a token; its first thread runs MoeRouteToken, the code the
// engine routes with on the host (a few thousand instructions for 128
// experts, microseconds, against the round trip it replaces), then writes
// the pairs in increasing expert order.
__global__ void MoeRouteKernel(const float* logits, const MoeRouteSpec spec, const float* bias,
                               int32_t* chosen, float* weight) {
  extern __shared__ float scratch[];  // score, choice [E], group_score [n_group]
  if (threadIdx.x != 0) return;
  const int64_t t = blockIdx.x;
  const int32_t E = spec.num_experts, k = spec.experts_per_token;
  int32_t c[kMaxExpertsPerToken];
  float w[kMaxExpertsPerToken];
  MoeRouteToken(spec, logits + t * E, bias, scratch, scratch + E, scratch + 2 * E, c, w);
  for (int32_t i = 1; i < k; ++i) {  // insertion sort by expert id
    const int32_t ci = c[i];
    const float wi = w[i];
    int32_t j = i - 1;
    for (; j >= 0 && c[j] > ci; --j) {
      c[j + 1] = c[j];
      w[j + 1] = w[j];
    }
    c[j + 1] = ci;
    w[j + 1] = wi;
  }
  for (int32_t i = 0; i < k; ++i) {
    chosen[t * k + i] = c[i];
    weight[t * k + i] = w[i];
  }
}

__global__ void MoeCombineKernel(const float* y, const float* weight, int64_t k, int64_t n,
                                 float* out, int64_t ldo) {
  const int64_t t = blockIdx.y;
  OCTET_GRID_STRIDE(c, n) {
    float o = out[t * ldo + c];
    for (int64_t j = 0; j < k; ++j) {
      // ScatterAddRowsKernel's expression (no fused multiply-add).
      o = __fadd_rn(o, __fmul_rn(weight[t * k + j], y[(t * k + j) * n + c]));
    }
    out[t * ldo + c] = o;
  }
}

}  // namespace

Status LaunchMoeRoute(CUstream_st* stream, const float* logits, int64_t tokens,
                      const MoeRouteSpec& spec, const float* bias, int32_t* chosen, float* weight) {
  if (tokens == 0) return Status::Ok();
  const int32_t E = spec.num_experts, k = spec.experts_per_token;
  if (tokens < 0 || tokens > 65535 || !logits || !chosen || !weight) {
    return InvalidArgumentError("LaunchMoeRoute: " + std::to_string(tokens) +
                                " tokens (0..65535) or a null pointer");
  }
  if (E < 1 || E > kMaxExperts || k < 1 || k > kMaxExpertsPerToken || k > E) {
    return InvalidArgumentError("LaunchMoeRoute: " + std::to_string(k) + " of " +
                                std::to_string(E) + " experts a token (at most " +
                                std::to_string(kMaxExpertsPerToken) + " of " +
                                std::to_string(kMaxExperts) + ")");
  }
  if (spec.n_group < 1 || spec.topk_group < 1 || E % spec.n_group != 0) {
    return InvalidArgumentError("LaunchMoeRoute: " + std::to_string(spec.n_group) +
                                " groups (topk_group " + std::to_string(spec.topk_group) +
                                ") do not split " + std::to_string(E) + " experts");
  }
  const size_t shared = (2 * static_cast<size_t>(E) + spec.n_group) * sizeof(float);
  if (shared > 48 * 1024) {
    return InvalidArgumentError("LaunchMoeRoute: " + std::to_string(spec.n_group) + " groups and " +
                                std::to_string(E) +
                                " experts need more than 48 KiB of shared memory");
  }
  cudaStream_t cs = stream;
  MoeRouteKernel<<<static_cast<unsigned>(tokens), kWarpSize, shared, cs>>>(logits, spec, bias,
                                                                           chosen, weight);
  return CheckLaunch("MoeRouteKernel");
}

Status LaunchMoeCombine(CUstream_st* stream, const float* y, const float* weight, int64_t tokens,
                        int64_t k, int64_t n, float* out, int64_t ldo) {
  if (tokens == 0 || n == 0 || k == 0) return Status::Ok();
  if (tokens < 0 || tokens > 65535 || k < 0 || n < 0 || !y || !weight || !out || ldo < n) {
    return InvalidArgumentError("LaunchMoeCombine: " + std::to_string(tokens) +
                                " tokens (0..65535), a null pointer or out rows " +
                                std::to_string(ldo) + " < " + std::to_string(n) + " apart");
  }
  constexpr int kThreads = 128;
  const int64_t blocks = CeilDiv(n, kThreads);
  cudaStream_t cs = stream;
  MoeCombineKernel<<<dim3(static_cast<unsigned>(blocks < 65535 ? blocks : 65535),
                          static_cast<unsigned>(tokens)),
                     kThreads, 0, cs>>>(y, weight, k, n, out, ldo);
  return CheckLaunch("MoeCombineKernel");
}

}  // namespace octet::kernels::cuda
