// Keys and values of past positions, per layer, for a fixed number of sequence
// slots, as float32 or IEEE half (KvDtype::kF16: half the memory and half the
// bytes decode attention reads; each value is rounded once when stored). Slot s
// of layer l holds K and V as [kv_heads, capacity, head_dim] (head-major: the
// keys of one head, which one attention task reads, are one contiguous run;
// see AttentionSequence::position_stride).
//
// The cache lives in memory of the backend that computes with it (a Buffer
// from KernelBackend::Allocate: host memory for the CPU backends, device
// memory for a GPU); Model::NewKvCache makes one, and the backend's KvStore
// writes it.
//
// A serving scheduler gives each live request a slot, calls Clear(slot) when
// the request ends, and reuses it. (A paged cache can replace this behind the
// same Forward contract later.)
#pragma once

#include <cstdint>
#include <vector>

#include "octet/base/status.h"
#include "octet/kernels/backend.h"

namespace octet::engine {

class KvCache {
 public:
  KvCache() = default;
  // `storage` holds at least BytesFor(...) bytes of the computing backend's memory.
  KvCache(int64_t layers, int64_t kv_heads, int64_t head_dim, int slots, int64_t capacity,
          kernels::KvDtype dtype, kernels::Buffer storage);
  static int64_t BytesFor(int64_t layers, int64_t kv_heads, int64_t head_dim, int slots,
                          int64_t capacity, kernels::KvDtype dtype);

  int num_slots() const { return slots_; }
  int64_t capacity() const { return capacity_; }
  int64_t layers() const { return layers_; }
  int64_t kv_heads() const { return kv_heads_; }
  int64_t head_dim() const { return head_dim_; }
  kernels::KvDtype dtype() const { return dtype_; }
  int64_t bytes() const { return data_.bytes(); }

  // Positions [0, length) of a slot hold valid keys/values.
  int64_t length(int slot) const { return lengths_[slot]; }
  void set_length(int slot, int64_t n) { lengths_[slot] = n; }
  void Clear(int slot) { lengths_[slot] = 0; }

  // Copies positions [0, n) of every layer's keys and values from slot `src`
  // to slot `dst` (and sets dst's length to n): n > 1 sequences of one request
  // share the prompt's prefill this way. `backend` is the one whose memory the
  // cache is in (a device cache is copied through host memory).
  void CopyPositions(int src, int dst, int64_t n, kernels::KernelBackend& backend);
  // Whether CopyPositions(src, dst, n) names slots and positions this cache
  // has; InvalidArgument saying which otherwise.
  Status CheckCopy(int src, int dst, int64_t n) const;

  // Arguments for the backend's KvStore that write positions [first_pos,
  // first_pos + n) of a slot's layer from float rows of kv_heads * head_dim
  // keys and values (`row_stride` floats apart). The caller keeps first_pos +
  // n <= capacity().
  kernels::KvStoreArgs StoreArgs(int64_t layer, int slot, int64_t first_pos, int64_t n,
                                 const float* k, const float* v, int64_t row_stride);

  // A slot's layer cache (elements of dtype(), in the backend's memory) and
  // its strides in elements, for AttentionSequence.
  const void* k(int64_t layer, int slot) const { return Base() + Offset(layer, slot, 0); }
  const void* v(int64_t layer, int slot) const { return Base() + Offset(layer, slot, 1); }
  int64_t position_stride() const { return head_dim_; }
  int64_t head_stride() const { return capacity_ * head_dim_; }

 private:
  uint8_t* Base() const { return data_.as<uint8_t>(); }
  // Byte offset of a slot's layer K (which = 0) or V (1).
  int64_t Offset(int64_t layer, int slot, int which) const {
    const int64_t per = capacity_ * kv_heads_ * head_dim_ * kernels::KvDtypeBytes(dtype_);
    return ((layer * slots_ + slot) * 2 + which) * per;
  }
  int64_t layers_ = 0, kv_heads_ = 0, head_dim_ = 0, capacity_ = 0;
  int slots_ = 0;
  kernels::KvDtype dtype_ = kernels::KvDtype::kF32;
  kernels::Buffer data_;
  std::vector<int64_t> lengths_;
};

}  // namespace octet::engine
