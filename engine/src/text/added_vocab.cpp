#include "text/added_vocab.h"

#include <unicode/uchar.h>

#include "text/utf8.h"

namespace octet::engine::text {
namespace {

// The code point that ends at `end` in valid UTF-8 `s` (end > 0), and its start.
uint32_t LastCodePoint(std::string_view s, size_t end, size_t* start) {
  size_t b = end - 1;
  while (b > 0 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
  uint32_t cp = 0xFFFD;
  if (DecodeUtf8Char(s.substr(b, end - b), &cp) == 0) cp = 0xFFFD;
  *start = b;
  return cp;
}

}  // namespace

bool IsUnicodeWhiteSpace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

bool IsUnicodeWordChar(uint32_t cp) {
  const UChar32 c = static_cast<UChar32>(cp);
  if (u_hasBinaryProperty(c, UCHAR_ALPHABETIC) || u_hasBinaryProperty(c, UCHAR_JOIN_CONTROL)) {
    return true;
  }
  const int8_t type = u_charType(c);
  return type == U_NON_SPACING_MARK || type == U_ENCLOSING_MARK ||
         type == U_COMBINING_SPACING_MARK || type == U_DECIMAL_DIGIT_NUMBER ||
         type == U_CONNECTOR_PUNCTUATION;
}

void AddedTokenMatcher::Build(const std::vector<AddedToken>& tokens) {
  tokens_ = tokens;
  nodes_.assign(1, Node{});
  for (bool& f : first_byte_) f = false;
  for (size_t t = 0; t < tokens_.size(); ++t) {
    const std::string& content = tokens_[t].content;
    if (content.empty()) continue;
    first_byte_[static_cast<unsigned char>(content[0])] = true;
    int32_t node = 0;
    for (unsigned char b : content) {
      int32_t child = Child(node, b);
      if (child < 0) {
        child = static_cast<int32_t>(nodes_.size());
        nodes_[node].next.emplace_back(b, child);
        nodes_.push_back(Node{});
      }
      node = child;
    }
    // A duplicate content keeps the first token (the same content cannot have two ids).
    if (nodes_[node].token < 0) nodes_[node].token = static_cast<int32_t>(t);
  }
}

int32_t AddedTokenMatcher::Child(int32_t node, uint8_t byte) const {
  for (const auto& [b, child] : nodes_[node].next) {
    if (b == byte) return child;
  }
  return -1;
}

void AddedTokenMatcher::FindAll(std::string_view text, bool skip_special,
                                std::vector<AddedMatch>* out) const {
  if (tokens_.empty()) return;
  const size_t n = text.size();
  size_t prev_end = 0;  // end of the last accepted match (HF's start_offset)
  size_t pos = 0;       // where the scan resumes
  while (pos < n) {
    // Leftmost: the first position where some token starts.
    int32_t token = -1;
    size_t match_end = 0;
    size_t start = pos;
    for (; start < n; ++start) {
      if (!first_byte_[static_cast<unsigned char>(text[start])]) continue;
      int32_t node = 0;
      for (size_t i = start; i < n; ++i) {
        node = Child(node, static_cast<unsigned char>(text[i]));
        if (node < 0) break;
        if (nodes_[node].token >= 0) {  // longest: keep going past shorter matches
          token = nodes_[node].token;
          match_end = i + 1;
        }
      }
      if (token >= 0) break;
    }
    if (token < 0) return;
    pos = match_end;  // the scan never revisits a skipped match
    const AddedToken& tk = tokens_[token];
    if (skip_special && tk.special) continue;
    size_t begin = start;
    size_t end = match_end;
    if (tk.single_word) {
      size_t cp_start;
      const bool word_before =
          begin > 0 && IsUnicodeWordChar(LastCodePoint(text, begin, &cp_start));
      uint32_t next_cp = 0;
      const bool word_after =
          end < n && DecodeUtf8Char(text.substr(end), &next_cp) > 0 && IsUnicodeWordChar(next_cp);
      if (word_before || word_after) continue;
    }
    if (tk.lstrip) {
      size_t b = begin;
      while (b > prev_end) {
        size_t cp_start;
        if (!IsUnicodeWhiteSpace(LastCodePoint(text, b, &cp_start))) break;
        b = cp_start;
      }
      begin = b < prev_end ? prev_end : b;
    }
    if (tk.rstrip) {
      while (end < n) {
        uint32_t cp;
        const int len = DecodeUtf8Char(text.substr(end), &cp);
        if (len == 0 || !IsUnicodeWhiteSpace(cp)) break;
        end += static_cast<size_t>(len);
      }
      pos = end;
    }
    out->push_back({begin, end, tk.id});
    prev_end = end;
  }
}

}  // namespace octet::engine::text
