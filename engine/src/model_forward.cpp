// The forward pass: one batched step of every sequence chunk over the KV
// cache. Every operation on activations is a backend op on the backend's own
// memory (kernels/backend.h); this file only plans the step (which rows, which
// cache slots) and moves the step's small index arrays in and its logits out.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>

#include "octet/base/deadline.h"
#include "octet/base/huge_page_arena.h"
#include "octet/base/log.h"
#include "octet/engine/model.h"

namespace octet::engine {

// Activations and the step's index arrays, in the backend's memory, grown to
// the largest step seen.
struct Model::Scratch {
  kernels::Buffer x, xn, q, k, v, attn, proj, gate, up, rows, logits;
  kernels::Buffer ids, positions, row_index;
  std::vector<int32_t> host_ids, host_positions;
  std::vector<int64_t> host_rows;
};

// Defined here, where Scratch is complete.
Model::Model() = default;
Model::~Model() = default;

namespace {

// `b` holds at least `bytes` (contents not kept when it grows).
Status Ensure(kernels::KernelBackend& be, kernels::Buffer& b, int64_t bytes) {
  if (b.bytes() >= bytes && !b.empty()) return Status::Ok();
  b.Reset();
  OCTET_ASSIGN_OR_RETURN(b, be.Allocate(bytes));
  return Status::Ok();
}

}  // namespace

namespace {

// Where a decode forward's time goes, for tuning: with OCTET_PROFILE_DECODE=1
// in the environment, forwards of at most 8 tokens time their op groups (wall
// clock between marks; the backend ops are synchronous) and every 64 forwards
// of one token count log the mean ms per forward. Off (one branch per mark)
// otherwise.
class DecodeProfile {
 public:
  enum Op { kEmbed, kNorms, kQkv, kAttention, kO, kAllReduce, kGateUp, kDown, kLmHead, kOps };

  explicit DecodeProfile(int64_t tokens) : tokens_(tokens) {
    static const bool enabled = [] {
      const char* e = std::getenv("OCTET_PROFILE_DECODE");
      return e != nullptr && e[0] != '\0' && e[0] != '0';
    }();
    on_ = enabled && tokens >= 1 && tokens <= kMaxTokens;
    if (on_) last_ = NowNs();
  }
  ~DecodeProfile() {
    if (!on_) return;
    static std::mutex mu;
    static Totals totals[kMaxTokens + 1];
    std::lock_guard<std::mutex> lock(mu);
    Totals& t = totals[tokens_];
    for (int i = 0; i < kOps; ++i) t.ns[i] += ns_[i];
    if (++t.forwards < kReportEvery) return;
    static const char* kNames[kOps] = {"embed",     "norms+rope+add", "qkv",  "attention", "o",
                                       "allreduce", "gate_up+silu",   "down", "lm_head"};
    std::string line = "decode profile, " + std::to_string(tokens_) + " tokens, ms/forward:";
    int64_t total = 0;
    for (int i = 0; i < kOps; ++i) {
      char buf[64];
      std::snprintf(buf, sizeof(buf), " %s %.2f", kNames[i], t.ns[i] * 1e-6 / t.forwards);
      line += buf;
      total += t.ns[i];
    }
    char buf[64];
    std::snprintf(buf, sizeof(buf), " = %.2f", total * 1e-6 / t.forwards);
    OCTET_LOG(INFO) << line << buf;
    t = Totals();
  }
  // The time since the previous mark goes to `op`.
  void Mark(Op op) {
    if (!on_) return;
    const int64_t now = NowNs();
    ns_[op] += now - last_;
    last_ = now;
  }

 private:
  static constexpr int64_t kMaxTokens = 8;
  static constexpr int64_t kReportEvery = 64;
  struct Totals {
    int64_t ns[kOps] = {};
    int64_t forwards = 0;
  };
  int64_t tokens_;
  bool on_ = false;
  int64_t last_ = 0;
  int64_t ns_[kOps] = {};
};

}  // namespace

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
  if (!scratch_) scratch_ = std::make_unique<Scratch>();
  Scratch& S = *scratch_;
  DecodeProfile prof(T);
  const int64_t H = c.hidden_size, hd = c.head_dim;
  const int64_t qd = local_heads_ * hd, kvd = local_kv_heads_ * hd;
  const int64_t F = layers_.empty() ? 0 : layers_[0].gate.weight.rows;

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
  const int32_t* positions = S.positions.as<int32_t>();

  const float eps = c.rms_norm_eps;
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

  if (!vocab_parallel) {
    be.Embedding(embed_, ids, T, x);
  } else {
    // >>> Tensor parallelism: vocab-parallel embedding. This rank fills the rows
    // of the ids it holds and zeros elsewhere; the all-reduce completes every row.
    be.EmbeddingShard(embed_, vocab_begin_, ids, T, x);
    OCTET_RETURN_IF_ERROR(hooks.all_reduce(x, T * H));
  }
  std::vector<kernels::AttentionSequence> seqs(batch.size());
  if (c.embedding_norm) be.RmsNorm(x, embedding_norm_.device, eps, T, H, H, x);  // nanochat
  prof.Mark(DecodeProfile::kEmbed);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const LayerWeights& L = layers_[l];
    // ---- attention block: x += o_proj(attention(rope(q), rope(k), v)) ----
    be.RmsNorm(x, L.input_norm.device, eps, T, H, H, xn);
    prof.Mark(DecodeProfile::kNorms);
    const kernels::KernelBackend::MatmulOutput qkv[3] = {
        {&L.q.weight, q, qd}, {&L.k.weight, k, kvd}, {&L.v.weight, v, kvd}};
    be.MatmulMulti(xn, T, H, qkv, 3);
    prof.Mark(DecodeProfile::kQkv);
    add_bias(q, qd, L.q.bias);
    add_bias(k, kvd, L.k.bias);
    add_bias(v, kvd, L.v.bias);
    // QK-norm: RMSNorm over each head's features, before RoPE (Qwen3) or after (nanochat).
    if (c.qk_norm && !c.qk_norm_after_rope) {
      be.RmsNorm(q, L.q_norm.device, eps, T * local_heads_, hd, hd, q);
      be.RmsNorm(k, L.k_norm.device, eps, T * local_kv_heads_, hd, hd, k);
    }
    be.Rope(q, T, qd, local_heads_, hd, positions, inv_freq_.device);
    be.Rope(k, T, kvd, local_kv_heads_, hd, positions, inv_freq_.device);
    if (c.qk_norm && c.qk_norm_after_rope) {
      be.RmsNorm(q, L.q_norm.device, eps, T * local_heads_, hd, hd, q);
      be.RmsNorm(k, L.k_norm.device, eps, T * local_kv_heads_, hd, hd, k);
    }
    prof.Mark(DecodeProfile::kNorms);
    for (size_t s = 0; s < batch.size(); ++s) {
      const SequenceChunk& ch = batch[s];
      const int64_t n = static_cast<int64_t>(ch.tokens.size());
      be.KvStore(cache.StoreArgs(l, ch.slot, ch.start_pos, n, k + first[s] * kvd,
                                 v + first[s] * kvd, kvd));
      seqs[s] = {first[s],
                 n,
                 cache.k(l, ch.slot),
                 cache.v(l, ch.slot),
                 positions + first[s],
                 cache.dtype(),
                 cache.position_stride(),
                 cache.head_stride()};
    }
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
    be.Matmul(attn, T, qd, L.o.weight, proj, H, false);
    prof.Mark(DecodeProfile::kO);
    // >>> Tensor parallelism: o_proj is row-parallel; each rank holds a partial sum.
    if (hooks.all_reduce) OCTET_RETURN_IF_ERROR(hooks.all_reduce(proj, T * H));
    prof.Mark(DecodeProfile::kAllReduce);
    add_bias(proj, H, L.o.bias);  // a row-parallel bias is added once, after the sum
    be.Add(x, proj, T * H, x);

    // ---- MLP block: x += down_proj(silu(gate_proj(n)) * up_proj(n)) ----
    // (nanochat: x += c_proj(relu(c_fc(n))²), c_fc loaded as gate_proj.)
    const int64_t Fl = L.gate.weight.rows;
    be.RmsNorm(x, L.post_norm.device, eps, T, H, H, xn);
    prof.Mark(DecodeProfile::kNorms);
    if (c.relu2_mlp) {
      be.Matmul(xn, T, H, L.gate.weight, gate, Fl, false);
      add_bias(gate, Fl, L.gate.bias);
      be.Relu2(gate, T * Fl);
    } else {
      const kernels::KernelBackend::MatmulOutput gate_up[2] = {{&L.gate.weight, gate, Fl},
                                                               {&L.up.weight, up, Fl}};
      be.MatmulMulti(xn, T, H, gate_up, 2);
      add_bias(gate, Fl, L.gate.bias);
      add_bias(up, Fl, L.up.bias);
      be.SiluMul(gate, up, T, Fl, Fl, gate);
    }
    prof.Mark(DecodeProfile::kGateUp);
    be.Matmul(gate, T, Fl, L.down.weight, proj, H, false);
    prof.Mark(DecodeProfile::kDown);
    // >>> Tensor parallelism: down_proj is row-parallel; each rank holds a partial sum.
    if (hooks.all_reduce) OCTET_RETURN_IF_ERROR(hooks.all_reduce(proj, T * H));
    prof.Mark(DecodeProfile::kAllReduce);
    add_bias(proj, H, L.down.bias);
    be.Add(x, proj, T * H, x);
    prof.Mark(DecodeProfile::kNorms);
  }
  for (size_t s = 0; s < batch.size(); ++s) {
    cache.set_length(batch[s].slot,
                     batch[s].start_pos + static_cast<int64_t>(batch[s].tokens.size()));
  }

  // lm_head over the rows that need logits, written where the caller reads
  // them: straight into `out` on a host backend, through a copy otherwise.
  float* rows = S.rows.as<float>();
  be.GatherRows(x, H, S.row_index.as<int64_t>(), R, H, rows);
  be.RmsNorm(rows, final_norm_.device, eps, R, H, H, rows);
  out->vocab = c.vocab_size;
  out->logits.resize(R * out->vocab);
  float* logits = host_memory && !vocab_parallel ? out->logits.data() : S.logits.as<float>();
  be.Matmul(rows, R, H, lm_head_.weight, logits, local_vocab_, false);
  const float cap = c.logit_softcap;
  if (cap > 0) be.SoftCap(logits, R * local_vocab_, cap);  // nanochat: cap * tanh(z / cap)
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

}  // namespace octet::engine
