#include "octet/base/huge_page_arena.h"

#include <sys/mman.h>

namespace octet {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kAlign = 64;

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

}  // namespace

HugePageArena::HugePageArena(size_t chunk_bytes) : chunk_bytes_(RoundUp(chunk_bytes, kHugePage)) {}

HugePageArena::~HugePageArena() {
  for (const Chunk& c : chunks_) ::munmap(c.base, c.size);
}

uint8_t* HugePageArena::Allocate(size_t n) {
  n = RoundUp(n == 0 ? 1 : n, kAlign);
  if (chunks_.empty() || chunks_.back().size - chunks_.back().used < n) {
    const size_t size = RoundUp(n > chunk_bytes_ ? n : chunk_bytes_, kHugePage);
    // Map 2 MiB more and trim, so the chunk starts on a huge-page boundary.
    void* raw = ::mmap(nullptr, size + kHugePage, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return nullptr;
    const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
    const uintptr_t aligned = RoundUp(start, kHugePage);
    if (aligned > start) ::munmap(raw, aligned - start);
    const uintptr_t end = start + size + kHugePage;
    if (end > aligned + size)
      ::munmap(reinterpret_cast<void*>(aligned + size), end - aligned - size);
    uint8_t* base = reinterpret_cast<uint8_t*>(aligned);
    ::madvise(base, size, MADV_HUGEPAGE);  // advice only: refused, the pages are ordinary
    chunks_.push_back({base, size, 0});
  }
  Chunk& c = chunks_.back();
  uint8_t* p = c.base + c.used;
  c.used += n;
  return p;  // fresh anonymous memory reads as zero
}

size_t HugePageArena::bytes_mapped() const {
  size_t total = 0;
  for (const Chunk& c : chunks_) total += c.size;
  return total;
}

}  // namespace octet
