// A ModelRunner that hands every call to a LocalRunner of one model, for
// tests that change one thing about a runner: override Step to throttle it,
// fail it, time it on a manual clock, or CopySlot to refuse copies.
#pragma once

#include <cstdint>
#include <vector>

#include "octet/engine/model_runner.h"

namespace octet::test {

class ForwardingRunner : public engine::ModelRunner {
 public:
  explicit ForwardingRunner(engine::Model& model) : inner_(model) {}

  const engine::ModelConfig& config() const override { return inner_.config(); }
  kernels::KernelBackend& backend() override { return inner_.backend(); }
  Status ResetCache(int num_slots, int64_t capacity, kernels::KvDtype dtype) override {
    return inner_.ResetCache(num_slots, capacity, dtype);
  }
  int cache_slots() const override { return inner_.cache_slots(); }
  int64_t cache_capacity() const override { return inner_.cache_capacity(); }
  int64_t cache_bytes() const override { return inner_.cache_bytes(); }
  Status Step(const std::vector<engine::SequenceChunk>& batch,
              engine::ForwardOutput* out) override {
    return inner_.Step(batch, out);
  }
  Status CopySlot(int src, int dst, int64_t positions) override {
    return inner_.CopySlot(src, dst, positions);
  }
  engine::RunnerStats stats() const override { return inner_.stats(); }
  engine::Model* local_model() override { return inner_.local_model(); }
  int64_t mtp_layers() const override { return inner_.mtp_layers(); }
  Status MtpDraftBatch(const std::vector<engine::MtpDraftRequest>& requests,
                       std::vector<std::vector<int32_t>>* drafts,
                       std::vector<float>* logits = nullptr) override {
    return inner_.MtpDraftBatch(requests, drafts, logits);
  }

 protected:
  engine::LocalRunner inner_;
};

}  // namespace octet::test
