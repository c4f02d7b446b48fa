// Model: placing the loaded weights on the backend, their byte counts and
// summary, KV caches. Loading is model_load.cpp; the forward pass
// model_forward.cpp; multi-token prediction model_mtp.cpp.
#include "octet/engine/model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <set>

#include "layer_linears.h"
#include "octet/base/deadline.h"
#include "octet/base/file_util.h"
#include "octet/base/huge_page_arena.h"
#include "octet/base/log.h"
#include "octet/base/mem_info.h"
#include "octet/kernels/backends.h"

namespace octet::engine {

using kernels::WeightFormat;
using kernels::WeightMatrix;

const float* ForwardOutput::Last(size_t chunk) const {
  const int64_t end = chunk + 1 < row_begin.size() ? row_begin[chunk + 1]
                                                   : static_cast<int64_t>(logits.size()) / vocab;
  return Row(end - 1);
}

Status Model::PlaceOnBackend() {
  kernels::KernelBackend& be = *backend_;
  const std::string who = "backend " + std::string(be.name());
  // Every op the forward pass issues, and the weight formats of its matmuls.
  using kernels::Op;
  std::vector<Op> ops = {Op::kRmsNorm, Op::kRope, Op::kAttention,    Op::kKvStore,    Op::kSiluMul,
                         Op::kRelu2,   Op::kAdd,  Op::kAddRowVector, Op::kGatherRows, Op::kSoftCap};
  const ModelConfig& c = config_;
  if (c.moe.num_experts > 0) {
    ops.push_back(Op::kScatterAddRows);
    ops.push_back(Op::kFill);
  }
  if (c.embedding_scale != 1.0f || c.residual_scale != 1.0f || c.logit_scale != 1.0f) {
    ops.push_back(Op::kScale);
  }
  for (Op op : ops) {
    if (!be.supports(op)) {
      return UnimplementedError(who + " does not run the '" + std::string(kernels::OpName(op)) +
                                "' op the forward pass needs");
    }
  }
  auto check = [&](Op op, const WeightMatrix& w, const std::string& what) -> Status {
    if (w.rows == 0 || be.supports(op, w.format)) return Status::Ok();
    return UnimplementedError(who + " cannot run '" + std::string(kernels::OpName(op)) + "' on " +
                              std::string(kernels::WeightFormatName(w.format)) + " weights (" +
                              what + ")");
  };
  OCTET_RETURN_IF_ERROR(check(Op::kEmbedding, embed_, "model.embed_tokens"));
  OCTET_RETURN_IF_ERROR(check(Op::kMatmul, lm_head_.weight, lm_head_.name));
  for (const MtpLayer& M : mtp_) {
    OCTET_RETURN_IF_ERROR(check(Op::kMatmul, M.eh_proj.weight, M.eh_proj.name));
    for (const Linear* l : LayerLinears(M.layer)) {
      OCTET_RETURN_IF_ERROR(check(Op::kMatmul, l->weight, l->name));
    }
  }
  for (const LayerWeights& L : layers_) {
    for (const Linear* l : LayerLinears(L)) {
      OCTET_RETURN_IF_ERROR(check(Op::kMatmul, l->weight, l->name));
    }
  }

  // Weights and parameter vectors into the backend's memory (a host backend
  // reads them where they are).
  const bool host = be.memory_kind() != kernels::MemoryKind::kDevice;
  auto place_vector = [&](ParamVector& p) -> Status {
    if (p.host.empty()) return Status::Ok();
    if (host) {
      p.device = p.host.data();
      return Status::Ok();
    }
    const int64_t bytes = p.size() * static_cast<int64_t>(sizeof(float));
    OCTET_ASSIGN_OR_RETURN(kernels::Buffer b, be.Allocate(bytes));
    be.CopyToDevice(b.data(), p.host.data(), bytes);
    p.device = b.as<const float>();
    placed_.push_back(std::move(b));
    return Status::Ok();
  };
  auto place_weight = [&](WeightMatrix& w) -> Status {
    if (w.rows == 0) return Status::Ok();
    OCTET_ASSIGN_OR_RETURN(w, be.PrepareWeight(w, &placed_));
    return Status::Ok();
  };
  const bool tied = lm_head_.weight.data == embed_.data && lm_head_.weight.rows == embed_.rows;
  OCTET_RETURN_IF_ERROR(place_weight(embed_));
  if (tied) {
    lm_head_.weight = embed_;
  } else {
    OCTET_RETURN_IF_ERROR(place_weight(lm_head_.weight));
  }
  OCTET_RETURN_IF_ERROR(place_vector(lm_head_.bias));
  for (LayerWeights& L : layers_) {
    for (ParamVector* p : {&L.input_norm, &L.post_norm, &L.q_norm, &L.k_norm}) {
      OCTET_RETURN_IF_ERROR(place_vector(*p));
    }
    for (Linear* l : LayerLinears(L)) {
      OCTET_RETURN_IF_ERROR(place_weight(l->weight));
      OCTET_RETURN_IF_ERROR(place_vector(l->bias));
    }
    OCTET_RETURN_IF_ERROR(PrepareDeviceExperts(L.moe));
  }
  for (ParamVector* p : {&final_norm_, &embedding_norm_, &inv_freq_}) {
    OCTET_RETURN_IF_ERROR(place_vector(*p));
  }
  for (MtpLayer& M : mtp_) {
    for (ParamVector* p : {&M.enorm, &M.hnorm, &M.head_norm, &M.layer.input_norm,
                           &M.layer.post_norm, &M.layer.q_norm, &M.layer.k_norm}) {
      OCTET_RETURN_IF_ERROR(place_vector(*p));
    }
    for (Linear* l : LayerLinears(M.layer)) {
      OCTET_RETURN_IF_ERROR(place_weight(l->weight));
      OCTET_RETURN_IF_ERROR(place_vector(l->bias));
    }
    OCTET_RETURN_IF_ERROR(place_weight(M.eh_proj.weight));
    // u = eh_proj · [e ; h]: the two column halves, applied one after the other.
    const int64_t H = config_.hidden_size;
    M.eh_embed = M.eh_proj.weight.ColSlice(0, H);
    M.eh_hidden = M.eh_proj.weight.ColSlice(H, H);
  }
  return be.Synchronize();
}

// A device backend that routes experts itself gets the layer's experts
// (already in its memory) as one table, and the bias; others decline and
// the layer routes on the host.
Status Model::PrepareDeviceExperts(MoeWeights& moe) {
  kernels::KernelBackend& be = *backend_;
  if (moe.experts.empty() || be.memory_kind() != kernels::MemoryKind::kDevice) {
    return Status::Ok();
  }
  std::vector<const WeightMatrix*> gate, up, down;
  for (const GatedMlp& g : moe.experts) {
    gate.push_back(&g.gate.weight);
    up.push_back(&g.up.weight);
    down.push_back(&g.down.weight);
  }
  auto table = be.PrepareExperts(gate.data(), up.data(), down.data(),
                                 static_cast<int64_t>(moe.experts.size()));
  if (!table.ok()) {
    return table.status().code() == StatusCode::kUnimplemented ? Status::Ok() : table.status();
  }
  moe.device_experts = table->data();
  placed_.push_back(std::move(*table));
  if (!moe.score_bias.empty()) {
    const int64_t bytes = static_cast<int64_t>(moe.score_bias.size() * sizeof(float));
    OCTET_ASSIGN_OR_RETURN(kernels::Buffer b, be.Allocate(bytes));
    be.CopyToDevice(b.data(), moe.score_bias.data(), bytes);
    moe.device_score_bias = b.as<const float>();
    placed_.push_back(std::move(b));
  }
  return Status::Ok();
}

bool Model::routes_experts_on_device() const {
  for (const LayerWeights& L : layers_) {
    if (L.moe.device_experts) return true;
  }
  return false;
}

int64_t Model::WeightBytesPerToken() const {
  auto linear = [](const Linear& l) { return l.weight.BytesRead() + l.bias.size() * 4; };
  auto mlp = [&](const GatedMlp& g) { return linear(g.gate) + linear(g.up) + linear(g.down); };
  int64_t bytes = lm_head_.weight.BytesRead() + final_norm_.size() * 4;
  for (const LayerWeights& L : layers_) {
    for (const Linear* l : {&L.q, &L.k, &L.v, &L.o, &L.gate, &L.up, &L.down}) bytes += linear(*l);
    bytes += (L.input_norm.size() + L.post_norm.size() + L.q_norm.size() + L.k_norm.size()) * 4;
    if (!L.is_moe()) continue;
    int64_t experts = 0;
    for (const GatedMlp& g : L.moe.experts) experts += mlp(g);
    const int64_t n = static_cast<int64_t>(L.moe.experts.size());
    bytes += linear(L.moe.router) + static_cast<int64_t>(L.moe.score_bias.size()) * 4 +
             mlp(L.moe.shared) + experts / n * config_.moe.experts_per_token;
  }
  return bytes;
}

std::string Model::WeightFormatSummary() const {
  std::set<std::string> formats;
  auto add = [&](const WeightMatrix& w) {
    if (w.rows == 0) return;  // absent (nanochat's up_proj)
    formats.insert(std::string(kernels::WeightFormatName(w.format)));
  };
  add(embed_);
  add(lm_head_.weight);
  for (const LayerWeights& L : layers_) {
    for (const Linear* l : LayerLinears(L)) add(l->weight);
  }
  std::string s;
  if (formats.count("NVFP4")) s = "NVFP4";
  for (const auto& f : formats) {
    if (f == "NVFP4") continue;
    s += (s.empty() ? "" : "+") + f;
  }
  return s;
}

Result<KvCache> Model::NewKvCache(int slots, int64_t capacity, kernels::KvDtype dtype) const {
  if (slots < 1 || capacity < 1) {
    return InvalidArgumentError("a KV cache needs at least one slot and one position (asked for " +
                                std::to_string(slots) + " x " + std::to_string(capacity) + ")");
  }
  // Bounds that keep the byte count far from overflow (the config's sizes are bounded too).
  if (slots > (1 << 16) || capacity > (int64_t{1} << 30)) {
    return InvalidArgumentError("a KV cache of " + std::to_string(slots) + " slots x " +
                                std::to_string(capacity) +
                                " positions is beyond what can be held (at most 65536 x 2^30)");
  }
  const int64_t bytes = KvCache::BytesFor(config_.num_layers, local_kv_heads_, config_.head_dim,
                                          slots, capacity, dtype);
  auto storage = backend_->Allocate(bytes);
  if (!storage.ok()) {
    return storage.status().WithContext("KV cache of " + std::to_string(slots) + " slots x " +
                                        std::to_string(capacity) + " positions");
  }
  return KvCache(config_.num_layers, local_kv_heads_, config_.head_dim, slots, capacity, dtype,
                 std::move(*storage));
}

}  // namespace octet::engine
