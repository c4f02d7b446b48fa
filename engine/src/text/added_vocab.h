// Finds added tokens (tokenizer.json `added_tokens`) in text the way Hugging
// Face's AddedVocabulary does: an Aho-Corasick-style leftmost-longest scan over
// all tokens of one pass (the raw-text pass for `normalized: false` tokens, the
// normalized-text pass for the others). A match that its options reject
// (`single_word` touching a word character, a special token under
// split_special_tokens) is skipped whole and the scan goes on after it;
// `lstrip`/`rstrip` widen a match over adjacent Unicode White_Space.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "octet/engine/tokenizer.h"

namespace octet::engine::text {

struct AddedMatch {
  size_t begin;
  size_t end;  // exclusive, after lstrip/rstrip widening
  TokenId id;
};

class AddedTokenMatcher {
 public:
  // `tokens` are the tokens of this pass; their contents must be non-empty.
  void Build(const std::vector<AddedToken>& tokens);
  bool empty() const { return tokens_.empty(); }

  // Appends the matches in `text`, in order, non-overlapping.
  void FindAll(std::string_view text, bool skip_special, std::vector<AddedMatch>* out) const;

 private:
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> next;  // byte -> child node
    int32_t token = -1;                             // index into tokens_ when a token ends here
  };
  int32_t Child(int32_t node, uint8_t byte) const;
  std::vector<Node> nodes_;
  std::vector<AddedToken> tokens_;
  bool first_byte_[256] = {};
};

// Unicode White_Space (what Rust's `\s` and char::is_whitespace test).
bool IsUnicodeWhiteSpace(uint32_t cp);
// Rust regex `\w`: Alphabetic, marks, decimal digits, connector punctuation,
// Join_Control.
bool IsUnicodeWordChar(uint32_t cp);

}  // namespace octet::engine::text
