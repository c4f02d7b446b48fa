// Memory owned by a kernel backend.
//
// Everything a backend's ops read or write — weights it copied in, the KV
// cache, activations, scratch, the index arrays of a step — lives in memory of
// that backend's kind: host memory for the CPU backends, device memory for a
// GPU backend (on GB10 the GPU and CPU share DRAM, but device allocations are
// still the GPU's). A caller that is not the backend never dereferences a
// pointer into a Buffer of another kind; it moves bytes with the backend's
// CopyToDevice / CopyToHost (KernelBackend, backend.h).
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>
#include <utility>

namespace octet::kernels {

enum class MemoryKind : uint8_t {
  kHost,        // ordinary host memory: the caller may read and write it
  kDevice,      // the accelerator's memory: only the backend's ops and copies touch it
  kHostPinned,  // host memory the accelerator reads in place (page-locked)
};

std::string_view MemoryKindName(MemoryKind kind);  // "host", "device", "host-pinned"

// A block of backend memory, released by the backend's deleter when the
// Buffer goes. Move-only; an empty Buffer holds nothing.
class Buffer {
 public:
  Buffer() = default;
  Buffer(void* data, int64_t bytes, MemoryKind kind, std::function<void(void*, int64_t)> release)
      : data_(data), bytes_(bytes), kind_(kind), release_(std::move(release)) {}
  ~Buffer() { Reset(); }
  Buffer(Buffer&& o) noexcept { *this = std::move(o); }
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      Reset();
      data_ = std::exchange(o.data_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
      kind_ = o.kind_;
      release_ = std::move(o.release_);
      o.release_ = nullptr;
    }
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  int64_t bytes() const { return bytes_; }
  MemoryKind kind() const { return kind_; }
  bool empty() const { return data_ == nullptr; }

  void Reset() {
    if (data_ && release_) release_(data_, bytes_);
    data_ = nullptr;
    bytes_ = 0;
    release_ = nullptr;
  }

 private:
  void* data_ = nullptr;
  int64_t bytes_ = 0;
  MemoryKind kind_ = MemoryKind::kHost;
  std::function<void(void*, int64_t)> release_;
};

}  // namespace octet::kernels
