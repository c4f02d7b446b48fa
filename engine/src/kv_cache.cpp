#include "octet/engine/kv_cache.h"

#include <cstring>
#include <utility>
#include <vector>

namespace octet::engine {

KvCache::KvCache(int64_t layers, int64_t kv_heads, int64_t head_dim, int slots, int64_t capacity,
                 kernels::KvDtype dtype, kernels::Buffer storage)
    : layers_(layers),
      kv_heads_(kv_heads),
      head_dim_(head_dim),
      capacity_(capacity),
      slots_(slots),
      dtype_(dtype),
      data_(std::move(storage)),
      lengths_(slots, 0) {}

int64_t KvCache::BytesFor(int64_t layers, int64_t kv_heads, int64_t head_dim, int slots,
                          int64_t capacity, kernels::KvDtype dtype) {
  return layers * slots * 2 * capacity * kv_heads * head_dim * kernels::KvDtypeBytes(dtype);
}

kernels::KvStoreArgs KvCache::StoreArgs(int64_t layer, int slot, int64_t first_pos, int64_t n,
                                        const float* k, const float* v, int64_t row_stride) {
  kernels::KvStoreArgs a;
  a.k = k;
  a.v = v;
  a.row_stride = row_stride;
  a.n = n;
  a.n_kv_heads = kv_heads_;
  a.head_dim = head_dim_;
  a.k_cache = Base() + Offset(layer, slot, 0);
  a.v_cache = Base() + Offset(layer, slot, 1);
  a.dtype = dtype_;
  a.position_stride = position_stride();
  a.head_stride = head_stride();
  a.first_pos = first_pos;
  return a;
}

Status KvCache::CheckCopy(int src, int dst, int64_t n) const {
  const int slots = num_slots();
  if (src < 0 || src >= slots || dst < 0 || dst >= slots || n < 0 || n > capacity_) {
    return InvalidArgumentError("cannot copy " + std::to_string(n) + " positions from KV slot " +
                                std::to_string(src) + " to " + std::to_string(dst) + " (" +
                                std::to_string(slots) + " slots of " + std::to_string(capacity_) +
                                ")");
  }
  return Status::Ok();
}

void KvCache::CopyPositions(int src, int dst, int64_t n, kernels::KernelBackend& backend) {
  if (src == dst || n <= 0) return;
  const int64_t run = n * head_dim_ * kernels::KvDtypeBytes(dtype_);  // one head's positions
  const int64_t head_bytes = capacity_ * head_dim_ * kernels::KvDtypeBytes(dtype_);
  const bool host = backend.memory_kind() == kernels::MemoryKind::kHost;
  std::vector<uint8_t> staging(host ? 0 : static_cast<size_t>(run));
  for (int64_t layer = 0; layer < layers_; ++layer) {
    for (int which = 0; which < 2; ++which) {
      for (int64_t h = 0; h < kv_heads_; ++h) {
        uint8_t* from = Base() + Offset(layer, src, which) + h * head_bytes;
        uint8_t* to = Base() + Offset(layer, dst, which) + h * head_bytes;
        if (host) {
          std::memcpy(to, from, static_cast<size_t>(run));
        } else {
          backend.CopyToHost(staging.data(), from, run);
          backend.CopyToDevice(to, staging.data(), run);
        }
      }
    }
  }
  lengths_[dst] = n;
}

}  // namespace octet::engine
