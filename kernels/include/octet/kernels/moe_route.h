// A mixture-of-experts router's choice for one token, as an inline function
// that compiles for the host and, under nvcc, for the device (OCTET_HD,
// format_decode.h): the engine routes with it on the host, and the CUDA
// backend's on-device routing (MoeDecode) runs the same code, so the CPU
// fixture tests check the arithmetic the device runs.
//
// In float32, as transformers computes it from the router's logits:
//   softmax router (Qwen3-MoE): p = softmax(logits); the top-k p; weight
//     p / sum(p chosen) with norm_topk_prob, else p.
//   sigmoid router (GLM-4.5): s = sigmoid(logits); b = s + bias chooses:
//     groups ranked by the sum of their two largest b, the topk_group best
//     kept (ties to the lower group, as a stable sort), the top-k b among
//     their experts; weight s / (sum(s chosen) + 1e-20) with norm_topk_prob,
//     else s; times routed_scaling_factor.
// Ties go to the lower index, as torch.topk does on CPU. The exponentials
// are the platform's expf (glibc's on the host, CUDA's on the device, each
// within 2 ulp), so the two may differ in the last bits of a weight.
#pragma once

#include <cmath>
#include <cstdint>

#include "octet/kernels/format_decode.h"

namespace octet::kernels {

struct MoeRouteSpec {
  int32_t num_experts = 0;
  int32_t experts_per_token = 0;
  bool sigmoid = false;  // GLM-4.5's scoring; otherwise softmax
  bool norm_topk_prob = false;
  // Sigmoid routers: experts in n_group consecutive groups, of which the
  // topk_group best compete (1 / 1: no limit).
  int32_t n_group = 1;
  int32_t topk_group = 1;
  float routed_scaling_factor = 1.0f;  // sigmoid routers
};

// Token with router logits `logits` [num_experts] to experts_per_token
// (expert, weight) pairs in `chosen` / `weight`, best first. `bias`: the
// sigmoid router's score-correction bias [num_experts], or null. Scratch:
// `score` and `choice` [num_experts], `group_score` [n_group].
OCTET_HD inline void MoeRouteToken(const MoeRouteSpec& m, const float* logits, const float* bias,
                                   float* score, float* choice, float* group_score, int32_t* chosen,
                                   float* weight) {
  const int32_t E = m.num_experts, k = m.experts_per_token;
  if (!m.sigmoid) {
    float mx = logits[0];
    for (int32_t e = 1; e < E; ++e) mx = mx < logits[e] ? logits[e] : mx;
    float sum = 0.0f;
    for (int32_t e = 0; e < E; ++e) {
      score[e] = expf(logits[e] - mx);
      sum += score[e];
    }
    for (int32_t e = 0; e < E; ++e) choice[e] = score[e] = score[e] / sum;
  } else {
    for (int32_t e = 0; e < E; ++e) {
      score[e] = 1.0f / (1.0f + expf(-logits[e]));
      choice[e] = score[e] + (bias ? bias[e] : 0.0f);
    }
    if (m.n_group > 1 && m.topk_group < m.n_group) {
      const int32_t per = E / m.n_group;
      for (int32_t g = 0; g < m.n_group; ++g) {
        float a = -INFINITY, b = -INFINITY;  // the two largest choices of group g
        for (int32_t e = g * per; e < (g + 1) * per; ++e) {
          const float v = choice[e];
          if (v > a) {
            b = a;
            a = v;
          } else if (v > b) {
            b = v;
          }
        }
        group_score[g] = a + b;
      }
      // A group ranks behind those with a larger score and the lower ones
      // with an equal score; experts of the groups ranked topk_group or
      // later cannot be chosen (vLLM: -inf).
      for (int32_t g = 0; g < m.n_group; ++g) {
        int32_t rank = 0;
        for (int32_t h = 0; h < m.n_group; ++h) {
          rank += group_score[h] > group_score[g] || (group_score[h] == group_score[g] && h < g);
        }
        if (rank < m.topk_group) continue;
        for (int32_t e = g * per; e < (g + 1) * per; ++e) choice[e] = -INFINITY;
      }
    }
  }
  // The k best choices, best first, ties to the lower index: each pass takes
  // the first of the largest among those not yet taken.
  for (int32_t i = 0; i < k; ++i) {
    int32_t best = -1;
    for (int32_t e = 0; e < E; ++e) {
      bool taken = false;
      for (int32_t j = 0; j < i; ++j) taken = taken || chosen[j] == e;
      if (!taken && (best < 0 || choice[e] > choice[best])) best = e;
    }
    chosen[i] = best;
  }
  float sum = 0.0f;
  for (int32_t i = 0; i < k; ++i) sum += score[chosen[i]];
  for (int32_t i = 0; i < k; ++i) {
    float v = score[chosen[i]];
    if (m.norm_topk_prob) v /= m.sigmoid ? sum + 1e-20f : sum;
    weight[i] = m.sigmoid ? v * m.routed_scaling_factor : v;
  }
}

}  // namespace octet::kernels
