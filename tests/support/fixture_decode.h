// The fixture models (fixture_reference.h) decoded as the engine's tests
// drive them on any backend: the CPU fixture tests and test_cuda_engine
// share these, so both check the same steps.
#pragma once

#include <QtGlobal>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

#include "fixture_reference.h"
#include "octet/engine/model.h"

namespace octet::test {

// The mixture-of-experts fixtures.
inline constexpr const char* kMoeFixtures[] = {"qwen3-moe-tiny", "glm4-moe-tiny",
                                               "glm4-moe-tiny-nvfp4"};

// Three sequences decoding together: the first the reference's prompt fed
// its generated ids, the others shorter prefixes of the prompt, greedy. The
// engine's grouped-experts setting is `grouped` for the run (then unset
// again). Returns each step's logits, a row a sequence.
inline std::vector<std::vector<float>> BatchedFixtureDecode(engine::Model& m,
                                                            const FixtureReference& ref,
                                                            std::optional<bool> grouped) {
  m.set_grouped_experts(grouped);
  engine::KvCache cache = *m.NewKvCache(3, ref.T + 1);
  std::vector<engine::SequenceChunk> batch(3);
  for (int i = 0; i < 3; ++i) {
    batch[i].slot = i;
    batch[i].tokens.assign(ref.prompt.begin(), ref.prompt.end() - i);
  }
  engine::ForwardOutput out;
  std::vector<std::vector<float>> steps;
  for (size_t j = 0; j + 1 < ref.generated.size(); ++j) {
    const Status s = m.Forward(batch, cache, &out);
    if (!s.ok()) qFatal("%s", s.ToString().c_str());
    steps.emplace_back(out.logits.begin(), out.logits.end());
    for (int i = 0; i < 3; ++i) {
      const float* row = out.Last(i);
      batch[i].start_pos = cache.length(i);
      batch[i].tokens = {i == 0 ? ref.generated[j]
                                : static_cast<int32_t>(std::max_element(row, row + ref.V) - row)};
    }
  }
  m.set_grouped_experts(std::nullopt);
  return steps;
}

// One sequence: the reference's prompt, then its generated ids one at a time
// (each step's input the reference's, not the model's choice). Returns each
// step's logits.
inline std::vector<std::vector<float>> SingleFixtureDecode(engine::Model& m,
                                                           const FixtureReference& ref) {
  engine::KvCache cache = *m.NewKvCache(1, ref.T + 1);
  engine::SequenceChunk ch;
  ch.tokens = ref.prompt;
  engine::ForwardOutput out;
  std::vector<std::vector<float>> steps;
  for (size_t j = 0; j < ref.generated.size(); ++j) {
    const Status s = m.Forward({ch}, cache, &out);
    if (!s.ok()) qFatal("%s", s.ToString().c_str());
    steps.emplace_back(out.Last(0), out.Last(0) + ref.V);
    ch.start_pos = cache.length(0);
    ch.tokens = {ref.generated[j]};
  }
  return steps;
}

// The largest |got - want| over one row of logits against the reference's
// row `row`; infinity where one is NaN.
inline double FixtureRowDiff(const float* got, int64_t row, const FixtureReference& ref) {
  double m = 0;
  for (int64_t c = 0; c < ref.V; ++c) {
    const double d = std::fabs(double(got[c]) - double(ref.logits[row * ref.V + c]));
    if (std::isnan(d)) return INFINITY;
    m = std::max(m, d);
  }
  return m;
}

}  // namespace octet::test
