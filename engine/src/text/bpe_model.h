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
  static uint64_t Key(TokenId a, TokenId b) {
    return (uint64_t(uint32_t(a)) << 32) | uint32_t(b);
  }
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
using BytesToId = std::unordered_map<std::string, TokenId, StringHash, std::equal_to<>>;

// Memo of pre-token -> ids, owned by one thread at a time.
class BpeCache {
 public:
  // nullptr when absent; otherwise fills `*count` and returns the ids.
  const TokenId* Find(std::string_view word, size_t* count) const;
  void Insert(std::string_view word, const TokenId* ids, size_t count);

 private:
  std::unordered_map<std::string, std::pair<uint32_t, uint32_t>, StringHash, std::equal_to<>>
      entries_;  // word -> (offset, count) in ids_
  std::vector<TokenId> ids_;
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
  void AddToken(std::string bytes, TokenId id);
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
