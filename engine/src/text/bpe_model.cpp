#include "text/bpe_model.h"

#include <algorithm>
#include <cstring>
#include <queue>

#include "text/byte_level.h"
#include "text/utf8.h"

namespace octet::engine::text {

// ---- MergeTable ----

void MergeTable::Reserve(size_t count) {
  size_t cap = 16;
  while (cap < count * 2) cap <<= 1;
  if (cap <= slots_.size()) return;
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(cap, Slot{});
  mask_ = cap - 1;
  size_ = 0;
  for (const Slot& s : old) {
    if (s.key != kEmpty) Insert(TokenId(s.key >> 32), TokenId(uint32_t(s.key)), s.merge);
  }
}

void MergeTable::Grow() { Reserve(slots_.empty() ? 8 : slots_.size()); }

void MergeTable::Insert(TokenId left, TokenId right, Merge merge) {
  if ((size_ + 1) * 2 > slots_.size()) Grow();
  const uint64_t key = Key(left, right);
  size_t slot = Hash(key) & mask_;
  while (slots_[slot].key != kEmpty && slots_[slot].key != key) slot = (slot + 1) & mask_;
  if (slots_[slot].key == kEmpty) ++size_;
  slots_[slot].key = key;
  slots_[slot].merge = merge;
}

// ---- BpeCache ----

namespace {
// The table starts small (it stays in cache for ordinary text) and doubles up
// to kMaxSlots; at most half the slots are used.
constexpr size_t kMinSlots = size_t{1} << 12;
constexpr size_t kMaxSlots = size_t{1} << 18;
}  // namespace

BpeCache::BpeCache() : slots_(kMinSlots) {}

uint64_t ShortStringHash(std::string_view s) {
  constexpr uint64_t kMul = 0x9E3779B97F4A7C15ull;
  uint64_t h = s.size() * kMul;
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    h = (h ^ w) * kMul;
    h ^= h >> 29;
  }
  if (i < s.size()) {
    uint64_t w = 0;
    for (size_t k = i; k < s.size(); ++k) w = (w << 8) | static_cast<unsigned char>(s[k]);
    h = (h ^ w) * kMul;
    h ^= h >> 29;
  }
  h ^= h >> 32;
  return h;
}

bool BpeCache::Find(std::string_view word, std::vector<TokenId>* out) const {
  const uint64_t h = ShortStringHash(word);
  const uint32_t tag = static_cast<uint32_t>(h >> 32) | 1;
  const size_t mask = slots_.size() - 1;
  for (size_t slot = h & mask;; slot = (slot + 1) & mask) {
    const Slot& s = slots_[slot];
    if (s.tag == 0) return false;
    if (s.tag != tag) continue;
    const char* e = arena_.data() + s.offset;
    uint16_t key_size, count;
    std::memcpy(&key_size, e, 2);
    std::memcpy(&count, e + 2, 2);
    if (key_size != word.size() || std::memcmp(e + 4, word.data(), word.size()) != 0) continue;
    const size_t at = out->size();
    out->resize(at + count);
    std::memcpy(out->data() + at, e + 4 + key_size, count * sizeof(TokenId));
    return true;
  }
}

void BpeCache::Clear() {
  slots_.assign(kMinSlots, Slot{});
  used_ = 0;
  arena_.clear();
}

void BpeCache::Insert(std::string_view word, const TokenId* ids, size_t count) {
  if (word.size() > 0xFFFF || count > 0xFFFF) return;
  if ((used_ + 1) * 2 > slots_.size()) {
    if (slots_.size() < kMaxSlots) {  // grow: re-place every entry by its stored key
      std::vector<Slot> old(slots_.size() * 2);
      old.swap(slots_);
      const size_t mask = slots_.size() - 1;
      for (const Slot& e : old) {
        if (e.tag == 0) continue;
        uint16_t key_size;
        std::memcpy(&key_size, arena_.data() + e.offset, 2);
        size_t slot =
            ShortStringHash(std::string_view(arena_.data() + e.offset + 4, key_size)) & mask;
        while (slots_[slot].tag != 0) slot = (slot + 1) & mask;
        slots_[slot] = e;
      }
    } else {
      Clear();
    }
  }
  if (arena_.size() > (size_t{8} << 20)) Clear();  // bounded memory per scratch (per thread)
  const uint64_t h = ShortStringHash(word);
  const size_t mask = slots_.size() - 1;
  size_t slot = h & mask;
  while (slots_[slot].tag != 0) slot = (slot + 1) & mask;
  slots_[slot] = {static_cast<uint32_t>(h >> 32) | 1, static_cast<uint32_t>(arena_.size())};
  const auto key_size = static_cast<uint16_t>(word.size());
  const auto n = static_cast<uint16_t>(count);
  arena_.append(reinterpret_cast<const char*>(&key_size), 2);
  arena_.append(reinterpret_cast<const char*>(&n), 2);
  arena_.append(word);
  arena_.append(reinterpret_cast<const char*>(ids), count * sizeof(TokenId));
  ++used_;
}

// ---- StringIdMap ----

void StringIdMap::Reserve(size_t count) {
  size_t cap = 16;
  while (cap < count * 2) cap <<= 1;
  if (cap > slots_.size()) Rehash(cap);
}

std::string_view StringIdMap::KeyAt(uint32_t offset) const {
  uint32_t size;
  std::memcpy(&size, arena_.data() + offset, 4);
  return std::string_view(arena_.data() + offset + 4, size);
}

void StringIdMap::Rehash(size_t count) {
  std::vector<Slot> old(count);
  old.swap(slots_);
  const size_t mask = slots_.size() - 1;
  for (const Slot& e : old) {
    if (e.tag == 0) continue;
    size_t slot = ShortStringHash(KeyAt(e.offset)) & mask;
    while (slots_[slot].tag != 0) slot = (slot + 1) & mask;
    slots_[slot] = e;
  }
}

bool StringIdMap::Insert(std::string_view key, TokenId id) {
  if ((used_ + 1) * 2 > slots_.size()) Rehash(slots_.empty() ? 16 : slots_.size() * 2);
  const uint64_t h = ShortStringHash(key);
  const uint32_t tag = static_cast<uint32_t>(h >> 32) | 1;
  const size_t mask = slots_.size() - 1;
  size_t slot = h & mask;
  for (; slots_[slot].tag != 0; slot = (slot + 1) & mask) {
    if (slots_[slot].tag == tag && KeyAt(slots_[slot].offset) == key) return false;
  }
  slots_[slot] = {tag, static_cast<uint32_t>(arena_.size())};
  const auto size = static_cast<uint32_t>(key.size());
  arena_.append(reinterpret_cast<const char*>(&size), 4);
  arena_.append(key);
  arena_.append(reinterpret_cast<const char*>(&id), 4);
  ++used_;
  return true;
}

std::optional<TokenId> StringIdMap::Find(std::string_view key) const {
  if (slots_.empty()) return std::nullopt;
  const uint64_t h = ShortStringHash(key);
  const uint32_t tag = static_cast<uint32_t>(h >> 32) | 1;
  const size_t mask = slots_.size() - 1;
  for (size_t slot = h & mask; slots_[slot].tag != 0; slot = (slot + 1) & mask) {
    const Slot& s = slots_[slot];
    if (s.tag != tag) continue;
    const std::string_view k = KeyAt(s.offset);
    if (k == key) {
      TokenId id;
      std::memcpy(&id, k.data() + k.size(), 4);
      return id;
    }
  }
  return std::nullopt;
}

// ---- BpeModel ----

void BpeModel::AddToken(std::string_view bytes, TokenId id) {
  if (bytes.size() == 1) {
    const auto b = static_cast<unsigned char>(bytes[0]);
    if (byte_ids_[b] < 0) byte_ids_[b] = id;
  }
  bytes_to_id_.Insert(bytes, id);
}

std::optional<TokenId> BpeModel::FindBytes(std::string_view bytes) const {
  return bytes_to_id_.Find(bytes);
}

void BpeModel::InitialSymbols(std::string_view word, std::vector<TokenId>* symbols) const {
  symbols->clear();
  bool unk_pending = false;
  for (unsigned char b : word) {
    const TokenId id = byte_ids_[b];
    if (id >= 0) {
      if (unk_pending) symbols->push_back(*options_.unk_id);
      unk_pending = false;
      symbols->push_back(id);
      continue;
    }
    // No token for this byte. Hugging Face looks up the byte-level character's
    // own UTF-8 bytes as <0xXX> tokens, then falls back to unk, else drops it.
    if (options_.byte_fallback) {
      std::string ch;
      AppendUtf8(&ch, ByteToCodePoint(b));
      bool all = true;
      for (unsigned char c : ch) all = all && fallback_ids_[c] >= 0;
      if (all) {
        for (unsigned char c : ch) symbols->push_back(fallback_ids_[c]);
        continue;
      }
    }
    if (options_.unk_id) {
      if (unk_pending && !options_.fuse_unk) symbols->push_back(*options_.unk_id);
      unk_pending = true;
    }
  }
  if (unk_pending) symbols->push_back(*options_.unk_id);
}

void BpeModel::MergeScan(std::vector<TokenId>* symbols) const {
  std::vector<TokenId>& s = *symbols;
  if (s.size() < 2) return;
  // rank[i]: rank of the pair (s[i], s[i+1]); INT32_MAX when it has no merge.
  constexpr int32_t kNone = INT32_MAX;
  int32_t rank_buf[kScanMergeMaxBytes];
  std::vector<int32_t> rank_heap;
  int32_t* rank = rank_buf;
  if (s.size() > kScanMergeMaxBytes) {
    rank_heap.resize(s.size());
    rank = rank_heap.data();
  }
  auto pair_rank = [&](size_t i) {
    const MergeTable::Merge* m = merges_.Find(s[i], s[i + 1]);
    return m ? m->rank : kNone;
  };
  size_t n = s.size();
  for (size_t i = 0; i + 1 < n; ++i) rank[i] = pair_rank(i);
  while (true) {
    int32_t best = kNone;
    size_t at = 0;
    for (size_t i = 0; i + 1 < n; ++i) {
      if (rank[i] < best) {
        best = rank[i];
        at = i;
      }
    }
    if (best == kNone) break;
    s[at] = merges_.Find(s[at], s[at + 1])->merged;
    // Close the gap left by s[at + 1].
    for (size_t i = at + 1; i + 1 < n; ++i) {
      s[i] = s[i + 1];
      rank[i] = rank[i + 1];
    }
    --n;
    if (at > 0) rank[at - 1] = pair_rank(at - 1);
    if (at + 1 < n) rank[at] = pair_rank(at);
  }
  s.resize(n);
}

void BpeModel::MergeQueue(std::vector<TokenId>* symbols) const {
  std::vector<TokenId>& s = *symbols;
  const int n = static_cast<int>(s.size());
  if (n < 2) return;
  std::vector<int> prev(n), next(n);
  for (int i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  std::vector<bool> alive(n, true);
  struct Candidate {
    int32_t rank;
    int pos;  // original index of the left symbol
    TokenId merged;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto push = [&](int left) {
    const int right = next[left];
    if (right < 0) return;
    if (const MergeTable::Merge* m = merges_.Find(s[left], s[right])) {
      queue.push({m->rank, left, m->merged});
    }
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    const int left = top.pos;
    if (!alive[left]) continue;
    const int right = next[left];
    if (right < 0) continue;
    const MergeTable::Merge* m = merges_.Find(s[left], s[right]);
    if (!m || m->merged != top.merged || m->rank != top.rank) continue;  // stale entry
    s[left] = top.merged;
    alive[right] = false;
    next[left] = next[right];
    if (next[right] >= 0) prev[next[right]] = left;
    if (prev[left] >= 0) push(prev[left]);
    push(left);
  }
  size_t w = 0;
  for (int i = 0; i >= 0; i = next[i]) s[w++] = s[i];
  s.resize(w);
}

void BpeModel::MergeWord(std::string_view word, bool scan, std::vector<TokenId>* out) const {
  std::vector<TokenId> symbols;
  InitialSymbols(word, &symbols);
  if (scan) {
    MergeScan(&symbols);
  } else {
    MergeQueue(&symbols);
  }
  out->insert(out->end(), symbols.begin(), symbols.end());
}

void BpeModel::EncodeWord(std::string_view word, BpeCache* cache, std::vector<TokenId>* out) const {
  if (word.size() == 1) {  // the commonest case needs neither cache nor merges
    const TokenId id = byte_ids_[static_cast<unsigned char>(word[0])];
    if (id >= 0) {
      out->push_back(id);
      return;
    }
  }
  const bool cacheable = cache && word.size() <= kCacheMaxBytes;
  if (cacheable && cache->Find(word, out)) return;
  const size_t start = out->size();
  if (options_.ignore_merges) {
    if (auto id = FindBytes(word)) {
      out->push_back(*id);
      if (cacheable) cache->Insert(word, out->data() + start, 1);
      return;
    }
  }
  // Per-thread working buffer: EncodeWord runs on many threads at once.
  thread_local std::vector<TokenId> symbols;
  InitialSymbols(word, &symbols);
  if (word.size() <= kScanMergeMaxBytes) {
    MergeScan(&symbols);
  } else {
    MergeQueue(&symbols);
  }
  out->insert(out->end(), symbols.begin(), symbols.end());
  if (cacheable) cache->Insert(word, out->data() + start, out->size() - start);
}

}  // namespace octet::engine::text
