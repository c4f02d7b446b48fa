// Memory for large read-mostly buffers that live as long as their owner (a
// model's NVFP4 tile copy), carved from anonymous mappings advised for
// transparent huge pages (MADV_HUGEPAGE): a kernel streaming hundreds of MB
// through them takes far fewer TLB misses than through 4 KiB pages. Where the
// kernel gives no huge pages the memory is ordinary. Not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace octet {

class HugePageArena {
 public:
  // Mappings of at least `chunk_bytes` (rounded up to 2 MiB).
  explicit HugePageArena(size_t chunk_bytes = size_t{64} << 20);
  ~HugePageArena();
  HugePageArena(const HugePageArena&) = delete;
  HugePageArena& operator=(const HugePageArena&) = delete;

  // n bytes, 64-byte aligned and zero-filled, valid until the arena goes;
  // null when the system refuses the memory.
  uint8_t* Allocate(size_t n);
  // Bytes mapped so far (allocations plus the unused tails of chunks).
  size_t bytes_mapped() const;

 private:
  struct Chunk {
    uint8_t* base;
    size_t size;
    size_t used;
  };
  size_t chunk_bytes_;
  std::vector<Chunk> chunks_;
};

}  // namespace octet
