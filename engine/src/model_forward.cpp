// The forward pass: one batched step of every sequence chunk over the KV
// cache. Every operation on activations is a backend op on the backend's own
// memory (kernels/backend.h); this file only plans the step (which rows, which
// cache slots) and moves the step's small index arrays in and its logits out.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <set>

#include "model_scratch.h"
#include "octet/base/deadline.h"
#include "octet/base/huge_page_arena.h"
#include "octet/base/log.h"
#include "octet/engine/model.h"
#include "octet/kernels/moe_route.h"

namespace octet::engine {

// The router's spec for MoeRouteToken (octet/kernels/moe_route.h, which the
// CUDA backend's on-device routing runs too).
static kernels::MoeRouteSpec RouteSpec(const MoeConfig& m) {
  kernels::MoeRouteSpec s;
  s.num_experts = static_cast<int32_t>(m.num_experts);
  s.experts_per_token = static_cast<int32_t>(m.experts_per_token);
  s.sigmoid = m.scoring == MoeConfig::Scoring::kSigmoid;
  s.norm_topk_prob = m.norm_topk_prob;
  s.n_group = static_cast<int32_t>(m.n_group);
  s.topk_group = static_cast<int32_t>(m.topk_group);
  s.routed_scaling_factor = m.routed_scaling_factor;
  return s;
}

// Defined here, where Scratch is complete.
Model::Model() = default;
Model::~Model() = default;

Status Model::Forward(const std::vector<SequenceChunk>& batch, KvCache& cache, ForwardOutput* out,
                      const ForwardHooks& hooks) {
  const ModelConfig& c = config_;
  if (batch.empty()) return InvalidArgumentError("empty batch");
  if (cache.layers() != c.num_layers || cache.kv_heads() != local_kv_heads_ ||
      cache.head_dim() != c.head_dim) {
    return InvalidArgumentError("KV cache shape does not match the model");
  }
  // Validate everything before touching the cache.
  int64_t T = 0;
  std::set<int> slots;
  for (size_t s = 0; s < batch.size(); ++s) {
    const SequenceChunk& ch = batch[s];
    const std::string where =
        "sequence " + std::to_string(s) + " (slot " + std::to_string(ch.slot) + ")";
    if (ch.slot < 0 || ch.slot >= cache.num_slots()) {
      return InvalidArgumentError(where + ": slot out of range (cache has " +
                                  std::to_string(cache.num_slots()) + " slots)");
    }
    if (!slots.insert(ch.slot).second)
      return InvalidArgumentError(where + ": slot used twice in one batch");
    if (ch.tokens.empty()) return InvalidArgumentError(where + ": no tokens");
    if (ch.start_pos < 0 || ch.start_pos > cache.length(ch.slot)) {
      return InvalidArgumentError(where + ": start position " + std::to_string(ch.start_pos) +
                                  " but the cache holds " + std::to_string(cache.length(ch.slot)) +
                                  " positions");
    }
    const int64_t end = ch.start_pos + static_cast<int64_t>(ch.tokens.size());
    if (end > cache.capacity()) {
      return OutOfRangeError(where + ": " + std::to_string(end) +
                             " positions do not fit the KV cache capacity of " +
                             std::to_string(cache.capacity()));
    }
    for (size_t i = 0; i < ch.tokens.size(); ++i) {
      if (ch.tokens[i] < 0 || ch.tokens[i] >= c.vocab_size) {
        return InvalidArgumentError(where + ": token id " + std::to_string(ch.tokens[i]) +
                                    " at position " + std::to_string(ch.start_pos + i) +
                                    " is out of range (vocab size " + std::to_string(c.vocab_size) +
                                    ")");
      }
    }
    T += static_cast<int64_t>(ch.tokens.size());
  }
  const bool vocab_parallel = local_vocab_ != c.vocab_size;
  if (vocab_parallel && (!hooks.all_reduce || !hooks.gather_logits)) {
    return FailedPreconditionError(
        "the model holds a vocab-parallel shard: Forward needs the all_reduce and "
        "gather_logits hooks");
  }

  kernels::KernelBackend& be = *backend_;
  // Verify chunks: every row as a one-token forward would compute it.
  bool verify = false;
  for (const SequenceChunk& ch : batch) verify = verify || ch.verify;
  struct BatchInvariant {
    kernels::KernelBackend& be;
    const bool on;
    BatchInvariant(kernels::KernelBackend& b, bool o) : be(b), on(o) {
      if (on) be.set_batch_invariant(true);
    }
    ~BatchInvariant() {
      if (on) be.set_batch_invariant(false);
    }
  } invariant(be, verify && T <= kMaxVerifyStepRows);
  if (!scratch_) scratch_ = std::make_unique<Scratch>();
  Scratch& S = *scratch_;
  DecodeProfile prof(T, be.memory_kind() == kernels::MemoryKind::kHost ? nullptr : &be);
  const int64_t H = c.hidden_size, hd = c.head_dim;
  const int64_t qd = local_heads_ * hd, kvd = local_kv_heads_ * hd;
  const int64_t F = max_mlp_width_;
  const int64_t E = c.moe.num_experts;

  // The step's plan, on the host: token ids and positions per row, the first
  // row of each chunk, and the rows that need logits (the last token of each
  // chunk, or all of a chunk's tokens when asked).
  S.host_ids.resize(T);
  S.host_positions.resize(T);
  S.host_rows.clear();
  std::vector<int64_t> first(batch.size());
  out->row_begin.assign(batch.size(), 0);
  {
    int64_t r = 0;
    for (size_t s = 0; s < batch.size(); ++s) {
      first[s] = r;
      const int64_t n = static_cast<int64_t>(batch[s].tokens.size());
      out->row_begin[s] = static_cast<int64_t>(S.host_rows.size());
      for (int64_t i = batch[s].all_logits ? 0 : n - 1; i < n; ++i) S.host_rows.push_back(r + i);
      for (int64_t i = 0; i < n; ++i, ++r) {
        S.host_ids[r] = batch[s].tokens[i];
        S.host_positions[r] = static_cast<int32_t>(batch[s].start_pos + i);
      }
    }
  }
  const int64_t R = static_cast<int64_t>(S.host_rows.size());
  constexpr int64_t f = sizeof(float);
  for (auto [buf, bytes] : std::initializer_list<std::pair<kernels::Buffer*, int64_t>>{
           {&S.x, T * H * f},
           {&S.xn, T * H * f},
           {&S.proj, T * H * f},
           {&S.q, T * qd * f},
           {&S.attn, T * qd * f},
           {&S.k, T * kvd * f},
           {&S.v, T * kvd * f},
           {&S.gate, T * F * f},
           {&S.up, T * F * f},
           {&S.rows, R * H * f},
           {&S.ids, T * int64_t{sizeof(int32_t)}},
           {&S.positions, T * int64_t{sizeof(int32_t)}},
           {&S.row_index, R * int64_t{sizeof(int64_t)}}}) {
    OCTET_RETURN_IF_ERROR(Ensure(be, *buf, bytes));
  }
  if (!mtp_.empty()) OCTET_RETURN_IF_ERROR(Ensure(be, S.hidden, T * H * f));
  if (E > 0) {
    const int64_t routes = T * c.moe.experts_per_token;
    for (auto [buf, bytes] : std::initializer_list<std::pair<kernels::Buffer*, int64_t>>{
             {&S.router_logits, T * E * f},
             {&S.expert_in, T * H * f},
             {&S.expert_out, T * H * f},
             {&S.route_rows, routes * int64_t{sizeof(int64_t)}},
             {&S.route_weights, routes * f}}) {
      OCTET_RETURN_IF_ERROR(Ensure(be, *buf, bytes));
    }
  }
  // The logits get a buffer of their own only where `out` cannot take them
  // directly: a device backend, or a vocab-parallel shard to be gathered.
  const bool host_memory = be.memory_kind() != kernels::MemoryKind::kDevice;
  if (!host_memory || vocab_parallel) {
    OCTET_RETURN_IF_ERROR(Ensure(be, S.logits, R * local_vocab_ * f));
  }
  be.CopyToDevice(S.ids.data(), S.host_ids.data(), T * int64_t{sizeof(int32_t)});
  be.CopyToDevice(S.positions.data(), S.host_positions.data(), T * int64_t{sizeof(int32_t)});
  be.CopyToDevice(S.row_index.data(), S.host_rows.data(), R * int64_t{sizeof(int64_t)});
  const int32_t* ids = S.ids.as<int32_t>();
  const float eps = c.rms_norm_eps;
  float* x = S.x.as<float>();  // residual stream [T, H]
  float* rows = S.rows.as<float>();
  out->vocab = c.vocab_size;
  out->logits.resize(R * out->vocab);
  float* logits = host_memory && !vocab_parallel ? out->logits.data() : S.logits.as<float>();

  // The step's ops, from the embedding to the logits. A decode-sized step on
  // a device backend may be recorded and run as one unit (BeginRecording:
  // CUDA graphs); nothing in here reads a result on the host then.
  const auto ops = [&]() -> Status {
    if (!vocab_parallel) {
      be.Embedding(embed_, ids, T, x);
    } else {
      // >>> Tensor parallelism: vocab-parallel embedding. This rank fills the rows
      // of the ids it holds and zeros elsewhere; the all-reduce completes every row.
      be.EmbeddingShard(embed_, vocab_begin_, ids, T, x);
      OCTET_RETURN_IF_ERROR(hooks.all_reduce(x, T * H));
    }
    if (c.embedding_norm) be.RmsNorm(x, embedding_norm_.device, eps, T, H, H, x);  // nanochat
    if (c.embedding_scale != 1.0f) be.Scale(x, T * H, c.embedding_scale);          // MiniCPM
    prof.Mark(DecodeProfile::kEmbed);
    for (int64_t l = 0; l < c.num_layers; ++l) {
      OCTET_RETURN_IF_ERROR(RunLayer(layers_[l], cache, l, batch, first, T, hooks, prof));
    }

    // lm_head over the rows that need logits, written where the caller reads
    // them: straight into `out` on a host backend, through a copy otherwise.
    if (mtp_.empty()) {
      be.GatherRows(x, H, S.row_index.as<int64_t>(), R, H, rows);
      be.RmsNorm(rows, final_norm_.device, eps, R, H, H, rows);
    } else {
      // Every row's final hidden state is kept for the MTP layer's drafts.
      float* hidden = S.hidden.as<float>();
      be.RmsNorm(x, final_norm_.device, eps, T, H, H, hidden);
      be.GatherRows(hidden, H, S.row_index.as<int64_t>(), R, H, rows);
    }
    if (c.logit_scale != 1.0f) be.Scale(rows, R * H, c.logit_scale);  // MiniCPM
    be.Matmul(rows, R, H, lm_head_.weight, logits, local_vocab_, false);
    const float cap = c.logit_softcap;
    if (cap > 0) be.SoftCap(logits, R * local_vocab_, cap);  // nanochat: cap * tanh(z / cap)
    return Status::Ok();
  };
  OCTET_RETURN_IF_ERROR(
      StepRecordable(T, vocab_parallel, hooks, prof) ? RecordedStep(batch, cache, ops) : ops());
  for (size_t s = 0; s < batch.size(); ++s) {
    cache.set_length(batch[s].slot,
                     batch[s].start_pos + static_cast<int64_t>(batch[s].tokens.size()));
  }
  if (!mtp_.empty()) {  // the chunks whose final hidden states S.hidden holds
    last_first_ = first;
    last_rows_.resize(batch.size());
    for (size_t s = 0; s < batch.size(); ++s) {
      last_rows_[s] = static_cast<int64_t>(batch[s].tokens.size());
    }
  }
  if (!vocab_parallel) {
    if (logits != out->logits.data()) {
      be.CopyToHost(out->logits.data(), logits, R * out->vocab * f);
    }
    prof.Mark(DecodeProfile::kLmHead);
    return be.Synchronize();
  }
  // >>> Tensor parallelism: vocab-parallel lm_head; every rank's rows gathered.
  Status gathered = hooks.gather_logits(logits, R, local_vocab_, out->logits.data());
  prof.Mark(DecodeProfile::kLmHead);
  return gathered;
}

bool Model::StepRecordable(int64_t T, bool vocab_parallel, const ForwardHooks& hooks,
                           const DecodeProfile& prof) const {
  // Prefill-sized steps are long kernels (cuBLAS), where a launch costs
  // nothing to speak of.
  constexpr int64_t kMaxRecordedRows = 8;
  if (backend_->memory_kind() != kernels::MemoryKind::kDevice || T > kMaxRecordedRows ||
      vocab_parallel || hooks.all_reduce || prof.on()) {
    return false;
  }
  // MoeMlp's own condition for the backend's routing, else it routes on the host.
  for (const LayerWeights& L : layers_) {
    if (L.is_moe() && !(L.moe.device_experts && !grouped_experts_.has_value() &&
                        T <= backend_->grouped_experts_max_tokens())) {
      return false;
    }
  }
  return true;
}

Status Model::RecordedStep(const std::vector<SequenceChunk>& batch, const KvCache& cache,
                           const std::function<Status()>& ops) {
  kernels::KernelBackend& be = *backend_;
  Scratch& S = *scratch_;
  // With no recording to run again, a backend that does not record (CUDA
  // without OCTET_CUDA_GRAPHS) takes the ops at once: no key to build.
  bool recording = false;
  if (S.recordings.empty()) {
    if (!be.BeginRecording()) return ops();
    recording = true;
  }
  // What decides the step's ops and every argument they take, device memory's
  // contents aside: each chunk's slot and rows (and so the rows that take
  // logits), the cache memory of those slots, the scratch buffers.
  std::vector<uintptr_t>& key = S.step_key;
  key.clear();
  const auto add = [&key](auto v) { key.push_back(static_cast<uintptr_t>(v)); };
  add(grouped_experts_.has_value() ? 1 + *grouped_experts_ : 0);
  add(cache.position_stride());
  add(cache.head_stride());
  add(static_cast<int>(cache.dtype()));
  for (const SequenceChunk& ch : batch) {
    add(ch.slot);
    add(ch.tokens.size());
    add(ch.all_logits);
    add(ch.verify);
    for (int64_t l = 0; l < cache.layers(); ++l) {
      add(reinterpret_cast<uintptr_t>(cache.k(l, ch.slot)));
      add(reinterpret_cast<uintptr_t>(cache.v(l, ch.slot)));
    }
  }
  static constexpr kernels::Buffer Scratch::*kStepBuffers[] = {&Scratch::x,
                                                               &Scratch::xn,
                                                               &Scratch::q,
                                                               &Scratch::k,
                                                               &Scratch::v,
                                                               &Scratch::attn,
                                                               &Scratch::proj,
                                                               &Scratch::gate,
                                                               &Scratch::up,
                                                               &Scratch::rows,
                                                               &Scratch::logits,
                                                               &Scratch::ids,
                                                               &Scratch::positions,
                                                               &Scratch::row_index,
                                                               &Scratch::router_logits,
                                                               &Scratch::expert_in,
                                                               &Scratch::expert_out,
                                                               &Scratch::route_rows,
                                                               &Scratch::route_weights,
                                                               &Scratch::expert_gate,
                                                               &Scratch::expert_up,
                                                               &Scratch::hidden};
  for (kernels::Buffer Scratch::*b : kStepBuffers) add(reinterpret_cast<uintptr_t>((S.*b).data()));
  // The step recorded before: run it again.
  auto known = std::find_if(S.recordings.begin(), S.recordings.end(),
                            [&](const Scratch::Recording& r) { return r.key == key; });
  int64_t replace = -1;
  if (known != S.recordings.end()) {
    known->last_used = ++S.recording_clock;
    const Status again = be.RunRecording(known->id);
    if (again.code() != StatusCode::kAborted) return again;
    replace = known->id;  // the backend cannot: record it anew
  }
  if (!recording && !be.BeginRecording()) return ops();
  const Status issued = ops();
  Result<int64_t> id = be.EndRecording(/*run=*/issued.ok(), replace);
  // Aborted: nothing recorded ran (an op needed the host, or memory to grow);
  // the same ops again, each as it is issued.
  if (!id.ok() && id.status().code() == StatusCode::kAborted) return ops();
  OCTET_RETURN_IF_ERROR(issued);
  OCTET_RETURN_IF_ERROR(id.status());
  if (*id >= 0) {
    if (known == S.recordings.end()) {
      constexpr size_t kMaxRecordings = 8;
      if (S.recordings.size() < kMaxRecordings) {
        known = S.recordings.emplace(S.recordings.end());
      } else {
        known = std::min_element(S.recordings.begin(), S.recordings.end(),
                                 [](const Scratch::Recording& a, const Scratch::Recording& b) {
                                   return a.last_used < b.last_used;
                                 });
      }
      known->key = key;
      known->last_used = ++S.recording_clock;
    }
    known->id = *id;
  }
  return Status::Ok();
}

Status Model::RunLayer(const LayerWeights& L, KvCache& cache, int64_t cache_layer,
                       const std::vector<SequenceChunk>& batch, const std::vector<int64_t>& first,
                       int64_t T, const ForwardHooks& hooks, DecodeProfile& prof) {
  const ModelConfig& c = config_;
  kernels::KernelBackend& be = *backend_;
  Scratch& S = *scratch_;
  const int64_t H = c.hidden_size, hd = c.head_dim;
  const int64_t qd = local_heads_ * hd, kvd = local_kv_heads_ * hd;
  const float eps = c.rms_norm_eps;
  const int32_t* positions = S.positions.as<int32_t>();
  float* x = S.x.as<float>();    // residual stream [T, H]
  float* xn = S.xn.as<float>();  // normed input of a block [T, H]
  float* q = S.q.as<float>();    // [T, heads, hd]
  float* k = S.k.as<float>();    // [T, kv_heads, hd]
  float* v = S.v.as<float>();
  float* attn = S.attn.as<float>();  // [T, heads * hd]
  float* proj = S.proj.as<float>();  // o_proj / down_proj output [T, H]
  float* gate = S.gate.as<float>();  // [T, F]
  float* up = S.up.as<float>();
  auto add_bias = [&](float* y, int64_t ld, const ParamVector& bias) {
    if (!bias.empty()) be.AddRowVector(y, T, ld, ld, bias.device);
  };
  std::vector<kernels::AttentionSequence> seqs(batch.size());
  // ---- attention block: x += o_proj(attention(rope(q), rope(k), v)) ----
  // The input norm goes into the q/k/v matmuls (xn is not read again in this
  // block; a device backend may skip writing it).
  const kernels::KernelBackend::MatmulOutput qkv[3] = {
      {&L.q.weight, q, qd}, {&L.k.weight, k, kvd}, {&L.v.weight, v, kvd}};
  be.NormMatmulMulti(x, T, H, L.input_norm.device, eps, xn, qkv, 3);
  prof.Mark(DecodeProfile::kQkv);
  add_bias(q, qd, L.q.bias);
  add_bias(k, kvd, L.k.bias);
  add_bias(v, kvd, L.v.bias);
  std::vector<kernels::KvStoreArgs> stores(batch.size());
  for (size_t s = 0; s < batch.size(); ++s) {
    const SequenceChunk& ch = batch[s];
    const int64_t n = static_cast<int64_t>(ch.tokens.size());
    stores[s] = cache.StoreArgs(cache_layer, ch.slot, ch.start_pos, n, k + first[s] * kvd,
                                v + first[s] * kvd, kvd);
    seqs[s] = {first[s],
               n,
               cache.k(cache_layer, ch.slot),
               cache.v(cache_layer, ch.slot),
               positions + first[s],
               cache.dtype(),
               cache.position_stride(),
               cache.head_stride(),
               ch.start_pos + n};
  }
  // QK-norm (RMSNorm over each head's features, before RoPE as Qwen3 or
  // after it as nanochat) and RoPE in one op. Partial RoPE (GLM-4.5) rotates
  // the first rotary_dim features of each head; the rest pass unchanged.
  // Then the new keys and values go into each sequence's cache.
  const kernels::KernelBackend::QkPrepArgs prep{.q = q,
                                                .q_heads = local_heads_,
                                                .k = k,
                                                .k_heads = local_kv_heads_,
                                                .rows = T,
                                                .head_dim = hd,
                                                .rotary_dim = c.rotary_dim == 0 ? hd : c.rotary_dim,
                                                .positions = positions,
                                                .inv_freq = inv_freq_.device,
                                                .qk_norm = c.qk_norm,
                                                .norm_after_rope = c.qk_norm_after_rope,
                                                .q_norm = L.q_norm.device,
                                                .k_norm = L.k_norm.device,
                                                .eps = eps,
                                                .stores = stores.data(),
                                                .n_stores = static_cast<int64_t>(stores.size())};
  be.PrepareQk(prep);
  prof.Mark(DecodeProfile::kNorms);
  kernels::AttentionArgs a;
  a.q = q;
  a.q_row_stride = qd;
  a.out = attn;
  a.out_row_stride = qd;
  a.n_heads = local_heads_;
  a.n_kv_heads = local_kv_heads_;
  a.head_dim = hd;
  a.scale = 1.0f / std::sqrt(static_cast<float>(hd));
  a.sequences = seqs.data();
  a.n_sequences = static_cast<int64_t>(seqs.size());
  be.Attention(a);
  prof.Mark(DecodeProfile::kAttention);
  // On one rank, with no bias or branch scale to apply between them, the
  // matmul adds the projection to the residual stream itself (accumulate):
  // no Add, and on a GPU one launch less per block.
  const bool accumulate_residual = !hooks.all_reduce && c.residual_scale == 1.0f;
  if (accumulate_residual && L.o.bias.empty()) {
    be.Matmul(attn, T, qd, L.o.weight, x, H, true);
    prof.Mark(DecodeProfile::kO);
  } else {
    be.Matmul(attn, T, qd, L.o.weight, proj, H, false);
    prof.Mark(DecodeProfile::kO);
    // >>> Tensor parallelism: o_proj is row-parallel; each rank holds a partial sum.
    if (hooks.all_reduce) OCTET_RETURN_IF_ERROR(hooks.all_reduce(proj, T * H));
    prof.Mark(DecodeProfile::kAllReduce);
    add_bias(proj, H, L.o.bias);  // a row-parallel bias is added once, after the sum
    if (c.residual_scale != 1.0f) be.Scale(proj, T * H, c.residual_scale);  // MiniCPM
    be.Add(x, proj, T * H, x);
  }

  // ---- MLP block: x += down_proj(silu(gate_proj(n)) * up_proj(n)) ----
  // (nanochat: x += c_proj(relu(c_fc(n))²), c_fc loaded as gate_proj.)
  const int64_t Fl = L.gate.weight.rows;
  if (L.is_moe()) {
    // The router, the shared experts and the routed ones all read xn.
    be.RmsNorm(x, L.post_norm.device, eps, T, H, H, xn);
    prof.Mark(DecodeProfile::kNorms);
    OCTET_RETURN_IF_ERROR(MoeMlp(L, xn, T, proj));
  } else if (c.relu2_mlp) {
    const kernels::KernelBackend::MatmulOutput fc = {&L.gate.weight, gate, Fl};
    be.NormMatmulMulti(x, T, H, L.post_norm.device, eps, xn, &fc, 1);
    add_bias(gate, Fl, L.gate.bias);
    be.Relu2(gate, T * Fl);
  } else {
    const kernels::KernelBackend::MatmulOutput gate_up[2] = {{&L.gate.weight, gate, Fl},
                                                             {&L.up.weight, up, Fl}};
    be.NormMatmulMulti(x, T, H, L.post_norm.device, eps, xn, gate_up, 2);
    add_bias(gate, Fl, L.gate.bias);
    add_bias(up, Fl, L.up.bias);
    // silu(gate) * up goes into down_proj's call (below).
  }
  prof.Mark(DecodeProfile::kGateUp);
  // down_proj of the dense MLP's hidden state (SiLU·mul with it, or
  // nanochat's relu² already applied), into y.
  const auto down = [&](float* y, bool accumulate) {
    if (c.relu2_mlp) {
      be.Matmul(gate, T, Fl, L.down.weight, y, H, accumulate);
    } else {
      be.SiluMulMatmul(gate, up, T, Fl, L.down.weight, y, H, accumulate);
    }
  };
  if (!L.is_moe() && accumulate_residual && L.down.bias.empty()) {
    down(x, true);  // as o_proj above
    prof.Mark(DecodeProfile::kDown);
    return Status::Ok();
  }
  if (!L.is_moe()) down(proj, false);
  prof.Mark(DecodeProfile::kDown);
  // >>> Tensor parallelism: down_proj is row-parallel; each rank holds a partial sum.
  if (hooks.all_reduce) OCTET_RETURN_IF_ERROR(hooks.all_reduce(proj, T * H));
  prof.Mark(DecodeProfile::kAllReduce);
  add_bias(proj, H, L.down.bias);
  if (c.residual_scale != 1.0f) be.Scale(proj, T * H, c.residual_scale);  // MiniCPM
  be.Add(x, proj, T * H, x);
  prof.Mark(DecodeProfile::kNorms);
  return Status::Ok();
}

Status Model::MoeMlp(const LayerWeights& L, const float* xn, int64_t T, float* out) {
  const MoeConfig& m = config_.moe;
  kernels::KernelBackend& be = *backend_;
  Scratch& S = *scratch_;
  const int64_t H = config_.hidden_size, E = m.num_experts, k = m.experts_per_token;
  constexpr int64_t f = sizeof(float);
  float* router = S.router_logits.as<float>();
  be.Matmul(xn, T, H, L.moe.router.weight, router, E, false);
  float* gate = S.gate.as<float>();
  float* up = S.up.as<float>();
  // The shared expert over every token, or zeros; then each routed expert's
  // weighted rows added in.
  auto shared_or_zeros = [&]() {
    if (!L.moe.shared.empty()) {
      const GatedMlp& g = L.moe.shared;
      const int64_t Fs = g.gate.weight.rows;
      const kernels::KernelBackend::MatmulOutput gate_up[2] = {{&g.gate.weight, gate, Fs},
                                                               {&g.up.weight, up, Fs}};
      be.MatmulMulti(xn, T, H, gate_up, 2);
      be.SiluMulMatmul(gate, up, T, Fs, g.down.weight, out, H, false);
    } else {
      be.Fill(out, T * H, 0.0f);
    }
  };
  // A backend that routes itself (PrepareExperts took the layer) does a
  // decode step's routing and experts with no host round trip.
  if (L.moe.device_experts && !grouped_experts_.has_value() &&
      T <= be.grouped_experts_max_tokens()) {
    shared_or_zeros();
    kernels::KernelBackend::MoeDecodeArgs a{};
    a.x = xn;
    a.tokens = T;
    a.ldx = H;
    a.router_logits = router;
    a.route = RouteSpec(m);
    a.bias = L.moe.device_score_bias;
    a.experts = L.moe.device_experts;
    a.hidden = H;
    a.width = L.moe.experts[0].gate.weight.rows;  // this rank's
    a.out = out;
    a.ldo = H;
    return be.MoeDecode(a);
  }
  // Route on the host, in float32, from the router's logits.
  S.host_router.resize(T * E);
  be.CopyToHost(S.host_router.data(), router, T * E * f);
  std::vector<int32_t> chosen(T * k);
  std::vector<float> weight(T * k);
  const kernels::MoeRouteSpec spec = RouteSpec(m);
  S.route.score.resize(E);
  S.route.choice.resize(E);
  S.route.group_score.resize(m.n_group);
  for (int64_t t = 0; t < T; ++t) {
    kernels::MoeRouteToken(spec, S.host_router.data() + t * E,
                           L.moe.score_bias.empty() ? nullptr : L.moe.score_bias.data(),
                           S.route.score.data(), S.route.choice.data(), S.route.group_score.data(),
                           chosen.data() + t * k, weight.data() + t * k);
  }
  // Group the (token, weight) pairs by expert: each active expert then runs
  // one matmul over all of its tokens.
  S.expert_begin.assign(E + 1, 0);
  for (int32_t e : chosen) ++S.expert_begin[e + 1];
  for (int64_t e = 0; e < E; ++e) S.expert_begin[e + 1] += S.expert_begin[e];
  S.host_route_rows.resize(T * k);
  S.host_route_weights.resize(T * k);
  {
    std::vector<int64_t> fill(S.expert_begin.begin(), S.expert_begin.end() - 1);
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t i = 0; i < k; ++i) {
        const int64_t slot = fill[chosen[t * k + i]]++;
        S.host_route_rows[slot] = t;
        S.host_route_weights[slot] = weight[t * k + i];
      }
    }
  }
  int64_t* rows = S.route_rows.as<int64_t>();
  float* weights = S.route_weights.as<float>();
  be.CopyToDevice(rows, S.host_route_rows.data(), T * k * int64_t{sizeof(int64_t)});
  be.CopyToDevice(weights, S.host_route_weights.data(), T * k * f);

  shared_or_zeros();
  float* in = S.expert_in.as<float>();
  float* y = S.expert_out.as<float>();
  // Decode-sized steps may take the grouped path (set_grouped_experts; by
  // default the backend's grouped_experts_max_tokens): every chosen expert
  // in one call per projection (backend.h). On the CPU backends it measured
  // no gain (0.90-1.02x the tok/s, octet_bench_engine --moe-ab, docs/performance.md), so
  // they keep the per-expert calls; on CUDA each call is a kernel launch.
  const int64_t grouped_max = grouped_experts_.has_value()
                                  ? (*grouped_experts_ ? kGroupedExpertsMaxTokens : 0)
                                  : be.grouped_experts_max_tokens();
  if (T <= grouped_max && be.supports(kernels::Op::kMatmulGrouped) &&
      be.supports(kernels::Op::kMatmulScatterAdd)) {
    // Each expert's rows gathered end to end in expert order (at T == 1 all
    // of them xn itself), gate/up of all of them, one SiLU over all the
    // routes, then every down projection added, router-weighted, into the
    // tokens' rows, in the same order as the per-expert calls below (the
    // same sums).
    const int64_t Fe = L.moe.experts[0].gate.weight.rows;  // this rank's width
    const int64_t routes = T * k;
    OCTET_RETURN_IF_ERROR(Ensure(be, S.expert_gate, routes * Fe * f));
    OCTET_RETURN_IF_ERROR(Ensure(be, S.expert_up, routes * Fe * f));
    float* eg = S.expert_gate.as<float>();
    float* eu = S.expert_up.as<float>();
    const float* x_all = xn;
    int64_t ldx = 0;  // T == 1: every expert reads the one row of xn
    if (T > 1) {
      OCTET_RETURN_IF_ERROR(Ensure(be, S.expert_in, routes * H * f));
      in = S.expert_in.as<float>();
      be.GatherRows(xn, H, rows, routes, H, in);
      x_all = in;
      ldx = H;
    }
    std::vector<kernels::KernelBackend::GroupedProduct> gate_up;
    std::vector<kernels::KernelBackend::ScatterProduct> down;
    gate_up.reserve(2 * std::min(E, routes));
    down.reserve(std::min(E, routes));
    for (int64_t e = 0; e < E; ++e) {
      const int64_t begin = S.expert_begin[e], n = S.expert_begin[e + 1] - begin;
      if (n == 0) continue;
      const GatedMlp& g = L.moe.experts[e];
      const float* x_e = x_all + begin * ldx;
      gate_up.push_back({x_e, n, H, &g.gate.weight, eg + begin * Fe, Fe});
      gate_up.push_back({x_e, n, H, &g.up.weight, eu + begin * Fe, Fe});
      down.push_back({eg + begin * Fe, n, Fe, &g.down.weight, rows + begin, weights + begin});
    }
    be.MatmulGrouped(gate_up.data(), static_cast<int>(gate_up.size()));
    be.SiluMul(eg, eu, routes, Fe, Fe, eg);
    be.MatmulScatterAdd(down.data(), static_cast<int>(down.size()), H, out, H, y);
    return Status::Ok();
  }
  for (int64_t e = 0; e < E; ++e) {
    const int64_t begin = S.expert_begin[e], n = S.expert_begin[e + 1] - begin;
    if (n == 0) continue;
    const GatedMlp& g = L.moe.experts[e];
    const int64_t Fe = g.gate.weight.rows;
    const float* x_e = xn;
    if (n != T) {  // not every token: gather this expert's rows
      be.GatherRows(xn, H, rows + begin, n, H, in);
      x_e = in;
    }
    const kernels::KernelBackend::MatmulOutput gate_up[2] = {{&g.gate.weight, gate, Fe},
                                                             {&g.up.weight, up, Fe}};
    be.MatmulMulti(x_e, n, H, gate_up, 2);
    be.SiluMulMatmul(gate, up, n, Fe, g.down.weight, y, H, false);
    be.ScatterAddRows(y, H, rows + begin, weights + begin, n, H, out, H);
  }
  return Status::Ok();
}

}  // namespace octet::engine
