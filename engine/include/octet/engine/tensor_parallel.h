// The tensor-parallel layout of the engine's decoder models (Megatron / vLLM):
// which slice of every weight rank r of a TP group of `tp` ranks keeps.
//
//   q/k/v, gate/up   column-parallel: output rows split evenly (heads stay whole);
//                    every expert of a MoE block, and its shared expert, too
//                    when kv heads < tp the kv heads are replicated and rank r
//                    uses kv head r / (tp / n_kv)
//   o_proj, down     row-parallel: input columns split the same way; the partial
//                    outputs are summed by one all-reduce each (two per layer; a
//                    MoE block's routed and shared outputs are summed locally
//                    first, so it too takes one)
//   MoE router       whole on every rank: every rank routes every token alike
//   embed, lm_head   vocab-parallel: rank r holds vocabulary rows
//                    [r * ceil(V/tp), min(V, (r+1) * ceil(V/tp))); the embedding
//                    output is all-reduced (other ranks contribute zeros) and the
//                    logits are all-gathered
//
// NVFP4 packed weights and their per-16 block scales are sliced along the same
// dimensions (a column slice must be whole 16-column blocks); the scalar
// weight_scale_2 is replicated. Biases follow their rows (Qwen2 q/k/v); a
// row-parallel bias is added once, after the sum.
//
//   OCTET_RETURN_IF_ERROR(CheckTpDegree(TpModelShape::From(config), 4));
//   LoadOptions o;  o.shard = MakeShardFunction(TpModelShape::From(config), 4, rank);
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "octet/base/status.h"
#include "octet/engine/model.h"
#include "octet/engine/model_config.h"

namespace octet::engine {

// The dimensions the TP layout depends on.
struct TpModelShape {
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t vocab_size = 0;
  // Linear weights stored NVFP4: row-parallel column slices must be multiples of 16.
  bool nvfp4 = false;
  // Mixture of experts (0: none): the routed and the shared experts' widths.
  int64_t expert_intermediate_size = 0;
  int64_t shared_intermediate_size = 0;

  static TpModelShape From(const ModelConfig& config);
};

// OK when `tp` ranks can split the model; otherwise InvalidArgument naming
// every reason ("32 query heads are not divisible by 3; ...").
Status CheckTpDegree(const TpModelShape& shape, int tp);
// The degrees 1..max_tp that CheckTpDegree accepts.
std::vector<int> ValidTpDegrees(const TpModelShape& shape, int max_tp);

// Vocabulary rows rank `rank` holds under vocab parallelism. Every rank's
// range has `padded` = ceil(V / tp) rows except the last ones (fewer, possibly
// none when tp does not divide V evenly).
struct VocabRange {
  int64_t begin = 0;
  int64_t count = 0;
  int64_t padded = 0;  // ceil(V / tp): the block size of the logits all-gather
};
VocabRange VocabShard(int64_t vocab_size, int tp, int rank);

// The LoadOptions::shard callback of rank `rank` (checked with CheckTpDegree
// first). Unknown modules are kept whole.
std::function<WeightSlice(const std::string& module, LinearRole role, int64_t rows, int64_t cols)>
MakeShardFunction(const TpModelShape& shape, int tp, int rank);

}  // namespace octet::engine
