// UTF-8 helpers for the tokenizer: strict validation (no overlongs, no
// surrogates, nothing above U+10FFFF) and lossy decoding with Rust's
// String::from_utf8_lossy rule (one U+FFFD per maximal invalid subpart, the
// Unicode "substitution of maximal subparts" practice).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace octet::engine::text {

// Length of the valid UTF-8 character at the start of `s` (1..4), or 0 when
// the bytes there are not a complete valid character. `*cp` gets the code point.
int DecodeUtf8Char(std::string_view s, uint32_t* cp);

// Length of the maximal invalid subpart at the start of `s` (>= 1) — assumes
// DecodeUtf8Char(s) == 0. `*truncated` is set when those bytes are a valid
// prefix of a character that `s` ends too early to complete.
size_t InvalidUtf8Prefix(std::string_view s, bool* truncated);

// Length of the longest prefix of `s` that is valid UTF-8.
size_t ValidUtf8Length(std::string_view s);
inline bool IsValidUtf8(std::string_view s) { return ValidUtf8Length(s) == s.size(); }

void AppendUtf8(std::string* out, uint32_t cp);

// Appends `bytes` to `out` with each maximal invalid subpart replaced by
// U+FFFD. With `hold_incomplete_tail`, a valid but incomplete character at the
// very end is not replaced: its start offset is returned and it is left out.
// Otherwise returns bytes.size().
size_t AppendUtf8Lossy(std::string_view bytes, bool hold_incomplete_tail, std::string* out);

// Splits `text` into valid UTF-8 runs (passed to `valid`) and maximal invalid
// byte runs (passed to `invalid`), in order.
template <typename Valid, typename Invalid>
void ForEachUtf8Run(std::string_view text, Valid&& valid, Invalid&& invalid) {
  size_t i = 0;
  while (i < text.size()) {
    const size_t v = ValidUtf8Length(text.substr(i));
    if (v > 0) valid(text.substr(i, v));
    i += v;
    if (i >= text.size()) break;
    const size_t bad_start = i;
    while (i < text.size()) {
      uint32_t cp;
      if (DecodeUtf8Char(text.substr(i), &cp) > 0) break;
      bool truncated;
      i += InvalidUtf8Prefix(text.substr(i), &truncated);
    }
    invalid(text.substr(bad_start, i - bad_start));
  }
}

}  // namespace octet::engine::text
