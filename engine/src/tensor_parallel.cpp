#include "octet/engine/tensor_parallel.h"

#include <algorithm>

namespace octet::engine {
namespace {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

TpModelShape TpModelShape::From(const ModelConfig& c) {
  TpModelShape s;
  s.num_heads = c.num_heads;
  s.num_kv_heads = c.num_kv_heads;
  s.head_dim = c.head_dim;
  s.hidden_size = c.hidden_size;
  s.intermediate_size = c.intermediate_size;
  s.vocab_size = c.vocab_size;
  s.nvfp4 = c.quant.nvfp4;
  if (c.moe.num_experts > 0) {
    s.expert_intermediate_size = c.moe.expert_intermediate_size;
    s.shared_intermediate_size = c.moe.shared_intermediate_size;
  }
  return s;
}

Status CheckTpDegree(const TpModelShape& s, int tp) {
  if (tp < 1) {
    return InvalidArgumentError("a TP degree must be at least 1 (got " + std::to_string(tp) + ")");
  }
  if (tp == 1) return Status::Ok();
  std::vector<std::string> why;
  const std::string t = std::to_string(tp);
  if (s.num_heads % tp != 0) {
    why.push_back(std::to_string(s.num_heads) + " query heads are not divisible by " + t);
  }
  if (s.num_kv_heads >= tp) {
    if (s.num_kv_heads % tp != 0) {
      why.push_back(std::to_string(s.num_kv_heads) + " kv heads are not divisible by " + t);
    }
  } else if (s.num_kv_heads > 0 && tp % s.num_kv_heads != 0) {
    why.push_back(t + " ranks cannot share " + std::to_string(s.num_kv_heads) +
                  " kv heads evenly (fewer kv heads than ranks needs TP a multiple of them)");
  }
  if (s.intermediate_size % tp != 0) {
    why.push_back("intermediate size " + std::to_string(s.intermediate_size) +
                  " is not divisible by " + t);
  }
  for (auto [what, width] : {std::pair<const char*, int64_t>{"expert", s.expert_intermediate_size},
                             {"shared expert", s.shared_intermediate_size}}) {
    if (width > 0 && width % tp != 0) {
      why.push_back(std::string(what) + " intermediate size " + std::to_string(width) +
                    " is not divisible by " + t);
    }
  }
  if (s.nvfp4 && why.empty()) {
    const int64_t o_cols = s.num_heads / tp * s.head_dim;
    const int64_t down_cols = s.intermediate_size / tp;
    if (s.expert_intermediate_size > 0 && (s.expert_intermediate_size / tp) % 16 != 0) {
      why.push_back("NVFP4 expert down_proj slices of " +
                    std::to_string(s.expert_intermediate_size / tp) +
                    " columns are not whole 16-column scale blocks");
    }
    if (o_cols % 16 != 0) {
      why.push_back("NVFP4 o_proj slices of " + std::to_string(o_cols) +
                    " columns are not whole 16-column scale blocks");
    }
    if (down_cols % 16 != 0) {
      why.push_back("NVFP4 down_proj slices of " + std::to_string(down_cols) +
                    " columns are not whole 16-column scale blocks");
    }
  }
  if (VocabShard(s.vocab_size, tp, tp - 1).count <= 0) {
    why.push_back("a vocabulary of " + std::to_string(s.vocab_size) + " rows cannot give each of " +
                  t + " ranks a share");
  }
  if (why.empty()) return Status::Ok();
  std::string msg = "TP " + t + " does not fit the model: ";
  for (size_t i = 0; i < why.size(); ++i) msg += (i ? "; " : "") + why[i];
  return InvalidArgumentError(msg);
}

std::vector<int> ValidTpDegrees(const TpModelShape& shape, int max_tp) {
  std::vector<int> out;
  for (int t = 1; t <= max_tp; ++t) {
    if (CheckTpDegree(shape, t).ok()) out.push_back(t);
  }
  return out;
}

VocabRange VocabShard(int64_t vocab_size, int tp, int rank) {
  VocabRange r;
  r.padded = (vocab_size + tp - 1) / tp;
  r.begin = std::min<int64_t>(vocab_size, r.padded * rank);
  r.count = std::min<int64_t>(vocab_size, r.padded * (rank + 1)) - r.begin;
  return r;
}

std::function<WeightSlice(const std::string&, LinearRole, int64_t, int64_t)> MakeShardFunction(
    const TpModelShape& shape, int tp, int rank) {
  return [shape, tp, rank](const std::string& module, LinearRole role, int64_t rows,
                           int64_t cols) {
    WeightSlice s;
    if (tp <= 1) return s;
    switch (role) {
      case LinearRole::kColumnParallel:
        if ((EndsWith(module, ".k_proj") || EndsWith(module, ".v_proj")) &&
            shape.num_kv_heads < tp) {
          // Replicated kv heads: rank r serves query heads whose kv head is r / (tp / n_kv).
          const int64_t head = rank / (tp / shape.num_kv_heads);
          s.row_begin = head * shape.head_dim;
          s.row_count = shape.head_dim;
        } else {
          s.row_begin = rows / tp * rank;
          s.row_count = rows / tp;
        }
        break;
      case LinearRole::kRowParallel:
        s.col_begin = cols / tp * rank;
        s.col_count = cols / tp;
        break;
      case LinearRole::kVocabParallel: {
        const VocabRange v = VocabShard(rows, tp, rank);
        s.row_begin = v.begin;
        s.row_count = v.count;
        break;
      }
      case LinearRole::kReplicated:
        break;
    }
    return s;
  };
}

}  // namespace octet::engine
