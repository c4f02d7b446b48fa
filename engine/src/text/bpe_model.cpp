#include "text/bpe_model.h"

#include <algorithm>
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

const TokenId* BpeCache::Find(std::string_view word, size_t* count) const {
  auto it = entries_.find(word);
  if (it == entries_.end()) return nullptr;
  *count = it->second.second;
  return ids_.data() + it->second.first;
}

void BpeCache::Insert(std::string_view word, const TokenId* ids, size_t count) {
  // Bounded: a cache that grew past its budget starts over (text with many
  // distinct words, e.g. a long non-repeating stream, does not grow memory).
  if (entries_.size() >= 200'000 || ids_.size() + count > (size_t{8} << 20)) {
    entries_.clear();
    ids_.clear();
  }
  const auto offset = static_cast<uint32_t>(ids_.size());
  ids_.insert(ids_.end(), ids, ids + count);
  entries_.emplace(std::string(word), std::make_pair(offset, static_cast<uint32_t>(count)));
}

// ---- BpeModel ----

void BpeModel::AddToken(std::string bytes, TokenId id) {
  if (bytes.size() == 1) {
    const auto b = static_cast<unsigned char>(bytes[0]);
    if (byte_ids_[b] < 0) byte_ids_[b] = id;
  }
  bytes_to_id_.emplace(std::move(bytes), id);
}

std::optional<TokenId> BpeModel::FindBytes(std::string_view bytes) const {
  auto it = bytes_to_id_.find(bytes);
  if (it == bytes_to_id_.end()) return std::nullopt;
  return it->second;
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
  if (cacheable) {
    size_t count = 0;
    if (const TokenId* ids = cache->Find(word, &count)) {
      out->insert(out->end(), ids, ids + count);
      return;
    }
  }
  const size_t start = out->size();
  if (options_.ignore_merges) {
    if (auto id = FindBytes(word)) {
      out->push_back(*id);
      if (cacheable) cache->Insert(word, out->data() + start, 1);
      return;
    }
  }
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
