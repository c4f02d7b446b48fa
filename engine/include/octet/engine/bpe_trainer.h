// BpeTrainer learns a byte-level BPE vocabulary from a text corpus and writes
// it as a Hugging Face tokenizer.json that octet::engine::Tokenizer (and the
// Python `tokenizers` library) loads: the model `octet train prepare` tokenizes
// its data with, and that the trained checkpoint ships.
//
//   BpeTrainer trainer({.vocab_size = 8192, .special_tokens = {"<|endoftext|>"}});
//   trainer.AddText(corpus_chunk);  // any number of times, any chunking at
//   ...                             // pre-token boundaries (e.g. whole documents)
//   OCTET_ASSIGN_OR_RETURN(std::string json, trainer.Train());
//
// Algorithm: the corpus is cut into pre-tokens with the split regex (GPT-4's by
// default) and counted; each distinct pre-token starts as its bytes (ids
// 0..255 = byte values). Then, until the vocabulary is full, the most frequent
// adjacent pair is merged (ties: the smallest (left id, right id)). Pair counts
// are updated incrementally around each merge, so a merge costs time in
// proportion to the words that contain the pair, not the corpus.
//
// The tokenizer.json written has: model BPE (vocab, merges as pairs,
// ignore_merges false), no normalizer, pre_tokenizer Sequence[Split(regex,
// Isolated), ByteLevel(use_regex false)], decoder ByteLevel, and the special
// tokens as added tokens (special, not normalized) with the last ids. Its
// Encode/Decode round-trips any text exactly.
//
// Not thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "octet/base/status.h"

namespace octet::engine {

// GPT-4's (cl100k) split pattern: contractions, letters with one leading
// non-letter, numbers in groups of up to 3, punctuation runs, newlines, spaces.
inline constexpr std::string_view kGpt4SplitPattern =
    R"('(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)";

struct BpeTrainerOptions {
  // Size of the whole id space: 256 byte tokens + merges + special tokens.
  int32_t vocab_size = 8192;
  // Added after the learned tokens, in this order; occurrences in the corpus
  // are cut out before counting (they are document boundaries, not text).
  std::vector<std::string> special_tokens;
  // Split regex (PCRE2 syntax with Unicode properties; \s is Unicode White_Space).
  std::string split_pattern = std::string(kGpt4SplitPattern);
  // A pair seen fewer times than this is never merged (training stops early,
  // leaving a smaller vocabulary).
  int64_t min_pair_count = 2;
  // Called now and then with (merges done, merges wanted); may be empty.
  std::function<void(int32_t done, int32_t total)> progress;
};

struct BpeTrainingStats {
  int64_t corpus_bytes = 0;
  int64_t pre_tokens = 0;      // pre-tokens counted (with repeats)
  int64_t distinct_words = 0;  // distinct pre-tokens
  int32_t merges = 0;          // merges learned
  int32_t vocab_size = 0;      // ids in the written tokenizer (incl. special tokens)
};

class BpeTrainer {
 public:
  explicit BpeTrainer(BpeTrainerOptions options);
  ~BpeTrainer();
  BpeTrainer(const BpeTrainer&) = delete;
  BpeTrainer& operator=(const BpeTrainer&) = delete;

  // Counts the pre-tokens of `text`. Invalid UTF-8 is counted as bytes (one
  // pre-token per invalid run). Errors only for a bad split pattern.
  Status AddText(std::string_view text);
  // Learns the merges and returns tokenizer.json. Errors: vocab_size too small
  // for 256 bytes + the special tokens, a bad split pattern, duplicate special
  // tokens. May be called once.
  Result<std::string> Train();
  const BpeTrainingStats& stats() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Trains on `corpus` in one call (same as AddText + Train).
Result<std::string> TrainBpeTokenizerJson(std::string_view corpus, const BpeTrainerOptions& options,
                                          BpeTrainingStats* stats = nullptr);

}  // namespace octet::engine
