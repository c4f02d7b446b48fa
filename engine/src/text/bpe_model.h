// The BPE model of a byte-level tokenizer, working on raw bytes: a pre-token's
// UTF-8 bytes start as one symbol each (the vocabulary's single-byte tokens)
// and adjacent symbols are merged lowest merge rank first, leftmost first
// among equal ranks — the order Hugging Face's BPE (a priority queue keyed by
// (rank, position)) produces. Short words use a linear scan over the adjacent
// pairs, long ones the priority queue; both give the same result.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "octet/engine/tokenizer.h"

namespace octet::engine::text {

// Open-addressing map from a (left id, right id) pair to its merge.
class MergeTable {
 public:
  struct Merge {
    int32_t rank;
    TokenId merged;
  };
  void Reserve(size_t count);
  // A later merge of the same pair replaces the earlier one (as in HF).
  void Insert(TokenId left, TokenId right, Merge merge);
  const Merge* Find(TokenId left, TokenId right) const {
    const uint64_t key = Key(left, right);
    size_t slot = Hash(key) & mask_;
    while (true) {
      const Slot& s = slots_[slot];
      if (s.key == key) return &s.merge;
      if (s.key == kEmpty) return nullptr;
      slot = (slot + 1) & mask_;
    }
  }
  size_t size() const { return size_; }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  struct Slot {
    uint64_t key = kEmpty;
    Merge merge{};
  };
  static uint64_t Key(TokenId a, TokenId b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }
  static size_t Hash(uint64_t key) {
    key ^= key >> 29;
    key *= 0xBF58476D1CE4E5B9ull;
    key ^= key >> 32;
    return static_cast<size_t>(key);
  }
  void Grow();
  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

// A short multiply-xorshift hash over 8-byte words (keys here are short).
uint64_t ShortStringHash(std::string_view s);

// Flat open-addressing map from byte strings to ids, for the vocabularies
// (100k-300k entries, looked up once or more per merge while loading). Keys
// live in one arena: [u32 size][bytes][i32 id].
class StringIdMap {
 public:
  void Reserve(size_t count);
  // Keeps the first id of a key given twice; returns false then.
  bool Insert(std::string_view key, TokenId id);
  std::optional<TokenId> Find(std::string_view key) const;
  size_t size() const { return used_; }

 private:
  struct Slot {
    uint32_t tag = 0;  // 0: empty
    uint32_t offset = 0;
  };
  void Rehash(size_t slots);
  std::string_view KeyAt(uint32_t offset) const;
  std::vector<Slot> slots_;
  size_t used_ = 0;
  std::string arena_;
};
using BytesToId = StringIdMap;

// Memo of pre-token -> ids, owned by one thread at a time: a flat
// open-addressing table whose keys and values live in two arenas. When it
// fills up it starts over, so memory stays bounded on text with many distinct
// words.
class BpeCache {
 public:
  BpeCache();
  // Appends the cached ids of `word` to `out` and returns true, or returns false.
  bool Find(std::string_view word, std::vector<TokenId>* out) const;
  // `word` is at most BpeModel::kCacheMaxBytes long.
  void Insert(std::string_view word, const TokenId* ids, size_t count);

 private:
  // An entry in `arena_` is [u16 key size][u16 id count][key bytes][ids], so a
  // hit touches one slot and one arena line or two.
  struct Slot {
    uint32_t tag = 0;     // high hash bits; 0 marks an empty slot
    uint32_t offset = 0;  // of the entry in arena_
  };
  void Clear();
  std::vector<Slot> slots_;
  size_t used_ = 0;
  std::string arena_;
};

class BpeModel {
 public:
  struct Options {
    bool ignore_merges = false;  // a pre-token that is a whole vocabulary entry is emitted as is
    bool byte_fallback = false;  // bytes without a token become <0xXX> tokens
    std::optional<TokenId> unk_id;
    bool fuse_unk = false;
  };
  // Words of at most this many bytes use the linear scan.
  static constexpr size_t kScanMergeMaxBytes = 96;
  // Words longer than this are not cached.
  static constexpr size_t kCacheMaxBytes = 256;

  void SetOptions(const Options& options) { options_ = options; }
  // `bytes` is the byte string of a vocabulary token.
  void AddToken(std::string_view bytes, TokenId id);
  void ReserveTokens(size_t count) { bytes_to_id_.Reserve(count); }
  MergeTable& merges() { return merges_; }
  const MergeTable& merges() const { return merges_; }
  const BytesToId& bytes_to_id() const { return bytes_to_id_; }
  std::optional<TokenId> FindBytes(std::string_view bytes) const;
  // For byte_fallback: the ids of <0x00>..<0xFF> (-1 when missing).
  void SetByteFallbackToken(uint8_t byte, TokenId id) { fallback_ids_[byte] = id; }

  // Appends the ids of one pre-token (raw bytes, non-empty).
  void EncodeWord(std::string_view word, BpeCache* cache, std::vector<TokenId>* out) const;
  // Without the cache or the ignore_merges shortcut; `scan` picks the merge
  // loop (tests check both agree).
  void MergeWord(std::string_view word, bool scan, std::vector<TokenId>* out) const;

 private:
  void InitialSymbols(std::string_view word, std::vector<TokenId>* symbols) const;
  void MergeScan(std::vector<TokenId>* symbols) const;
  void MergeQueue(std::vector<TokenId>* symbols) const;

  Options options_;
  BytesToId bytes_to_id_;
  TokenId byte_ids_[256];
  TokenId fallback_ids_[256];
  MergeTable merges_;

 public:
  BpeModel() {
    for (int i = 0; i < 256; ++i) byte_ids_[i] = fallback_ids_[i] = -1;
  }
};

}  // namespace octet::engine::text
