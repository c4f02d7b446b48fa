// Model's working memory for a forward step (Model::Scratch: activations,
// index arrays, MoE routing and MTP buffers, in the backend's memory), the
// helper that grows a buffer, and the decode profile (Model::DecodeProfile).
// Internal to the engine: model_forward.cpp (the forward pass, MoE) and
// model_mtp.cpp (multi-token prediction) use it.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "octet/base/deadline.h"
#include "octet/base/log.h"
#include "octet/base/status.h"
#include "octet/engine/model.h"
#include "octet/kernels/backend.h"

namespace octet::engine {

// Per-token routing work space (host memory).
struct RouteScratch {
  std::vector<float> score, choice;  // [experts]
  std::vector<float> group_score;    // [n_group]
};

// Activations and the step's index arrays, in the backend's memory, grown to
// the largest step seen.
struct Model::Scratch {
  kernels::Buffer x, xn, q, k, v, attn, proj, gate, up, rows, logits;
  kernels::Buffer ids, positions, row_index;
  std::vector<int32_t> host_ids, host_positions;
  std::vector<int64_t> host_rows;
  // Mixture of experts: router logits [T, experts]; one expert's input and
  // output rows [T, hidden]; the step's routing, grouped by expert (token
  // rows and their weights, `expert_begin` the first entry of each expert).
  kernels::Buffer router_logits, expert_in, expert_out, route_rows, route_weights;
  // The grouped expert path: gate and up rows of every route [T * k, width].
  kernels::Buffer expert_gate, expert_up;
  // Multi-token prediction: every row's final (normed) hidden state of the
  // last Forward [T, hidden], and the MTP input halves [rows, hidden].
  kernels::Buffer hidden, mtp_e, mtp_h;
  std::vector<float> host_router;
  std::vector<int64_t> host_route_rows, expert_begin;
  std::vector<float> host_route_weights;
  RouteScratch route;
  // Decode steps the backend recorded (Model::RecordedStep): what decides
  // each one's ops and arguments, and the backend's recording of it.
  struct Recording {
    std::vector<uintptr_t> key;
    int64_t id = -1;
    int64_t last_used = 0;
  };
  std::vector<Recording> recordings;
  std::vector<uintptr_t> step_key;
  int64_t recording_clock = 0;
};

// `b` holds at least `bytes` (contents not kept when it grows).
inline Status Ensure(kernels::KernelBackend& be, kernels::Buffer& b, int64_t bytes) {
  if (b.bytes() >= bytes && !b.empty()) return Status::Ok();
  b.Reset();
  OCTET_ASSIGN_OR_RETURN(b, be.Allocate(bytes));
  return Status::Ok();
}

// Where a decode forward's time goes, for tuning: with OCTET_PROFILE_DECODE=1
// in the environment, forwards of at most 8 tokens time their op groups (wall
// clock between marks; a device backend, whose ops only queue work, is
// synchronized at each mark, which adds its round trip to every group) and
// every 64 forwards of one token count log the mean ms per forward. Off (one
// branch per mark) otherwise.
class Model::DecodeProfile {
 public:
  enum Op { kEmbed, kNorms, kQkv, kAttention, kO, kAllReduce, kGateUp, kDown, kLmHead, kOps };

  // `device`: the backend to synchronize at each mark (null: its ops are
  // synchronous).
  DecodeProfile(int64_t tokens, kernels::KernelBackend* device) : tokens_(tokens), device_(device) {
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
  bool on() const { return on_; }
  // The time since the previous mark goes to `op`.
  void Mark(Op op) {
    if (!on_) return;
    if (device_) (void)device_->Synchronize();  // an error surfaces at the step's own check
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
  kernels::KernelBackend* device_;
  bool on_ = false;
  int64_t last_ = 0;
  int64_t ns_[kOps] = {};
};

}  // namespace octet::engine
