#include "octet/engine/generate.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "octet/base/deadline.h"
#include "octet/base/log.h"

namespace octet::engine {

Status ValidateSampling(const SamplingParams& p) {
  if (!(p.temperature >= 0.0f) || !std::isfinite(p.temperature)) {
    return InvalidArgumentError("temperature must be >= 0");
  }
  if (p.top_k < 0) return InvalidArgumentError("top-k must be >= 0");
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) return InvalidArgumentError("top-p must be in (0, 1]");
  if (!(p.repetition_penalty > 0.0f) || !std::isfinite(p.repetition_penalty)) {
    return InvalidArgumentError("repetition penalty must be > 0");
  }
  return Status::Ok();
}

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {}

kernels::KernelBackend& Sampler::Ops(kernels::KernelBackend& backend) {
  // The logits are host memory (ForwardOutput): the model's backend runs
  // Argmax and TopK on them only where its ops read host memory; a device
  // backend's sampler uses the scalar CPU backend instead.
  if (backend.memory_kind() != kernels::MemoryKind::kDevice) return backend;
  if (!host_ops_) {
    host_ops_ =
        std::shared_ptr<kernels::KernelBackend>(std::move(*kernels::CreateBackend("scalar", {1})));
  }
  return *host_ops_;
}

namespace {

// The largest finite logit; -infinity when there is none.
double MaxFinite(const float* logits, int64_t vocab) {
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < vocab; ++i) {
    if (std::isfinite(logits[i]) && logits[i] > m) m = logits[i];
  }
  return m;
}

}  // namespace

double Sampler::Weight(float logit, double mx) const {
  // The one expression every path weighs a candidate with, so that the masked
  // and the unmasked paths agree bit for bit.
  return std::isfinite(logit) ? std::exp((logit - mx) / params_.temperature) : 0.0;
}

int64_t Sampler::Distribution(const float* logits, int64_t vocab, kernels::KernelBackend& ops) {
  if (params_.top_k == 0) {
    return params_.top_p < 1.0f ? Nucleus(logits, vocab, ops) : WholeVocabulary(logits, vocab);
  }
  const int64_t k = std::min(params_.top_k, vocab);
  idx_.resize(k);
  val_.resize(k);
  if (k == vocab) {
    RankAll(logits, vocab);
  } else {
    ops.TopK(logits, vocab, k, idx_.data(), val_.data());  // descending
  }
  return Weigh(k);
}

int64_t Sampler::WholeVocabulary(const float* logits, int64_t vocab) {
  // Temperature alone: every id is a candidate, and one draw needs no order,
  // so the weights stay in id order (ranking 151k ids cost ten times more).
  const double mx = MaxFinite(logits, vocab);
  idx_.resize(vocab);
  w_.resize(vocab);
  for (int64_t i = 0; i < vocab; ++i) {
    idx_[i] = static_cast<int32_t>(i);
    w_[i] = Weight(logits[i], mx);
  }
  return vocab;
}

int64_t Sampler::Nucleus(const float* logits, int64_t vocab, kernels::KernelBackend& ops) {
  // Top-p alone: the softmax's sum over the whole vocabulary (id order), then
  // the best ids in growing batches until they hold top_p of it. The nucleus
  // of a real model's logits is a few to a few hundred ids.
  const double mx = MaxFinite(logits, vocab);
  double z = 0;
  for (int64_t i = 0; i < vocab; ++i) z += Weight(logits[i], mx);
  for (int64_t k = std::min<int64_t>(vocab, 64);; k = std::min(vocab, k * 8)) {
    idx_.resize(k);
    val_.resize(k);
    w_.resize(k);
    ops.TopK(logits, vocab, k, idx_.data(), val_.data());
    if (const int64_t keep = Cut(k, z); keep > 0) return keep;
    if (k == vocab) return vocab;  // rounding kept the sum just below top_p
  }
}

int64_t Sampler::Cut(int64_t n, double z) {
  // w_[0..n) from val_ (descending); the first prefix holding top_p of z.
  const double mx = val_[0];
  double cum = 0;
  for (int64_t i = 0; i < n; ++i) {
    w_[i] = Weight(val_[i], mx);
    cum += w_[i] / z;
    if (cum >= params_.top_p) return i + 1;
  }
  return 0;
}

int32_t Sampler::AllowedNucleus(const float* logits, int64_t vocab, kernels::KernelBackend& ops,
                                TokenFilter& filter) {
  // The masked logits' nucleus without the whole mask. The masked path's sum
  // z over the allowed ids is unknown, but lies between A, the allowed weight
  // among the ids looked at, and A + U, U the unmasked weight of the ids not
  // looked at (from the whole vocabulary's sum). The cut only grows with z,
  // so where both ends give the same cut it is the masked path's, and the
  // draw over the same candidates is the same, bit for bit. Where the allowed
  // ids are far down the ranking the ends differ (or too many ids would have
  // to be looked at): -1, the caller masks.
  const double top = MaxFinite(logits, vocab);  // scale of the unmasked sums
  if (!std::isfinite(top)) return -1;
  double all = 0;
  for (int64_t i = 0; i < vocab; ++i) all += Weight(logits[i], top);
  // A relative slack well above the rounding of a sum of 10^6 terms (~1e-10).
  constexpr double kSlack = 1e-9;
  // Past this many ids looked at (one Allows each), the whole mask's cached
  // trie walk is the cheaper way.
  constexpr int64_t kMostLookedAt = 2048;
  for (int64_t k = std::min<int64_t>(vocab, 256);; k = std::min(vocab, k * 8)) {
    ranked_.resize(k);
    ranked_val_.resize(k);
    ops.TopK(logits, vocab, k, ranked_.data(), ranked_val_.data());
    if (ranked_val_[0] > top) return -1;  // +infinity: leave it to the masked path
    idx_.clear();
    val_.clear();
    double seen = 0;  // unmasked weight looked at (scale: top)
    bool exhausted = k == vocab;
    for (int64_t i = 0; i < k; ++i) {
      if (!std::isfinite(ranked_val_[i])) {  // the rest weigh nothing
        exhausted = true;
        break;
      }
      seen += Weight(ranked_val_[i], top);
      if (filter.Allows(ranked_[i])) {
        idx_.push_back(ranked_[i]);
        val_.push_back(ranked_val_[i]);
      }
    }
    if (!idx_.empty()) {
      const int64_t n = static_cast<int64_t>(idx_.size());
      w_.resize(n);
      // The masked path's scale is the best allowed logit, val_[0].
      const double rescale = std::exp((top - val_[0]) / params_.temperature);
      if (!std::isfinite(rescale)) return -1;
      double a = 0;
      for (int64_t i = 0; i < n; ++i) a += Weight(val_[i], val_[0]);
      const double unseen = exhausted ? 0.0 : std::max(0.0, all - seen) * rescale;
      const double lo = a * (1 - kSlack);
      const double hi = (a + unseen) * (1 + kSlack) + all * rescale * kSlack;
      const int64_t keep_lo = Cut(n, lo);
      const int64_t keep_hi = Cut(n, hi);  // leaves w_ as the draw needs it
      if (keep_lo > 0 && keep_lo == keep_hi) return Draw(keep_hi);
    }
    if (exhausted || k >= kMostLookedAt) return -1;
  }
}

void Sampler::RankAll(const float* logits, int64_t vocab) {
  // TopK's order (descending value, then ascending id; NaN as -inf) over the
  // whole vocabulary: the ids above -inf sorted, then the rest by id. A masked
  // row has few ids above -inf, and std::sort beats the heap of a full
  // partial_sort several times over.
  auto key = [&](int32_t i) {
    return std::isnan(logits[i]) ? -std::numeric_limits<float>::infinity() : logits[i];
  };
  int64_t live = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    if (key(static_cast<int32_t>(i)) > -std::numeric_limits<float>::infinity()) {
      idx_[live++] = static_cast<int32_t>(i);
    }
  }
  int64_t rest = live;
  for (int64_t i = 0; i < vocab; ++i) {
    if (!(key(static_cast<int32_t>(i)) > -std::numeric_limits<float>::infinity())) {
      idx_[rest++] = static_cast<int32_t>(i);
    }
  }
  std::sort(idx_.begin(), idx_.begin() + live, [&](int32_t a, int32_t b) {
    const float va = logits[a], vb = logits[b];
    return va > vb || (va == vb && a < b);
  });
  for (int64_t i = 0; i < vocab; ++i) val_[i] = logits[idx_[i]];
}

int64_t Sampler::Weigh(int64_t k) {
  // Softmax of the candidates at this temperature (double for the sums).
  w_.resize(k);
  const double mx = val_[0];
  if (params_.top_p >= 1.0f) {
    for (int64_t i = 0; i < k; ++i) w_[i] = Weight(val_[i], mx);
    return k;
  }
  double z = 0;
  for (int64_t i = 0; i < k; ++i) z += Weight(val_[i], mx);
  const int64_t keep = Cut(k, z);
  return keep > 0 ? keep : k;
}

int32_t Sampler::Draw(int64_t keep) {
  double zk = 0;
  for (int64_t i = 0; i < keep; ++i) zk += w_[i];
  if (!(zk > 0)) return idx_[0];  // no finite logit: nothing to weigh
  const double u = std::uniform_real_distribution<double>(0.0, zk)(rng_);
  double cum = 0;
  for (int64_t i = 0; i < keep; ++i) {
    cum += w_[i];
    if (u < cum) return idx_[i];
  }
  return idx_[keep - 1];
}

void Sampler::SetPrompt(const std::vector<int32_t>& prompt) {
  if (params_.repetition_penalty == 1.0f) return;
  for (int32_t id : prompt) Seen(id);
}

void Sampler::Seen(int32_t id) {
  if (params_.repetition_penalty == 1.0f || id < 0) return;
  if (static_cast<size_t>(id) >= seen_mask_.size())
    seen_mask_.resize(static_cast<size_t>(id) + 1, 0);
  if (seen_mask_[static_cast<size_t>(id)]) return;
  seen_mask_[static_cast<size_t>(id)] = 1;
  seen_.push_back(id);
}

const float* Sampler::Penalised(const float* logits, int64_t vocab) {
  if (params_.repetition_penalty == 1.0f || seen_.empty()) return logits;
  penalised_.assign(logits, logits + vocab);
  const float p = params_.repetition_penalty;
  for (int32_t id : seen_) {
    if (id >= vocab) continue;
    float& x = penalised_[static_cast<size_t>(id)];
    x = x > 0 ? x / p : x * p;
  }
  return penalised_.data();
}

int32_t Sampler::Pick(const float* logits, int64_t vocab, kernels::KernelBackend& ops) {
  if (params_.temperature == 0.0f) return static_cast<int32_t>(ops.Argmax(logits, vocab));
  return Draw(Distribution(logits, vocab, ops));
}

int32_t Sampler::Sample(const float* raw_logits, int64_t vocab, kernels::KernelBackend& backend) {
  const int32_t id = Pick(Penalised(raw_logits, vocab), vocab, Ops(backend));
  Seen(id);
  return id;
}

int32_t Sampler::Sample(const float* raw_logits, int64_t vocab, kernels::KernelBackend& backend,
                        TokenFilter& filter) {
  kernels::KernelBackend& ops = Ops(backend);
  // The penalty and the temperature change each logit alone: they commute
  // with the mask.
  const float* logits = Penalised(raw_logits, vocab);
  int32_t id = -1;
  if (params_.temperature == 0.0f) {
    const auto top = static_cast<int32_t>(ops.Argmax(logits, vocab));
    if (filter.Allows(top)) id = top;
  } else if (params_.top_k > 0) {
    // TopK orders by value, then id: the allowed ids keep their order, so the
    // first k allowed of a longer ranking are the masked logits' top k.
    const int64_t k = std::min(params_.top_k, vocab);
    const int64_t scan = std::min(vocab, std::max<int64_t>(4 * k, 64));
    ranked_.resize(scan);
    ranked_val_.resize(scan);
    ops.TopK(logits, vocab, scan, ranked_.data(), ranked_val_.data());
    idx_.resize(k);
    val_.resize(k);
    int64_t n = 0;
    for (int64_t i = 0; i < scan && n < k; ++i) {
      if (!std::isfinite(ranked_val_[i])) break;  // the masked ranking's order of -inf ids differs
      if (!filter.Allows(ranked_[i])) continue;
      idx_[n] = ranked_[i];
      val_[n] = ranked_val_[i];
      ++n;
    }
    if (n == k) id = Draw(Weigh(k));
  } else if (params_.top_p >= 1.0f) {
    const int32_t t = Draw(Distribution(logits, vocab, ops));
    if (filter.Allows(t)) id = t;
  } else {
    id = AllowedNucleus(logits, vocab, ops, filter);
  }
  if (id < 0) {
    masked_.assign(logits, logits + vocab);
    filter.Mask(masked_.data(), vocab);
    id = Pick(masked_.data(), vocab, ops);
  }
  Seen(id);
  return id;
}

int32_t Sampler::Verify(const float* raw_logits, int64_t vocab, kernels::KernelBackend& backend,
                        int32_t draft, bool* accepted) {
  const int32_t id = Pick(Penalised(raw_logits, vocab), vocab, Ops(backend));
  *accepted = id == draft;
  Seen(id);
  return id;
}

Result<SpeculativeMethod> ParseSpeculativeMethod(std::string_view name) {
  if (name == "off") return SpeculativeMethod::kOff;
  if (name == "ngram") return SpeculativeMethod::kNgram;
  if (name == "mtp") return SpeculativeMethod::kMtp;
  return InvalidArgumentError("unknown speculative decoding method '" + std::string(name) +
                              "' (choose off, ngram or mtp)");
}

std::string_view SpeculativeMethodName(SpeculativeMethod method) {
  switch (method) {
    case SpeculativeMethod::kNgram:
      return "ngram";
    case SpeculativeMethod::kMtp:
      return "mtp";
    default:
      return "off";
  }
}

Status ValidateSpeculative(const SpeculativeOptions& o) {
  if (o.method == SpeculativeMethod::kOff) return Status::Ok();
  const int max = MaxDraftTokens(o.method);
  if (o.draft_tokens < 1 || o.draft_tokens > max) {
    return InvalidArgumentError("--draft-tokens must be from 1 to " + std::to_string(max) +
                                " for " + std::string(SpeculativeMethodName(o.method)) +
                                " speculation (got " + std::to_string(o.draft_tokens) + ")");
  }
  if (o.ngram_min < 1 || o.ngram_max < o.ngram_min) {
    return InvalidArgumentError("n-gram lookup sizes must satisfy 1 <= min <= max");
  }
  return Status::Ok();
}

std::vector<int32_t> NgramDraft(const std::vector<int32_t>& h, int k, int max_n, int min_n,
                                int* matched) {
  const int64_t len = static_cast<int64_t>(h.size());
  if (matched != nullptr) *matched = 0;
  for (int64_t n = std::min<int64_t>(max_n, len - 1); n >= min_n; --n) {
    const int32_t* tail = h.data() + len - n;
    // The latest earlier occurrence (ending before the tail itself).
    for (int64_t start = len - n - 1; start >= 0; --start) {
      if (!std::equal(tail, tail + n, h.data() + start)) continue;
      const int64_t from = start + n;
      const int64_t take = std::min<int64_t>(k, len - from);
      if (take <= 0) continue;
      if (matched != nullptr) *matched = static_cast<int>(n);
      return std::vector<int32_t>(h.begin() + from, h.begin() + from + take);
    }
  }
  return {};
}

std::vector<int32_t> NgramDrafter::Draft(const std::vector<int32_t>& h, int k) {
  const int64_t len = static_cast<int64_t>(h.size());
  matched_ = 0;
  if (len < 2 || k < 1) return {};
  // Every position but the last: the last token ends the tail itself.
  if (indexed_ > len - 1) {  // not the history indexed so far
    positions_.clear();
    indexed_ = 0;
  }
  for (; indexed_ < len - 1; ++indexed_) positions_[h[indexed_]].push_back(indexed_);
  const auto it = positions_.find(h[len - 1]);
  if (it == positions_.end()) return {};
  const std::vector<int64_t>& ends = it->second;  // where the tail's last token occurred before
  const int32_t* tail_end = h.data() + len;
  for (int64_t n = std::min<int64_t>(max_n_, len - 1); n >= min_n_; --n) {
    // The latest earlier occurrence of the last n tokens, as NgramDraft finds
    // it: the latest end position whose n tokens up to it are the tail's.
    for (auto e = ends.rbegin(); e != ends.rend(); ++e) {
      const int64_t end = *e;  // the occurrence is [end - n + 1, end]
      if (end < n - 1 || !std::equal(tail_end - n, tail_end, h.data() + end - n + 1)) continue;
      const int64_t from = end + 1;
      const int64_t take = std::min<int64_t>(k, len - from);  // >= 1: end <= len - 2
      matched_ = static_cast<int>(n);
      return std::vector<int32_t>(h.begin() + from, h.begin() + from + take);
    }
  }
  return {};
}

namespace {

// What the draft lengths were chosen from, for the debug log: the step
// estimates of 1..max_rows rows and the acceptance rate of each kind.
std::string DraftLengthSummary(const StepCosts& costs, const DraftLengthPolicy& policy,
                               int64_t max_rows) {
  std::string s = "step us by rows";
  for (int64_t rows = 1; rows <= max_rows; ++rows) {
    s += " " + std::to_string(rows) + ":" + std::to_string(costs.Seconds(rows) * 1e6);
  }
  s += "; acceptance by kind";
  for (int kind = 0; kind < DraftLengthPolicy::kKinds; ++kind) {
    s += " " + std::to_string(policy.AcceptanceRate(kind));
  }
  return s;
}

// The MTP head: after each step it feeds the kept rows' hidden states and the
// tokens that followed them to the MTP layer (Model::MtpDraft, on the model's
// own MTP cache) and holds the drafts it made for the next step.
class MtpDrafter final : public Drafter {
 public:
  MtpDrafter(ModelRunner& runner, int k) : model_(runner), k_(k) {}
  std::vector<int32_t> Draft(const std::vector<int32_t>& history, int k) override {
    std::vector<int32_t> d = drafts_;
    if (static_cast<int>(d.size()) > k) d.resize(static_cast<size_t>(k));
    return d;
  }
  Status AfterStep(size_t chunk, int slot, int64_t start_pos, int64_t rows,
                   const std::vector<int32_t>& sequence, int want) override {
    OCTET_ASSIGN_OR_RETURN(MtpDraftRequest q,
                           Request(chunk, slot, start_pos, rows, sequence, want));
    return model_.MtpDraft(q.chunk, q.slot, q.start_pos, q.next, q.k, &drafts_);
  }
  bool drafts_after_step() const override { return true; }

  // AfterStep in two halves, for AfterSteps' batched call: what to ask the
  // head (the old drafts are dropped), and the drafts it made.
  Result<MtpDraftRequest> Request(size_t chunk, int slot, int64_t start_pos, int64_t rows,
                                  const std::vector<int32_t>& sequence, int want) {
    drafts_.clear();
    if (rows < 1 || start_pos < 0 || start_pos + rows >= static_cast<int64_t>(sequence.size())) {
      return InternalError("MTP drafter: the sequence does not reach position " +
                           std::to_string(start_pos + rows));
    }
    // The first draft comes with the forward that keeps the head's cache
    // up to date; each further one is a forward of its own.
    return MtpDraftRequest{chunk, slot, start_pos,
                           std::vector<int32_t>(sequence.begin() + start_pos + 1,
                                                sequence.begin() + start_pos + 1 + rows),
                           std::clamp(want, 1, k_)};
  }
  void Take(std::vector<int32_t> drafts) { drafts_ = std::move(drafts); }
  ModelRunner& runner() const { return model_; }

 private:
  ModelRunner& model_;  // one rank, or every rank of a TP group
  int k_;
  std::vector<int32_t> drafts_;
};

}  // namespace

Result<std::unique_ptr<Drafter>> MakeDrafter(const SpeculativeOptions& options,
                                             ModelRunner& runner) {
  switch (options.method) {
    case SpeculativeMethod::kNgram:
      return std::unique_ptr<Drafter>(new NgramDrafter(options.ngram_max, options.ngram_min));
    case SpeculativeMethod::kMtp: {
      if (runner.mtp_layers() == 0) {
        return FailedPreconditionError(
            "--speculative mtp: the model has no multi-token-prediction layer loaded (its "
            "config has num_nextn_predict_layers 0, or it was loaded without "
            "LoadOptions::load_mtp); use --speculative ngram");
      }
      return std::unique_ptr<Drafter>(new MtpDrafter(runner, options.draft_tokens));
    }
    default:
      return std::unique_ptr<Drafter>();
  }
}

Status AfterSteps(const std::vector<AfterStepCall>& calls) {
  ModelRunner* runner = nullptr;  // the first MTP head's; others' run alone
  std::vector<MtpDrafter*> heads;
  std::vector<MtpDraftRequest> requests;
  for (const AfterStepCall& c : calls) {
    auto* head = dynamic_cast<MtpDrafter*>(c.drafter);
    if (head == nullptr || (runner != nullptr && &head->runner() != runner)) {
      OCTET_RETURN_IF_ERROR(
          c.drafter->AfterStep(c.chunk, c.slot, c.start_pos, c.rows, *c.sequence, c.want));
      continue;
    }
    runner = &head->runner();
    OCTET_ASSIGN_OR_RETURN(MtpDraftRequest q, head->Request(c.chunk, c.slot, c.start_pos, c.rows,
                                                            *c.sequence, c.want));
    requests.push_back(std::move(q));
    heads.push_back(head);
  }
  if (requests.empty()) return Status::Ok();
  std::vector<std::vector<int32_t>> drafts;
  OCTET_RETURN_IF_ERROR(runner->MtpDraftBatch(requests, &drafts));
  if (drafts.size() != heads.size()) {
    return InternalError("MtpDraftBatch gave " + std::to_string(drafts.size()) +
                         " draft lists for " + std::to_string(heads.size()) + " requests");
  }
  for (size_t i = 0; i < heads.size(); ++i) heads[i]->Take(std::move(drafts[i]));
  return Status::Ok();
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
  OCTET_RETURN_IF_ERROR(ValidateSpeculative(options.speculative));
  OCTET_ASSIGN_OR_RETURN(std::unique_ptr<Drafter> drafter, MakeDrafter(options.speculative, model));
  OCTET_RETURN_IF_ERROR(
      model.ResetCache(1, static_cast<int64_t>(prompt.size()) + options.max_tokens,
                       options.kv_dtype));
  Sampler sampler(options.sampling);
  sampler.SetPrompt(prompt);
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
  const SpeculativeOptions& spec = options.speculative;
  // Decode steps' times by row count, and this sequence's acceptance: how
  // many of each step's drafts to verify (SpeculativeOptions::adaptive).
  StepCosts own_costs;
  StepCosts& step_costs = options.step_costs != nullptr ? *options.step_costs : own_costs;
  DraftLengthPolicy own_policy;
  DraftLengthPolicy& draft_length =
      options.draft_length != nullptr ? *options.draft_length : own_policy;
  // A drafter that drafts after each step (the MTP head) makes as many drafts
  // as the next step may verify (DraftLengthPolicy::Plan, from the time its
  // drafting took by drafts made), and no more than the tokens still wanted.
  StepCosts own_draft_costs;
  StepCosts& draft_costs = options.draft_costs != nullptr ? *options.draft_costs : own_draft_costs;
  std::vector<int32_t> history;
  auto after_step = [&](int64_t start_pos, int64_t rows) -> Status {
    const int64_t room = options.max_tokens - static_cast<int64_t>(r.ids.size()) - 1;
    int64_t want = std::clamp<int64_t>(room, 1, spec.draft_tokens);
    const bool planned = spec.adaptive && drafter->drafts_after_step() && start_pos > 0;
    if (planned) {
      want = draft_length.Plan(drafter->kind(), want, step_costs, draft_costs, StepSoFar{1, 1});
    }
    const int64_t start = NowNs();
    OCTET_RETURN_IF_ERROR(
        drafter->AfterStep(0, 0, start_pos, rows, history, static_cast<int>(want)));
    if (planned) draft_costs.Record(want, (NowNs() - start) * 1e-9);
    return Status::Ok();
  };
  if (drafter) {
    history = prompt;
    history.push_back(id);
    if (go) OCTET_RETURN_IF_ERROR(after_step(0, static_cast<int64_t>(prompt.size())));
  }
  auto timed_step = [&]() -> Status {
    const int64_t start = NowNs();
    OCTET_RETURN_IF_ERROR(model.Step(batch, &out));
    if (drafter && spec.adaptive) {
      step_costs.Record(static_cast<int64_t>(batch[0].tokens.size()), (NowNs() - start) * 1e-9);
    }
    return Status::Ok();
  };
  while (go) {
    batch[0].start_pos += static_cast<int64_t>(batch[0].tokens.size());
    batch[0].tokens.assign(1, id);
    std::vector<int32_t> drafts;
    int kind = 0;
    if (drafter) {
      // No more drafts than tokens still wanted after this step's own one.
      const int64_t room = options.max_tokens - static_cast<int64_t>(r.ids.size()) - 1;
      const int k = static_cast<int>(std::min<int64_t>(spec.draft_tokens, room));
      if (k > 0) drafts = drafter->Draft(history, k);
      kind = drafter->kind();
      if (spec.adaptive && !drafts.empty()) {
        StepSoFar step{1, 1};  // this step's own row and token
        drafts.resize(static_cast<size_t>(
            draft_length.Choose(kind, static_cast<int64_t>(drafts.size()), step_costs, &step)));
      }
    }
    if (drafts.empty()) {
      batch[0].all_logits = false;
      batch[0].verify = false;
      OCTET_RETURN_IF_ERROR(timed_step());
      keep_logits(out);
      id = sampler.Sample(out.Last(0), out.vocab, model.backend());
      ++r.decode_steps;
      go = emit(id);
      if (drafter) {
        history.push_back(id);
        if (go) OCTET_RETURN_IF_ERROR(after_step(batch[0].start_pos, 1));
      }
      continue;
    }
    // One forward over [id, d1..dK]: row i verifies draft i+1; the row after
    // the last accepted draft gives the model's own next token.
    batch[0].tokens.insert(batch[0].tokens.end(), drafts.begin(), drafts.end());
    batch[0].all_logits = true;
    batch[0].verify = true;
    OCTET_RETURN_IF_ERROR(timed_step());
    ++r.decode_steps;
    r.drafted_tokens += static_cast<int64_t>(drafts.size());
    int64_t rows_used = 0, step_accepted = 0;
    for (size_t i = 0; i <= drafts.size() && go; ++i) {
      const float* row = out.Row(out.row_begin[0] + static_cast<int64_t>(i));
      ++rows_used;
      bool accepted = false;
      if (i < drafts.size()) {
        id = sampler.Verify(row, out.vocab, model.backend(), drafts[i], &accepted);
      } else {
        id = sampler.Sample(row, out.vocab, model.backend());
      }
      step_accepted += accepted ? 1 : 0;
      go = emit(id);
      history.push_back(id);
      if (!accepted) break;
    }
    r.accepted_tokens += step_accepted;
    // Row i checked draft i; rows past a rejection or a stop were not looked at.
    if (spec.adaptive) {
      draft_length.Learn(kind, std::min<int64_t>(rows_used, static_cast<int64_t>(drafts.size())),
                         step_accepted);
    }
    if (options.collect_logits) {
      r.vocab = out.vocab;
      r.logits.insert(r.logits.end(), out.logits.begin(),
                      out.logits.begin() + rows_used * out.vocab);
      r.logits_rows += rows_used;
    }
    // The cache holds the rejected drafts' positions too; the next step
    // starts right after the kept tokens and writes over them (attention
    // reads positions up to each query's own, never beyond).
    batch[0].tokens.resize(static_cast<size_t>(rows_used));
    if (go) {
      OCTET_RETURN_IF_ERROR(after_step(batch[0].start_pos, rows_used));
    }
  }
  r.decode_seconds = (NowNs() - t1) * 1e-9;
  if (drafter && spec.adaptive) {
    OCTET_LOG(DEBUG) << "speculative: "
                     << DraftLengthSummary(step_costs, draft_length, spec.draft_tokens + 1);
  }
  return r;
}

}  // namespace octet::engine
