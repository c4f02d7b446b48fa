// Multi-token prediction (GLM-4.5's MTP layer): its own KV cache, and drafts
// of the next tokens from the main model's last hidden states.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "model_scratch.h"
#include "octet/base/log.h"
#include "octet/engine/model.h"

namespace octet::engine {

Result<KvCache> Model::NewMtpCache(int slots, int64_t capacity, kernels::KvDtype dtype) const {
  if (mtp_.empty()) {
    return FailedPreconditionError(
        "no multi-token-prediction layer is loaded (LoadOptions::load_mtp)");
  }
  if (slots < 1 || capacity < 1 || slots > (1 << 16) || capacity > (int64_t{1} << 30)) {
    return InvalidArgumentError("an MTP cache of " + std::to_string(slots) + " slots x " +
                                std::to_string(capacity) + " positions cannot be made");
  }
  const int64_t layers = static_cast<int64_t>(mtp_.size());
  const int64_t bytes =
      KvCache::BytesFor(layers, local_kv_heads_, config_.head_dim, slots, capacity, dtype);
  OCTET_ASSIGN_OR_RETURN(kernels::Buffer storage, backend_->Allocate(bytes));
  return KvCache(layers, local_kv_heads_, config_.head_dim, slots, capacity, dtype,
                 std::move(storage));
}

Status Model::ResetMtpCache(int slots, int64_t capacity, kernels::KvDtype dtype) {
  if (mtp_.empty()) return Status::Ok();
  mtp_cache_ = KvCache();  // free the old one first
  OCTET_ASSIGN_OR_RETURN(mtp_cache_, NewMtpCache(slots, capacity, dtype));
  return Status::Ok();
}

Status Model::MtpDraft(size_t chunk, int slot, int64_t start_pos, const std::vector<int32_t>& next,
                       KvCache& mtp_cache, int k, std::vector<int32_t>* drafts,
                       std::vector<float>* logits_out, const ForwardHooks& hooks) {
  const ModelConfig& c = config_;
  drafts->clear();
  if (mtp_.empty()) return FailedPreconditionError("no multi-token-prediction layer is loaded");
  // >>> Tensor parallelism: the MTP layer is sharded like the main layers
  // (its attention heads and MLP widths split, eh_proj whole on every rank),
  // with the same all-reduces, and the vocab-parallel embedding and lm_head
  // are completed the same way; every rank gets the full logits and so
  // chooses the same drafts.
  const bool vocab_parallel = local_vocab_ != c.vocab_size;
  if (vocab_parallel && (!hooks.all_reduce || !hooks.gather_logits)) {
    return FailedPreconditionError(
        "MtpDraft on a vocab-parallel shard needs the all_reduce and gather_logits hooks");
  }
  if (chunk >= last_first_.size()) {
    return InvalidArgumentError("MtpDraft: chunk " + std::to_string(chunk) +
                                " is not in the last forward pass");
  }
  const int64_t n = static_cast<int64_t>(next.size());
  if (n < 1 || n > last_rows_[chunk] || k < 1) {
    return InvalidArgumentError("MtpDraft: " + std::to_string(n) + " tokens fed for a chunk of " +
                                std::to_string(last_rows_[chunk]) + " rows (and k " +
                                std::to_string(k) + ")");
  }
  if (start_pos < 0 || start_pos > mtp_cache.length(slot) ||
      start_pos + n + k - 1 > mtp_cache.capacity()) {
    return OutOfRangeError("MtpDraft: positions " + std::to_string(start_pos) + ".." +
                           std::to_string(start_pos + n + k - 2) + " do not fit the MTP cache (" +
                           std::to_string(mtp_cache.length(slot)) + " held, capacity " +
                           std::to_string(mtp_cache.capacity()) + ")");
  }
  for (int32_t id : next) {
    if (id < 0 || id >= c.vocab_size) {
      return InvalidArgumentError("MtpDraft: token id " + std::to_string(id) + " out of range");
    }
  }
  kernels::KernelBackend& be = *backend_;
  Scratch& S = *scratch_;
  const int64_t H = c.hidden_size, V = c.vocab_size;
  const float eps = c.rms_norm_eps;
  constexpr int64_t f = sizeof(float);
  // The hidden states of this chunk's rows, before the step's buffers are reused.
  OCTET_RETURN_IF_ERROR(Ensure(be, S.mtp_h, n * H * f));
  OCTET_RETURN_IF_ERROR(Ensure(be, S.mtp_e, n * H * f));
  {
    std::vector<int64_t> idx(n);
    for (int64_t i = 0; i < n; ++i) idx[i] = last_first_[chunk] + i;
    OCTET_RETURN_IF_ERROR(Ensure(be, S.row_index, n * int64_t{sizeof(int64_t)}));
    be.CopyToDevice(S.row_index.data(), idx.data(), n * int64_t{sizeof(int64_t)});
    be.GatherRows(S.hidden.as<float>(), H, S.row_index.as<int64_t>(), n, H, S.mtp_h.as<float>());
  }
  DecodeProfile prof(0, nullptr);  // off (0 tokens): the layer calls take one
  std::vector<float> host_logits(V);
  std::vector<int32_t> tokens = next;
  int64_t pos = start_pos;
  for (int step = 0; step < k; ++step) {
    const MtpLayer& M = mtp_[step % mtp_.size()];
    const int64_t T = static_cast<int64_t>(tokens.size());
    // The step's buffers (the main forward's scratch, now free).
    for (auto [buf, bytes] : std::initializer_list<std::pair<kernels::Buffer*, int64_t>>{
             {&S.x, T * H * f},
             {&S.xn, T * H * f},
             {&S.proj, T * H * f},
             {&S.q, T * local_heads_ * c.head_dim * f},
             {&S.attn, T * local_heads_ * c.head_dim * f},
             {&S.k, T * local_kv_heads_ * c.head_dim * f},
             {&S.v, T * local_kv_heads_ * c.head_dim * f},
             {&S.gate, T * max_mlp_width_ * f},
             {&S.up, T * max_mlp_width_ * f},
             {&S.rows, T * H * f},
             {&S.logits, T * local_vocab_ * f},
             {&S.ids, T * int64_t{sizeof(int32_t)}},
             {&S.positions, T * int64_t{sizeof(int32_t)}},
             {&S.row_index, T * int64_t{sizeof(int64_t)}}}) {
      OCTET_RETURN_IF_ERROR(Ensure(be, *buf, bytes));
    }
    if (c.moe.num_experts > 0) {
      const int64_t routes = T * c.moe.experts_per_token;
      for (auto [buf, bytes] : std::initializer_list<std::pair<kernels::Buffer*, int64_t>>{
               {&S.router_logits, T * c.moe.num_experts * f},
               {&S.expert_in, T * H * f},
               {&S.expert_out, T * H * f},
               {&S.route_rows, routes * int64_t{sizeof(int64_t)}},
               {&S.route_weights, routes * f}}) {
        OCTET_RETURN_IF_ERROR(Ensure(be, *buf, bytes));
      }
    }
    std::vector<int32_t> host_pos(T);
    for (int64_t i = 0; i < T; ++i) host_pos[i] = static_cast<int32_t>(pos + i);
    be.CopyToDevice(S.ids.data(), tokens.data(), T * int64_t{sizeof(int32_t)});
    be.CopyToDevice(S.positions.data(), host_pos.data(), T * int64_t{sizeof(int32_t)});
    // u = eh_embed · rmsnorm(e, enorm) + eh_hidden · rmsnorm(h, hnorm); the
    // embedding at position 0 is zero (as vLLM feeds it), and so is its norm.
    float* e = S.mtp_e.as<float>();
    float* h = S.mtp_h.as<float>();
    float* x = S.x.as<float>();
    if (!vocab_parallel) {
      be.Embedding(embed_, S.ids.as<int32_t>(), T, e);
    } else {
      be.EmbeddingShard(embed_, vocab_begin_, S.ids.as<int32_t>(), T, e);
      OCTET_RETURN_IF_ERROR(hooks.all_reduce(e, T * H));
    }
    if (c.embedding_scale != 1.0f) be.Scale(e, T * H, c.embedding_scale);
    if (pos == 0) be.Fill(e, H, 0.0f);
    be.RmsNorm(e, M.enorm.device, eps, T, H, H, e);
    be.RmsNorm(h, M.hnorm.device, eps, T, H, H, h);
    be.Matmul(e, T, H, M.eh_embed, x, H, false);
    be.Matmul(h, T, H, M.eh_hidden, x, H, true);
    SequenceChunk ch;
    ch.slot = slot;
    ch.start_pos = pos;
    ch.tokens = tokens;
    OCTET_RETURN_IF_ERROR(RunLayer(M.layer, mtp_cache, step % static_cast<int64_t>(mtp_.size()),
                                   {ch}, {0}, T, hooks, prof));
    mtp_cache.set_length(slot, std::max(mtp_cache.length(slot), pos + T));
    // Logits: every fed row on the first step when asked, else the last row.
    const bool all = step == 0 && logits_out != nullptr;
    const int64_t R = all ? T : 1;
    float* rows = S.rows.as<float>();
    {
      std::vector<int64_t> idx(R);
      for (int64_t i = 0; i < R; ++i) idx[i] = T - R + i;
      be.CopyToDevice(S.row_index.data(), idx.data(), R * int64_t{sizeof(int64_t)});
      be.GatherRows(x, H, S.row_index.as<int64_t>(), R, H, rows);
    }
    be.RmsNorm(rows, M.head_norm.device, eps, R, H, H, rows);
    if (c.logit_scale != 1.0f) be.Scale(rows, R * H, c.logit_scale);
    float* logits = S.logits.as<float>();
    be.Matmul(rows, R, H, lm_head_.weight, logits, local_vocab_, false);
    if (all) {
      logits_out->resize(R * V);
      if (vocab_parallel) {
        OCTET_RETURN_IF_ERROR(hooks.gather_logits(logits, R, local_vocab_, logits_out->data()));
      } else {
        be.CopyToHost(logits_out->data(), logits, R * V * f);
      }
      std::copy(logits_out->end() - V, logits_out->end(), host_logits.begin());
    } else if (vocab_parallel) {
      OCTET_RETURN_IF_ERROR(hooks.gather_logits(logits, 1, local_vocab_, host_logits.data()));
    } else {
      be.CopyToHost(host_logits.data(), logits, V * f);
    }
    OCTET_RETURN_IF_ERROR(be.Synchronize());
    // The greedy draft (the first of equal maxima; NaN never wins).
    int32_t best = 0;
    for (int64_t i = 1; i < V; ++i) {
      if (host_logits[i] > host_logits[best] || std::isnan(host_logits[best])) best = int32_t(i);
    }
    drafts->push_back(best);
    if (step + 1 == k) break;
    // Chain: the next position is fed this layer's output (pre-norm) and the draft.
    {
      const int64_t last = T - 1;
      be.CopyToDevice(S.row_index.data(), &last, int64_t{sizeof(int64_t)});
      be.GatherRows(x, H, S.row_index.as<int64_t>(), 1, H, h);
    }
    pos += T;
    tokens.assign(1, best);
  }
  return Status::Ok();
}

}  // namespace octet::engine
