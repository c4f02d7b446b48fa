#include "octet/engine/generate.h"

#include <algorithm>
#include <cmath>

#include "octet/base/deadline.h"

namespace octet::engine {

Status ValidateSampling(const SamplingParams& p) {
  if (!(p.temperature >= 0.0f) || !std::isfinite(p.temperature)) {
    return InvalidArgumentError("temperature must be >= 0");
  }
  if (p.top_k < 0) return InvalidArgumentError("top-k must be >= 0");
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) return InvalidArgumentError("top-p must be in (0, 1]");
  return Status::Ok();
}

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {}

int32_t Sampler::Sample(const float* logits, int64_t vocab, kernels::KernelBackend& backend) {
  // The logits are host memory (ForwardOutput): the model's backend runs
  // Argmax and TopK on them only where its ops read host memory; a device
  // backend's sampler uses the scalar CPU backend instead.
  kernels::KernelBackend* ops = &backend;
  if (backend.memory_kind() == kernels::MemoryKind::kDevice) {
    if (!host_ops_)
      host_ops_ = std::shared_ptr<kernels::KernelBackend>(
          std::move(*kernels::CreateBackend("scalar", {1})));
    ops = host_ops_.get();
  }
  if (params_.temperature == 0.0f) return static_cast<int32_t>(ops->Argmax(logits, vocab));
  const int64_t k = params_.top_k > 0 ? std::min(params_.top_k, vocab) : vocab;
  idx_.resize(k);
  val_.resize(k);
  ops->TopK(logits, vocab, k, idx_.data(), val_.data());  // descending
  // Softmax of the candidates at this temperature (double for the sums).
  std::vector<double> p(k);
  const double mx = val_[0];
  double z = 0;
  for (int64_t i = 0; i < k; ++i) {
    p[i] = std::isfinite(val_[i]) ? std::exp((val_[i] - mx) / params_.temperature) : 0.0;
    z += p[i];
  }
  int64_t keep = k;
  if (params_.top_p < 1.0f) {
    double cum = 0;
    for (int64_t i = 0; i < k; ++i) {
      cum += p[i] / z;
      if (cum >= params_.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  double zk = 0;
  for (int64_t i = 0; i < keep; ++i) zk += p[i];
  const double u = std::uniform_real_distribution<double>(0.0, zk)(rng_);
  double cum = 0;
  for (int64_t i = 0; i < keep; ++i) {
    cum += p[i];
    if (u < cum) return idx_[i];
  }
  return idx_[keep - 1];
}

Result<GenerateResult> Generate(Model& model, const std::vector<int32_t>& prompt,
                                const GenerateOptions& options) {
  LocalRunner runner(model);
  return Generate(runner, prompt, options);
}

Result<GenerateResult> Generate(ModelRunner& model, const std::vector<int32_t>& prompt,
                                const GenerateOptions& options) {
  if (prompt.empty()) return InvalidArgumentError("the prompt is empty");
  if (options.max_tokens < 1) return InvalidArgumentError("max tokens must be >= 1");
  OCTET_RETURN_IF_ERROR(ValidateSampling(options.sampling));
  const ModelConfig& c = model.config();
  const int64_t positions = static_cast<int64_t>(prompt.size()) + options.max_tokens;
  if (c.max_position_embeddings > 0 && positions > c.max_position_embeddings) {
    return OutOfRangeError("the prompt's " + std::to_string(prompt.size()) + " tokens and " +
                           std::to_string(options.max_tokens) + " to generate need " +
                           std::to_string(positions) + " positions; the model's context is " +
                           std::to_string(c.max_position_embeddings) +
                           " (max_position_embeddings)");
  }
  const std::vector<int32_t>& stop = options.stop_ids.empty() ? c.eos_token_ids : options.stop_ids;
  OCTET_RETURN_IF_ERROR(
      model.ResetCache(1, static_cast<int64_t>(prompt.size()) + options.max_tokens,
                       options.kv_dtype));
  Sampler sampler(options.sampling);
  GenerateResult r;
  r.prompt_tokens = static_cast<int64_t>(prompt.size());
  ForwardOutput out;

  auto keep_logits = [&](const ForwardOutput& o) {
    if (!options.collect_logits) return;
    r.vocab = o.vocab;
    r.logits.insert(r.logits.end(), o.logits.begin(), o.logits.end());
    r.logits_rows += static_cast<int64_t>(o.logits.size()) / o.vocab;
  };
  // Returns false when generation should stop after `id`.
  auto emit = [&](int32_t id) {
    r.ids.push_back(id);
    if (options.on_token && !options.on_token(id)) {
      r.stop_reason = "callback";
      return false;
    }
    if (options.stop_at_eos && std::find(stop.begin(), stop.end(), id) != stop.end()) {
      r.stop_reason = "eos";
      return false;
    }
    if (static_cast<int64_t>(r.ids.size()) >= options.max_tokens) {
      r.stop_reason = "length";
      return false;
    }
    return true;
  };

  const int64_t t0 = NowNs();
  std::vector<SequenceChunk> batch(1);
  batch[0].slot = 0;
  batch[0].start_pos = 0;
  batch[0].tokens = prompt;
  batch[0].all_logits = options.collect_logits;
  OCTET_RETURN_IF_ERROR(model.Step(batch, &out));
  keep_logits(out);
  int32_t id = sampler.Sample(out.Last(0), out.vocab, model.backend());
  r.prefill_seconds = (NowNs() - t0) * 1e-9;
  bool go = emit(id);
  const int64_t t1 = NowNs();
  batch[0].all_logits = false;
  while (go) {
    batch[0].start_pos += static_cast<int64_t>(batch[0].tokens.size());
    batch[0].tokens.assign(1, id);
    OCTET_RETURN_IF_ERROR(model.Step(batch, &out));
    keep_logits(out);
    id = sampler.Sample(out.Last(0), out.vocab, model.backend());
    ++r.decode_steps;
    go = emit(id);
  }
  r.decode_seconds = (NowNs() - t1) * 1e-9;
  return r;
}

}  // namespace octet::engine
