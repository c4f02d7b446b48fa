// Sampling and the single-request generation loop (prefill the prompt, then
// decode one token at a time through the KV cache), as `octet generate` uses
// it. A serving scheduler drives Model::Forward itself with many sequences and
// uses Sampler per request.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "octet/base/status.h"
#include "octet/engine/model.h"
#include "octet/engine/model_runner.h"
#include "octet/kernels/backend.h"

namespace octet::engine {

struct SamplingParams {
  float temperature = 0.0f;  // 0: greedy (argmax)
  int64_t top_k = 0;         // 0: no limit
  float top_p = 1.0f;        // 1: no limit
  uint64_t seed = 0;
};

// Validates ranges (temperature >= 0, top_k >= 0, 0 < top_p <= 1).
Status ValidateSampling(const SamplingParams& p);

// Draws token ids from logits. Deterministic for a given seed and logits.
class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);
  // `logits` in host memory; `backend` the model's (its Argmax/TopK are used
  // when its ops read host memory).
  int32_t Sample(const float* logits, int64_t vocab, kernels::KernelBackend& backend);

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<int32_t> idx_;
  std::vector<float> val_;
  std::shared_ptr<kernels::KernelBackend> host_ops_;  // for a device backend's logits
};

struct GenerateOptions {
  int64_t max_tokens = 16;  // tokens to generate (>= 1)
  SamplingParams sampling;
  bool stop_at_eos = true;        // stop after emitting an id in stop_ids
  std::vector<int32_t> stop_ids;  // empty: the model's eos_token_ids
  // Keep the logits of every position of prompt + generated[:-1] (row t
  // predicts token t+1): the layout of `--logits-out` and the fixtures.
  bool collect_logits = false;
  kernels::KvDtype kv_dtype = kernels::KvDtype::kF32;  // KV cache element type
  // Called with each new id as soon as it is chosen; return false to stop.
  std::function<bool(int32_t id)> on_token;
};

struct GenerateResult {
  std::vector<int32_t> ids;   // generated ids
  std::vector<float> logits;  // [logits_rows, vocab] when collect_logits
  int64_t logits_rows = 0;
  int64_t vocab = 0;
  int64_t prompt_tokens = 0;
  double prefill_seconds = 0;  // prompt forward + first sample
  double decode_seconds = 0;   // the remaining steps
  int64_t decode_steps = 0;    // forward passes after the prefill
  std::string stop_reason;     // "length", "eos", "callback"

  double prefill_tps() const { return prefill_seconds > 0 ? prompt_tokens / prefill_seconds : 0; }
  double decode_tps() const { return decode_seconds > 0 ? decode_steps / decode_seconds : 0; }
  double ttft_ms() const { return prefill_seconds * 1e3; }
};

Result<GenerateResult> Generate(Model& model, const std::vector<int32_t>& prompt,
                                const GenerateOptions& options);
// The same over any runner (a tensor-parallel group's rank 0): its KV cache is
// reset to one slot of prompt + max_tokens positions.
Result<GenerateResult> Generate(ModelRunner& runner, const std::vector<int32_t>& prompt,
                                const GenerateOptions& options);

}  // namespace octet::engine
