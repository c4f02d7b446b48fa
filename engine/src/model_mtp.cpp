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

Status Model::CopyMtpSlot(int src, int dst, int64_t positions) {
  if (mtp_.empty()) return Status::Ok();
  OCTET_RETURN_IF_ERROR(mtp_cache_.CheckCopy(src, dst, positions));
  mtp_cache_.CopyPositions(src, dst, positions, *backend_);
  return Status::Ok();
}

Status Model::MtpDraft(size_t chunk, int slot, int64_t start_pos, const std::vector<int32_t>& next,
                       KvCache& mtp_cache, int k, std::vector<int32_t>* drafts,
                       std::vector<float>* logits_out, const ForwardHooks& hooks) {
  drafts->clear();
  std::vector<std::vector<int32_t>> made;
  OCTET_RETURN_IF_ERROR(MtpDraftBatch({MtpDraftRequest{chunk, slot, start_pos, next, k}}, mtp_cache,
                                      &made, logits_out, hooks));
  *drafts = std::move(made.front());
  return Status::Ok();
}

Status Model::MtpDraftBatch(const std::vector<MtpDraftRequest>& requests, KvCache& mtp_cache,
                            std::vector<std::vector<int32_t>>* drafts,
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
  const size_t Q = requests.size();
  std::vector<char> slot_taken(static_cast<size_t>(std::max(mtp_cache.num_slots(), 0)), 0);
  for (size_t r = 0; r < Q; ++r) {
    const MtpDraftRequest& q = requests[r];
    const std::string what =
        Q > 1 ? "MtpDraft (request " + std::to_string(r) + "): " : "MtpDraft: ";
    if (q.chunk >= last_first_.size()) {
      return InvalidArgumentError(what + "chunk " + std::to_string(q.chunk) +
                                  " is not in the last forward pass");
    }
    const int64_t n = static_cast<int64_t>(q.next.size());
    if (n < 1 || n > last_rows_[q.chunk] || q.k < 1) {
      return InvalidArgumentError(what + std::to_string(n) + " tokens fed for a chunk of " +
                                  std::to_string(last_rows_[q.chunk]) + " rows (and k " +
                                  std::to_string(q.k) + ")");
    }
    if (q.slot < 0 || q.slot >= mtp_cache.num_slots()) {
      return InvalidArgumentError(what + "slot " + std::to_string(q.slot) +
                                  " is not one of the MTP cache's " +
                                  std::to_string(mtp_cache.num_slots()));
    }
    if (slot_taken[static_cast<size_t>(q.slot)]) {
      return InvalidArgumentError(what + "slot " + std::to_string(q.slot) +
                                  " is drafted for by an earlier request of the same call");
    }
    slot_taken[static_cast<size_t>(q.slot)] = 1;
    if (q.start_pos < 0 || q.start_pos > mtp_cache.length(q.slot) ||
        q.start_pos + n + q.k - 1 > mtp_cache.capacity()) {
      return OutOfRangeError(what + "positions " + std::to_string(q.start_pos) + ".." +
                             std::to_string(q.start_pos + n + q.k - 2) +
                             " do not fit the MTP cache (" +
                             std::to_string(mtp_cache.length(q.slot)) + " held, capacity " +
                             std::to_string(mtp_cache.capacity()) + ")");
    }
    for (int32_t id : q.next) {
      if (id < 0 || id >= c.vocab_size) {
        return InvalidArgumentError(what + "token id " + std::to_string(id) + " out of range");
      }
    }
  }
  drafts->assign(Q, {});
  if (Q == 0) return Status::Ok();
  kernels::KernelBackend& be = *backend_;
  Scratch& S = *scratch_;
  const int64_t H = c.hidden_size, V = c.vocab_size;
  const float eps = c.rms_norm_eps;
  constexpr int64_t f = sizeof(float);
  // The hidden states of the requests' rows, before the step's buffers are reused.
  int64_t fed = 0;
  for (const MtpDraftRequest& q : requests) fed += static_cast<int64_t>(q.next.size());
  OCTET_RETURN_IF_ERROR(Ensure(be, S.mtp_h, fed * H * f));
  OCTET_RETURN_IF_ERROR(Ensure(be, S.mtp_e, fed * H * f));
  {
    std::vector<int64_t> idx;
    idx.reserve(static_cast<size_t>(fed));
    for (const MtpDraftRequest& q : requests) {
      for (size_t i = 0; i < q.next.size(); ++i) idx.push_back(last_first_[q.chunk] + int64_t(i));
    }
    OCTET_RETURN_IF_ERROR(Ensure(be, S.row_index, fed * int64_t{sizeof(int64_t)}));
    be.CopyToDevice(S.row_index.data(), idx.data(), fed * int64_t{sizeof(int64_t)});
    be.GatherRows(S.hidden.as<float>(), H, S.row_index.as<int64_t>(), fed, H, S.mtp_h.as<float>());
  }
  DecodeProfile prof(0, nullptr);  // off (0 tokens): the layer calls take one
  // The step's chunks: one per request still drafting (`active`, request
  // order), each its fed rows on the first step and its last draft after.
  std::vector<size_t> active(Q);
  std::vector<SequenceChunk> chunks(Q);
  for (size_t r = 0; r < Q; ++r) {
    active[r] = r;
    chunks[r].slot = requests[r].slot;
    chunks[r].start_pos = requests[r].start_pos;
    chunks[r].tokens = requests[r].next;
  }
  std::vector<float> host_logits;
  for (int step = 0;; ++step) {
    const MtpLayer& M = mtp_[step % mtp_.size()];
    std::vector<int64_t> first(chunks.size());
    std::vector<int32_t> host_ids, host_pos;
    for (size_t j = 0; j < chunks.size(); ++j) {
      first[j] = static_cast<int64_t>(host_ids.size());
      host_ids.insert(host_ids.end(), chunks[j].tokens.begin(), chunks[j].tokens.end());
      for (size_t i = 0; i < chunks[j].tokens.size(); ++i) {
        host_pos.push_back(static_cast<int32_t>(chunks[j].start_pos + int64_t(i)));
      }
    }
    const int64_t T = static_cast<int64_t>(host_ids.size());
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
    be.CopyToDevice(S.ids.data(), host_ids.data(), T * int64_t{sizeof(int32_t)});
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
    for (size_t j = 0; j < chunks.size(); ++j) {
      if (chunks[j].start_pos == 0) be.Fill(e + first[j] * H, H, 0.0f);
    }
    be.RmsNorm(e, M.enorm.device, eps, T, H, H, e);
    be.RmsNorm(h, M.hnorm.device, eps, T, H, H, h);
    be.Matmul(e, T, H, M.eh_embed, x, H, false);
    be.Matmul(h, T, H, M.eh_hidden, x, H, true);
    OCTET_RETURN_IF_ERROR(RunLayer(M.layer, mtp_cache, step % static_cast<int64_t>(mtp_.size()),
                                   chunks, first, T, hooks, prof));
    for (const SequenceChunk& ch : chunks) {
      mtp_cache.set_length(ch.slot,
                           std::max(mtp_cache.length(ch.slot),
                                    ch.start_pos + static_cast<int64_t>(ch.tokens.size())));
    }
    // Logits: every fed row on the first step when asked, else each chunk's last.
    const bool all = step == 0 && logits_out != nullptr;
    std::vector<int64_t> idx, last(chunks.size());
    for (size_t j = 0; j < chunks.size(); ++j) {
      last[j] = first[j] + static_cast<int64_t>(chunks[j].tokens.size()) - 1;
      if (!all) idx.push_back(last[j]);
    }
    if (all) {
      for (int64_t i = 0; i < T; ++i) idx.push_back(i);
    }
    const int64_t R = static_cast<int64_t>(idx.size());
    float* rows = S.rows.as<float>();
    be.CopyToDevice(S.row_index.data(), idx.data(), R * int64_t{sizeof(int64_t)});
    be.GatherRows(x, H, S.row_index.as<int64_t>(), R, H, rows);
    be.RmsNorm(rows, M.head_norm.device, eps, R, H, H, rows);
    if (c.logit_scale != 1.0f) be.Scale(rows, R * H, c.logit_scale);
    float* logits = S.logits.as<float>();
    be.Matmul(rows, R, H, lm_head_.weight, logits, local_vocab_, false);
    host_logits.resize(static_cast<size_t>(R * V));
    if (vocab_parallel) {
      OCTET_RETURN_IF_ERROR(hooks.gather_logits(logits, R, local_vocab_, host_logits.data()));
    } else {
      be.CopyToHost(host_logits.data(), logits, R * V * f);
    }
    OCTET_RETURN_IF_ERROR(be.Synchronize());
    if (all) {
      *logits_out = host_logits;
    } else if (logits_out != nullptr) {  // a chained step's rows after them
      logits_out->insert(logits_out->end(), host_logits.begin(), host_logits.end());
    }
    // Each chunk's greedy draft (the first of equal maxima; NaN never wins),
    // and the requests that chain another.
    std::vector<size_t> chained;
    std::vector<int64_t> chained_rows;
    for (size_t j = 0; j < chunks.size(); ++j) {
      const float* l = host_logits.data() + (all ? last[j] : int64_t(j)) * V;
      int32_t best = 0;
      for (int64_t i = 1; i < V; ++i) {
        if (l[i] > l[best] || std::isnan(l[best])) best = int32_t(i);
      }
      const size_t r = active[j];
      (*drafts)[r].push_back(best);
      if (static_cast<int>((*drafts)[r].size()) < requests[r].k) {
        chained.push_back(j);
        chained_rows.push_back(last[j]);
      }
    }
    if (chained.empty()) break;
    // Chain: each next position is fed this layer's output (pre-norm) at the
    // chunk's last row and the draft it gave.
    const int64_t C = static_cast<int64_t>(chained.size());
    be.CopyToDevice(S.row_index.data(), chained_rows.data(), C * int64_t{sizeof(int64_t)});
    be.GatherRows(x, H, S.row_index.as<int64_t>(), C, H, h);
    std::vector<size_t> next_active;
    std::vector<SequenceChunk> next_chunks;
    for (size_t j : chained) {
      SequenceChunk ch;
      ch.slot = chunks[j].slot;
      ch.start_pos = chunks[j].start_pos + static_cast<int64_t>(chunks[j].tokens.size());
      ch.tokens.assign(1, (*drafts)[active[j]].back());
      next_chunks.push_back(std::move(ch));
      next_active.push_back(active[j]);
    }
    chunks = std::move(next_chunks);
    active = std::move(next_active);
  }
  return Status::Ok();
}

}  // namespace octet::engine
