// Keys and values of past positions, per layer, for a fixed number of sequence
// slots, float32. Slot s of layer l holds K and V as [capacity, kv_heads,
// head_dim] (position-major), the layout KernelBackend::Attention reads.
//
// A serving scheduler gives each live request a slot, calls Clear(slot) when
// the request ends, and reuses it. (A paged cache can replace this behind the
// same Forward contract later.)
#pragma once

#include <cstdint>
#include <vector>

namespace octet::engine {

class KvCache {
 public:
  KvCache() = default;
  KvCache(int64_t layers, int64_t kv_heads, int64_t head_dim, int slots, int64_t capacity);

  int num_slots() const { return slots_; }
  int64_t capacity() const { return capacity_; }
  int64_t layers() const { return layers_; }
  int64_t kv_heads() const { return kv_heads_; }
  int64_t head_dim() const { return head_dim_; }
  int64_t bytes() const { return static_cast<int64_t>(data_.size() * sizeof(float)); }

  // Positions [0, length) of a slot hold valid keys/values.
  int64_t length(int slot) const { return lengths_[slot]; }
  void set_length(int slot, int64_t n) { lengths_[slot] = n; }
  void Clear(int slot) { lengths_[slot] = 0; }

  float* k(int64_t layer, int slot) { return data_.data() + Offset(layer, slot, 0); }
  float* v(int64_t layer, int slot) { return data_.data() + Offset(layer, slot, 1); }

 private:
  int64_t Offset(int64_t layer, int slot, int which) const {
    const int64_t per = capacity_ * kv_heads_ * head_dim_;
    return ((layer * slots_ + slot) * 2 + which) * per;
  }
  int64_t layers_ = 0, kv_heads_ = 0, head_dim_ = 0, capacity_ = 0;
  int slots_ = 0;
  std::vector<float> data_;
  std::vector<int64_t> lengths_;
};

}  // namespace octet::engine
