#include "octet/engine/model_runner.h"

#include "octet/base/deadline.h"

namespace octet::engine {

Status LocalRunner::ResetCache(int slots, int64_t capacity, kernels::KvDtype dtype) {
  if (slots < 1 || capacity < 1) {
    return InvalidArgumentError("a KV cache needs at least one slot and one position (asked for " +
                                std::to_string(slots) + " x " + std::to_string(capacity) + ")");
  }
  cache_ = KvCache();  // free the old one first
  OCTET_ASSIGN_OR_RETURN(cache_, model_.NewKvCache(slots, capacity, dtype));
  // The MTP draft head's cache (when loaded) follows.
  return model_.ResetMtpCache(slots, capacity + kMtpChainPositions, dtype);
}

Status LocalRunner::Step(const std::vector<SequenceChunk>& batch, ForwardOutput* out) {
  const int64_t t0 = NowNs();
  Status s = model_.Forward(batch, cache_, out);
  stats_.steps += 1;
  stats_.step_ns += NowNs() - t0;
  return s;
}

Status LocalRunner::CopySlot(int src, int dst, int64_t positions) {
  OCTET_RETURN_IF_ERROR(cache_.CheckCopy(src, dst, positions));
  cache_.CopyPositions(src, dst, positions, model_.backend());
  return model_.CopyMtpSlot(src, dst, positions);  // the MTP head's cache, when loaded
}

}  // namespace octet::engine
