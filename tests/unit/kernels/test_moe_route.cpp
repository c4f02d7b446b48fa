// MoeRouteToken (octet/kernels/moe_route.h: the router the engine runs on the
// host and the CUDA backend on the device) against the routing written out
// with sorts, as transformers and vLLM describe it: softmax or sigmoid
// scores, the sigmoid router's groups ranked by the sum of their two best
// biased scores (a stable sort: ties to the lower group), the top-k by
// (score descending, index ascending) as torch.topk on CPU, and the weights.
// The fixture models route through it too (test_engine_fixtures); here the
// inputs are the ones fixtures rarely hold: ties everywhere, equal group
// scores, experts of dropped groups, every k.
#include <QtTest>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "octet/kernels/moe_route.h"

using octet::kernels::MoeRouteSpec;

namespace {

struct Routed {
  std::vector<int32_t> chosen;
  std::vector<float> weight;
};

Routed Reference(const MoeRouteSpec& m, const std::vector<float>& logits,
                 const std::vector<float>& bias) {
  const int32_t E = m.num_experts, k = m.experts_per_token;
  std::vector<float> score(E), choice(E);
  if (!m.sigmoid) {
    const float mx = *std::max_element(logits.begin(), logits.end());
    float sum = 0.0f;
    for (int32_t e = 0; e < E; ++e) sum += score[e] = std::exp(logits[e] - mx);
    for (int32_t e = 0; e < E; ++e) choice[e] = score[e] /= sum;
  } else {
    for (int32_t e = 0; e < E; ++e) {
      score[e] = 1.0f / (1.0f + std::exp(-logits[e]));
      choice[e] = score[e] + (bias.empty() ? 0.0f : bias[e]);
    }
    if (m.n_group > 1 && m.topk_group < m.n_group) {
      const int32_t per = E / m.n_group;
      std::vector<float> gs(m.n_group);
      for (int32_t g = 0; g < m.n_group; ++g) {
        std::vector<float> v(choice.begin() + g * per, choice.begin() + (g + 1) * per);
        std::sort(v.begin(), v.end(), std::greater<float>());
        gs[g] = v[0] + (per > 1 ? v[1] : -INFINITY);
      }
      std::vector<int32_t> order(m.n_group);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [&](int32_t a, int32_t b) { return gs[a] > gs[b]; });
      for (int32_t r = m.topk_group; r < m.n_group; ++r) {
        for (int32_t e = order[r] * per; e < (order[r] + 1) * per; ++e) choice[e] = -INFINITY;
      }
    }
  }
  std::vector<int32_t> order(E);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return choice[a] > choice[b]; });
  Routed r;
  float sum = 0.0f;
  for (int32_t i = 0; i < k; ++i) sum += score[order[i]];
  for (int32_t i = 0; i < k; ++i) {
    r.chosen.push_back(order[i]);
    float v = score[order[i]];
    if (m.norm_topk_prob) v /= m.sigmoid ? sum + 1e-20f : sum;
    r.weight.push_back(m.sigmoid ? v * m.routed_scaling_factor : v);
  }
  return r;
}

Routed Route(const MoeRouteSpec& m, const std::vector<float>& logits,
             const std::vector<float>& bias) {
  std::vector<float> score(m.num_experts), choice(m.num_experts), group(m.n_group);
  Routed r;
  r.chosen.resize(m.experts_per_token);
  r.weight.resize(m.experts_per_token);
  octet::kernels::MoeRouteToken(m, logits.data(), bias.empty() ? nullptr : bias.data(),
                                score.data(), choice.data(), group.data(), r.chosen.data(),
                                r.weight.data());
  return r;
}

}  // namespace

class TestMoeRoute : public QObject {
  Q_OBJECT
 private slots:
  // Random routers and logits drawn from a handful of values, so that ties
  // between experts and between groups are the rule.
  void matchesTheSortedReference() {
    std::mt19937 rng(7);
    int cases = 0, tied_groups = 0;
    for (int trial = 0; trial < 4000; ++trial) {
      MoeRouteSpec m;
      const int32_t groups[] = {1, 2, 4, 8};
      m.n_group = groups[rng() % 4];
      m.num_experts = m.n_group * static_cast<int32_t>(1 + rng() % 8);
      m.sigmoid = rng() % 2;
      if (!m.sigmoid) m.n_group = 1;
      m.topk_group = 1 + static_cast<int32_t>(rng() % m.n_group);
      m.experts_per_token = 1 + static_cast<int32_t>(rng() % std::min<int32_t>(m.num_experts, 8));
      // Enough experts in the kept groups (as the configs guarantee).
      const int32_t kept = m.topk_group * (m.num_experts / m.n_group);
      if (m.sigmoid && m.n_group > 1 && m.topk_group < m.n_group && m.experts_per_token > kept) {
        m.experts_per_token = kept;
      }
      m.norm_topk_prob = rng() % 2;
      m.routed_scaling_factor = m.sigmoid ? 2.5f : 1.0f;
      const float levels[] = {-2.0f, -0.5f, 0.0f, 0.25f, 1.0f, 3.0f};
      std::vector<float> logits(m.num_experts), bias;
      for (float& l : logits) l = levels[rng() % 6];
      if (m.sigmoid && rng() % 2) {
        bias.resize(m.num_experts);
        for (float& b : bias) b = levels[rng() % 3] * 0.01f;
      }
      const Routed want = Reference(m, logits, bias);
      const Routed got = Route(m, logits, bias);
      const std::string what =
          "trial " + std::to_string(trial) + ": " + std::to_string(m.experts_per_token) + " of " +
          std::to_string(m.num_experts) + " experts, " + std::to_string(m.topk_group) + " of " +
          std::to_string(m.n_group) + " groups, " + (m.sigmoid ? "sigmoid" : "softmax");
      QVERIFY2(got.chosen == want.chosen, what.c_str());
      QVERIFY2(got.weight == want.weight, what.c_str());
      ++cases;
      tied_groups += m.sigmoid && m.n_group > 1 && m.topk_group < m.n_group;
    }
    qInfo("%d routers, %d with dropped groups", cases, tied_groups);
    QVERIFY(tied_groups > 500);
  }

  // GLM-4.5's shape (160 experts in 8 groups, 4 kept, 8 a token) and
  // Qwen3-MoE's (128 experts, softmax, 8 a token) on continuous logits.
  void realShapes() {
    std::mt19937 rng(11);
    std::normal_distribution<float> nd(0.0f, 2.0f);
    for (int trial = 0; trial < 200; ++trial) {
      MoeRouteSpec m;
      m.sigmoid = trial % 2;
      m.num_experts = m.sigmoid ? 160 : 128;
      m.n_group = m.sigmoid ? 8 : 1;
      m.topk_group = m.sigmoid ? 4 : 1;
      m.experts_per_token = 8;
      m.norm_topk_prob = true;
      m.routed_scaling_factor = m.sigmoid ? 2.5f : 1.0f;
      std::vector<float> logits(m.num_experts), bias;
      for (float& l : logits) l = nd(rng);
      if (m.sigmoid) {
        bias.resize(m.num_experts);
        for (float& b : bias) b = nd(rng) * 0.01f;
      }
      const Routed want = Reference(m, logits, bias);
      const Routed got = Route(m, logits, bias);
      QCOMPARE(got.chosen, want.chosen);
      QCOMPARE(got.weight, want.weight);
    }
  }
};

QTEST_APPLESS_MAIN(TestMoeRoute)
#include "test_moe_route.moc"
