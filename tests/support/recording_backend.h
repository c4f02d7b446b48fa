// RecordingBackend: a CPU backend dressed as a device backend that records
// (KernelBackend::BeginRecording), so the engine's recorded decode steps run
// on machines without a GPU. It keeps what a CUDA graph keeps: each op of a
// recording is stored with the arguments it was issued with (host arrays such
// as a MatmulMulti's outputs or an attention's sequences copied, as a kernel's
// parameters are) and runs when EndRecording runs it, and again, unchanged,
// for each RunRecording, reading whatever the memory it names holds then. Its
// rules are the CUDA backend's: an op that needs the host (a copy, a
// synchronization, an allocation, Argmax / TopK / MoeDecode, whose results
// the caller reads) aborts the recording; recorded, PrepareQk's stores go to
// the positions of their rows (backend.h); a recording whose ops took a
// step's own values (KvStore, KvStoreBatch, the host-routed expert ops) runs
// once only. A recording runs again only if the engine's step key matched, so
// a key that misses something the ops depend on shows as logits that differ
// from the same model's op by op.
//
// With Options::route_experts it also routes experts itself, as the CUDA
// backend with OCTET_CUDA_MOE_ROUTING=device does: PrepareExperts gives each
// layer a table of its experts, and MoeDecode (decode steps of up to 8
// tokens) is recorded like any op and routes from the router's logits when it
// runs, so a replayed step routes its own tokens. Its arithmetic is MoeMlp's
// host path, the same calls in the same order, so the logits are those of the
// host-routed model bit for bit.
#pragma once

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "octet/kernels/backend.h"
#include "octet/kernels/moe_route.h"

namespace octet::test {

struct RecordingOptions {
  bool route_experts = false;  // PrepareExperts and MoeDecode, as a device's (above)
};

class RecordingBackend final : public kernels::KernelBackend {
 public:
  using KernelBackend = kernels::KernelBackend;
  using WeightMatrix = kernels::WeightMatrix;
  using WeightFormat = kernels::WeightFormat;

  using Options = RecordingOptions;
  explicit RecordingBackend(std::unique_ptr<KernelBackend> inner, Options options = Options())
      : inner_(std::move(inner)), options_(options) {}

  // The next n recordings end Aborted, as a device's do when a scratch
  // buffer must grow while it records.
  void AbortNextRecordings(int n) { abort_next_ = n; }
  // Every n-th RunRecording first finds the scratch moved, as the CUDA
  // backend's recordings do after a scratch buffer grew (its epoch): every
  // recording made before cannot run again, and the engine records anew.
  void MoveScratchEveryNthRun(int n) { move_every_ = n; }

  std::string_view name() const override { return "recording"; }
  int num_threads() const override { return inner_->num_threads(); }
  bool supports(WeightFormat f) const override { return inner_->supports(f); }
  bool supports(kernels::Op op, WeightFormat f) const override { return inner_->supports(op, f); }
  // The engine treats it as a device: the ops' memory is reached only
  // through the copies (host memory underneath).
  kernels::MemoryKind memory_kind() const override { return kernels::MemoryKind::kDevice; }
  Result<kernels::Buffer> Allocate(int64_t bytes) override {
    if (Unrecordable()) return AbortedError("recording: an allocation");
    return inner_->Allocate(bytes);
  }
  void CopyToDevice(void* dst, const void* src, int64_t bytes) override {
    if (!Unrecordable()) inner_->CopyToDevice(dst, src, bytes);
  }
  void CopyToHost(void* dst, const void* src, int64_t bytes) override {
    if (Unrecordable()) {
      std::memset(dst, 0, static_cast<size_t>(bytes));
      return;
    }
    inner_->CopyToHost(dst, src, bytes);
  }
  Status Synchronize() override {
    if (Unrecordable()) return AbortedError("recording: a synchronization");
    return inner_->Synchronize();
  }
  Result<kernels::MemoryBudget> AvailableMemory(const std::string& meminfo) const override {
    return inner_->AvailableMemory(meminfo);
  }
  Result<WeightMatrix> PrepareWeight(const WeightMatrix& w,
                                     std::vector<kernels::Buffer>* storage) override {
    return inner_->PrepareWeight(w, storage);
  }
  kernels::ThreadPool* host_thread_pool() override { return inner_->host_thread_pool(); }
  bool UsesNvfp4Tiles() const override { return inner_->UsesNvfp4Tiles(); }
  // A mode of the inner backend's kernels, set between ops (not taped): a
  // recording replays under the mode the engine sets before it runs it.
  bool set_batch_invariant(bool on) override { return inner_->set_batch_invariant(on); }
  int64_t grouped_experts_max_tokens() const override {
    return options_.route_experts ? kMaxDecodeTokens : inner_->grouped_experts_max_tokens();
  }

  // ---- recording ----
  bool BeginRecording() override {
    if (recording_) return false;
    recording_ = true;
    aborted_ = false;
    replayable_ = true;
    tape_.clear();
    return true;
  }
  Result<int64_t> EndRecording(bool run, int64_t replace) override {
    recording_ = false;
    std::vector<std::function<void()>> tape = std::move(tape_);
    tape_.clear();
    if (abort_next_ > 0) {
      --abort_next_;
      aborted_ = true;
    }
    if (aborted_) {
      ++counts_.aborted;
      return AbortedError("recording: an op needed the host");
    }
    if (!run) return int64_t{-1};
    recordings_.erase(replace);
    const int64_t id = next_id_++;
    Recording& r = recordings_[id];
    r.tape = std::move(tape);
    r.replayable = replayable_;
    r.epoch = epoch_;
    for (const auto& op : r.tape) op();
    ++counts_.recorded;
    return id;
  }
  Status RunRecording(int64_t id) override {
    if (move_every_ > 0 && ++runs_ % move_every_ == 0) ++epoch_;
    const auto it = recordings_.find(id);
    if (it == recordings_.end() || !it->second.replayable || it->second.epoch != epoch_) {
      return AbortedError("recording " + std::to_string(id) + " cannot run again");
    }
    for (const auto& op : it->second.tape) op();
    ++counts_.replayed;
    return Status::Ok();
  }
  RecordingCounts recording_counts() const override { return counts_; }

  // ---- ops: recorded while recording, else run ----
  void Matmul(const float* x, int64_t m, int64_t ldx, const WeightMatrix& w, float* y, int64_t ldy,
              bool acc) override {
    Do([=, this] { inner_->Matmul(x, m, ldx, w, y, ldy, acc); });
  }
  void MatmulMulti(const float* x, int64_t m, int64_t ldx, const MatmulOutput* outputs,
                   int n) override {
    std::vector<MatmulOutput> o(outputs, outputs + n);
    Do([=, this] { inner_->MatmulMulti(x, m, ldx, o.data(), n); });
  }
  void NormMatmulMulti(const float* x, int64_t m, int64_t k, const float* norm, float eps,
                       float* xn, const MatmulOutput* outputs, int n) override {
    std::vector<MatmulOutput> o(outputs, outputs + n);
    Do([=, this] { inner_->NormMatmulMulti(x, m, k, norm, eps, xn, o.data(), n); });
  }
  void Gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
            int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) override {
    Do([=, this] { inner_->Gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc); });
  }
  void RmsNorm(const float* x, const float* w, float eps, int64_t rows, int64_t dim, int64_t stride,
               float* out) override {
    Do([=, this] { inner_->RmsNorm(x, w, eps, rows, dim, stride, out); });
  }
  void Rope(float* x, int64_t rows, int64_t row_stride, int64_t heads, int64_t head_dim,
            const int32_t* positions, const float* inv_freq) override {
    Do([=, this] { inner_->Rope(x, rows, row_stride, heads, head_dim, positions, inv_freq); });
  }
  void RopeHeads(float* x, int64_t rows, int64_t row_stride, int64_t heads, int64_t head_stride,
                 int64_t rotary_dim, const int32_t* positions, const float* inv_freq) override {
    Do([=, this] {
      inner_->RopeHeads(x, rows, row_stride, heads, head_stride, rotary_dim, positions, inv_freq);
    });
  }
  void PrepareQk(const QkPrepArgs& a) override {
    std::vector<kernels::KvStoreArgs> stores(a.stores, a.stores + a.n_stores);
    const bool recorded = recording_;
    Do([=, this]() mutable {
      QkPrepArgs b = a;
      if (recorded) {
        // As the CUDA backend's recorded QK prep: each store's rows at the
        // positions the step holds in memory now.
        const int64_t kvd = a.k_heads * a.head_dim;
        for (kernels::KvStoreArgs& st : stores) {
          st.first_pos = a.positions[(st.k - a.k) / kvd];
        }
      }
      b.stores = stores.data();
      inner_->PrepareQk(b);
    });
  }
  void Attention(const kernels::AttentionArgs& args) override {
    std::vector<kernels::AttentionSequence> seqs(args.sequences, args.sequences + args.n_sequences);
    Do([=, this] {
      kernels::AttentionArgs a = args;
      a.sequences = seqs.data();
      inner_->Attention(a);
    });
  }
  void SiluMul(const float* gate, const float* up, int64_t rows, int64_t n, int64_t stride,
               float* out) override {
    Do([=, this] { inner_->SiluMul(gate, up, rows, n, stride, out); });
  }
  void SiluMulMatmul(float* gate, const float* up, int64_t m, int64_t stride, const WeightMatrix& w,
                     float* y, int64_t ldy, bool acc) override {
    Do([=, this] { inner_->SiluMulMatmul(gate, up, m, stride, w, y, ldy, acc); });
  }
  void Softmax(float* x, int64_t rows, int64_t n) override {
    Do([=, this] { inner_->Softmax(x, rows, n); });
  }
  void Add(const float* a, const float* b, int64_t n, float* out) override {
    Do([=, this] { inner_->Add(a, b, n, out); });
  }
  void Embedding(const WeightMatrix& table, const int32_t* ids, int64_t n, float* out) override {
    Do([=, this] { inner_->Embedding(table, ids, n, out); });
  }
  void EmbeddingShard(const WeightMatrix& table, int64_t first_row, const int32_t* ids, int64_t n,
                      float* out) override {
    Do([=, this] { inner_->EmbeddingShard(table, first_row, ids, n, out); });
  }
  void KvStore(const kernels::KvStoreArgs& args) override {
    if (recording_) replayable_ = false;  // first_pos is the step's
    Do([=, this] { inner_->KvStore(args); });
  }
  void KvStoreBatch(const kernels::KvStoreArgs* args, int64_t n) override {
    if (recording_) replayable_ = false;
    std::vector<kernels::KvStoreArgs> a(args, args + n);
    Do([=, this] { inner_->KvStoreBatch(a.data(), n); });
  }
  void AddRowVector(float* x, int64_t rows, int64_t n, int64_t stride, const float* v) override {
    Do([=, this] { inner_->AddRowVector(x, rows, n, stride, v); });
  }
  void Relu2(float* x, int64_t n) override {
    Do([=, this] { inner_->Relu2(x, n); });
  }
  void SoftCap(float* x, int64_t n, float cap) override {
    Do([=, this] { inner_->SoftCap(x, n, cap); });
  }
  void Fill(float* x, int64_t n, float value) override {
    Do([=, this] { inner_->Fill(x, n, value); });
  }
  void GatherRows(const float* x, int64_t ldx, const int64_t* rows, int64_t n_rows, int64_t n,
                  float* out) override {
    Do([=, this] { inner_->GatherRows(x, ldx, rows, n_rows, n, out); });
  }
  void ScatterAddRows(const float* x, int64_t ldx, const int64_t* rows, const float* weights,
                      int64_t n_rows, int64_t n, float* out, int64_t ldo) override {
    if (recording_) replayable_ = false;  // an expert's rows: the step's routing
    Do([=, this] { inner_->ScatterAddRows(x, ldx, rows, weights, n_rows, n, out, ldo); });
  }
  void MatmulGrouped(const GroupedProduct* products, int n) override {
    if (recording_) replayable_ = false;
    std::vector<GroupedProduct> p(products, products + n);
    Do([=, this] { inner_->MatmulGrouped(p.data(), n); });
  }
  void MatmulScatterAdd(const ScatterProduct* products, int n_products, int64_t n, float* out,
                        int64_t ldo, float* scratch) override {
    if (recording_) replayable_ = false;
    std::vector<ScatterProduct> p(products, products + n_products);
    Do([=, this] { inner_->MatmulScatterAdd(p.data(), n_products, n, out, ldo, scratch); });
  }
  Result<kernels::Buffer> PrepareExperts(const WeightMatrix* const* gate,
                                         const WeightMatrix* const* up,
                                         const WeightMatrix* const* down,
                                         int64_t n_experts) override {
    if (!options_.route_experts) return inner_->PrepareExperts(gate, up, down, n_experts);
    if (n_experts < 1) return InvalidArgumentError("PrepareExperts: no experts");
    // Each expert's gate, up and down matrix, in the backend's memory.
    OCTET_ASSIGN_OR_RETURN(kernels::Buffer table,
                           inner_->Allocate(n_experts * 3 * int64_t{sizeof(WeightMatrix*)}));
    const WeightMatrix** t = table.as<const WeightMatrix*>();
    for (int64_t e = 0; e < n_experts; ++e) {
      t[3 * e] = gate[e];
      t[3 * e + 1] = up[e];
      t[3 * e + 2] = down[e];
    }
    expert_tables_[table.data()] = n_experts;
    return table;
  }
  Status MoeDecode(const MoeDecodeArgs& args) override {
    if (!options_.route_experts) {
      if (Unrecordable()) return AbortedError("recording: MoeDecode");
      return inner_->MoeDecode(args);
    }
    const auto table = expert_tables_.find(args.experts);
    if (table == expert_tables_.end() || table->second != args.route.num_experts ||
        args.tokens < 1 || args.tokens > kMaxDecodeTokens || !args.x || !args.router_logits ||
        !args.out) {
      return InvalidArgumentError("MoeDecode: not a step of this backend's expert tables");
    }
    Do([=, this] { RouteAndRunExperts(args); });
    return Status::Ok();
  }
  void Scale(float* x, int64_t n, float s) override {
    Do([=, this] { inner_->Scale(x, n, s); });
  }
  int64_t Argmax(const float* x, int64_t n) override {
    return Unrecordable() ? 0 : inner_->Argmax(x, n);
  }
  void TopK(const float* x, int64_t n, int64_t k, int32_t* indices, float* values) override {
    if (Unrecordable()) {
      std::memset(indices, 0, static_cast<size_t>(k) * sizeof(int32_t));
      std::memset(values, 0, static_cast<size_t>(k) * sizeof(float));
      return;
    }
    inner_->TopK(x, n, k, indices, values);
  }

 private:
  static constexpr int64_t kMaxDecodeTokens = 8;  // the CUDA backend's grouped rows

  // MoeDecode when it runs: each token routed from its logits as now, then
  // MoeMlp's per-expert calls, in increasing expert order.
  void RouteAndRunExperts(const MoeDecodeArgs& a) {
    const kernels::MoeRouteSpec& r = a.route;
    const int64_t T = a.tokens, E = r.num_experts, k = r.experts_per_token, H = a.hidden,
                  F = a.width;
    std::vector<float> score(E), choice(E), group_score(std::max(r.n_group, 1));
    std::vector<int32_t> chosen(T * k);
    std::vector<float> weight(T * k);
    for (int64_t t = 0; t < T; ++t) {
      kernels::MoeRouteToken(r, a.router_logits + t * E, a.bias, score.data(), choice.data(),
                             group_score.data(), chosen.data() + t * k, weight.data() + t * k);
    }
    std::vector<int64_t> begin(E + 1, 0), rows(T * k);
    std::vector<float> weights(T * k);
    for (int32_t e : chosen) ++begin[e + 1];
    for (int64_t e = 0; e < E; ++e) begin[e + 1] += begin[e];
    std::vector<int64_t> fill(begin.begin(), begin.end() - 1);
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t i = 0; i < k; ++i) {
        const int64_t slot = fill[chosen[t * k + i]]++;
        rows[slot] = t;
        weights[slot] = weight[t * k + i];
      }
    }
    std::vector<float> in(T * H), gate(T * F), up(T * F), y(T * H);
    const auto* const* table = static_cast<const WeightMatrix* const*>(a.experts);
    for (int64_t e = 0; e < E; ++e) {
      const int64_t n = begin[e + 1] - begin[e];
      if (n == 0) continue;
      const float* x = a.x;
      int64_t ldx = a.ldx;
      if (n != T) {
        inner_->GatherRows(a.x, a.ldx, rows.data() + begin[e], n, H, in.data());
        x = in.data();
        ldx = H;
      }
      const MatmulOutput gate_up[2] = {{table[3 * e], gate.data(), F},
                                       {table[3 * e + 1], up.data(), F}};
      inner_->MatmulMulti(x, n, ldx, gate_up, 2);
      inner_->SiluMulMatmul(gate.data(), up.data(), n, F, *table[3 * e + 2], y.data(), H, false);
      inner_->ScatterAddRows(y.data(), H, rows.data() + begin[e], weights.data() + begin[e], n, H,
                             a.out, a.ldo);
    }
  }

  struct Recording {
    std::vector<std::function<void()>> tape;
    bool replayable = false;
    int64_t epoch = 0;  // of the scratch it names
  };
  template <class F>
  void Do(F&& op) {
    if (recording_) {
      tape_.emplace_back(std::forward<F>(op));
    } else {
      op();
    }
  }
  bool Unrecordable() {
    if (recording_) aborted_ = true;
    return recording_;
  }

  std::unique_ptr<KernelBackend> inner_;
  const Options options_;
  std::map<const void*, int64_t> expert_tables_;  // PrepareExperts' tables: experts in each
  bool recording_ = false;
  bool aborted_ = false;
  bool replayable_ = false;
  int abort_next_ = 0;
  int move_every_ = 0;
  int64_t runs_ = 0;   // RunRecording calls
  int64_t epoch_ = 0;  // bumped when the scratch "moves"
  std::vector<std::function<void()>> tape_;
  std::map<int64_t, Recording> recordings_;
  int64_t next_id_ = 0;
  RecordingCounts counts_;
};

}  // namespace octet::test
