// Internal state of octet::engine::Tokenizer, shared by the loader
// (tokenizer_json.cpp) and the encoder/decoder (tokenizer.cpp).
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "octet/base/thread_annotations.h"
#include "octet/engine/chat_template.h"
#include "octet/engine/tokenizer.h"
#include "text/added_vocab.h"
#include "text/bpe_model.h"
#include "text/normalizer.h"
#include "text/split_regex.h"

namespace octet::engine::text {

// Hugging Face SplitDelimiterBehavior.
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// One pre-tokenizer step. ByteLevel is always the last step (the loader checks):
// the pipeline works on raw bytes, so the byte-to-character mapping itself is
// implicit and only its add_prefix_space / use_regex parts act.
struct PreTokenizeStep {
  enum class Kind { kSplit, kByteLevel } kind = Kind::kSplit;
  std::unique_ptr<SplitRegex> regex;  // Split with a Regex pattern; ByteLevel with use_regex
  std::string literal;                // Split with a String pattern
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
  bool add_prefix_space = false;  // ByteLevel
};

// One part of a piece cut by a Split step: a match or the gap before it.
struct SplitPart {
  size_t begin, end;
  bool is_match;
};

// Per-call working memory, pooled so that concurrent Encode calls never share
// it (and the BPE cache stays warm from one call to the next).
struct EncodeScratch {
  RegexScratch regex;
  BpeCache cache;
  std::vector<MatchSpan> spans;
  std::vector<SplitPart> parts, merged_parts;
  std::vector<std::string_view> pieces, next_pieces;
  std::vector<AddedMatch> added;
  std::string normalized;
  std::string normalized_tmp;
  std::vector<std::string> owned;  // pieces rewritten with a prefix space
};

// GPT-2's split pattern, used by ByteLevel with use_regex: true.
inline constexpr char kGpt2SplitPattern[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

}  // namespace octet::engine::text

namespace octet::engine {

struct Tokenizer::Impl {
  text::BpeModel model;
  std::vector<text::UnicodeNormalizer> normalizers;  // applied in order
  std::vector<text::PreTokenizeStep> pre_tokenizer;
  std::vector<TokenId> post_prefix;  // post-processor template around the sequence
  std::vector<TokenId> post_suffix;
  std::vector<std::string> post_description;

  std::vector<AddedToken> added;
  text::AddedTokenMatcher raw_matcher;         // normalized: false
  text::AddedTokenMatcher normalized_matcher;  // normalized: true
  std::unordered_map<std::string, TokenId> added_by_content;

  // Indexed by id; empty string and flags 0 for ids that are not tokens.
  std::vector<std::string> id_string;  // tokenizer.json form
  std::vector<std::string> id_bytes;   // what decoding gives
  enum : uint8_t { kExists = 1, kSpecial = 2, kAdded = 4 };
  std::vector<uint8_t> id_flags;
  text::StringIdMap vocab_by_string;  // tokenizer.json vocab strings

  TokenizerConfig config;
  ChatTemplate chat_template;  // recognised from config.chat_template at load
  std::string description;

  // Scratch pool (see tokenizer.h: thread-safety).
  mutable Mutex pool_mu;
  mutable std::vector<std::unique_ptr<text::EncodeScratch>> pool GUARDED_BY(pool_mu);
};

}  // namespace octet::engine

namespace octet::engine::text {

// Builds a tokenizer from tokenizer.json text. Errors are prefixed with
// `source` and name the JSON path of the offending value.
Result<std::unique_ptr<Tokenizer::Impl>> ParseTokenizerJson(std::string_view json,
                                                            std::string_view source);
// Reads tokenizer_config.json text into `config`.
Status ParseTokenizerConfig(std::string_view json, std::string_view source,
                            TokenizerConfig* config);
// Reads generation_config.json's eos_token_id (a number or a list).
Status ParseGenerationConfig(std::string_view json, std::string_view source,
                             TokenizerConfig* config);

}  // namespace octet::engine::text
