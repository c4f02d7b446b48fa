// SplitRegex runs a tokenizer.json split pattern with PCRE2 (UTF + UCP, JIT
// when the platform has it) so that it matches what Hugging Face's Oniguruma
// matches:
//
// - `\s` / `\S` are rewritten to the Unicode White_Space property spelled out
//   (U+0009..U+000D, U+0020, U+0085, U+00A0, U+1680, U+2000..U+200A, U+2028,
//   U+2029, U+202F, U+205F, U+3000), which is Oniguruma's `\s`. PCRE2's own `\s`
//   under UCP is \p{Z} + \h + \v, which adds U+180E (MONGOLIAN VOWEL SEPARATOR,
//   White_Space until Unicode 6.3, a format character since). Spelling the set
//   out also keeps the result independent of the PCRE2 build's Unicode
//   version; a test checks the set against ICU's White_Space for every code
//   point. U+FEFF (BOM) is not White_Space in either.
// - `(?i:...)` folds case over Unicode under UCP, as Oniguruma does ("'ſ" with
//   U+017F LONG S matches "'s").
// - `\p{L}`, `\p{N}` are general categories in both.
//
// Thread-safety: a compiled SplitRegex is immutable; each thread passes its own
// RegexScratch.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "octet/base/status.h"

namespace octet::engine::text {

// The White_Space set as the inside of a PCRE2 character class.
extern const char kWhiteSpaceClassItems[];

// Rewrites every `\s` and `\S` of `pattern` (inside or outside a character
// class) to the explicit White_Space set. Other syntax is copied unchanged.
std::string RewriteWhiteSpaceEscapes(std::string_view pattern);

struct MatchSpan {
  size_t begin;
  size_t end;  // exclusive; == begin for an empty match
};

// Per-thread match state (PCRE2 match data and JIT stack).
class RegexScratch {
 public:
  RegexScratch();
  ~RegexScratch();
  RegexScratch(const RegexScratch&) = delete;
  RegexScratch& operator=(const RegexScratch&) = delete;
  struct Impl;
  Impl* impl() { return impl_.get(); }

 private:
  std::unique_ptr<Impl> impl_;
};

class SplitRegex {
 public:
  // Compiles `pattern` (Oniguruma/PCRE syntax). The error names the offset and
  // PCRE2's reason.
  static Result<std::unique_ptr<SplitRegex>> Compile(std::string_view pattern);
  ~SplitRegex();

  // Appends every match of the pattern in `subject` (valid UTF-8), left to
  // right, non-overlapping. An empty match is reported and the search goes on
  // one character later.
  void FindAll(std::string_view subject, RegexScratch* scratch, std::vector<MatchSpan>* out) const;

  const std::string& pattern() const { return pattern_; }
  bool jit() const { return jit_; }

 private:
  SplitRegex() = default;
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8*
  bool jit_ = false;
};

}  // namespace octet::engine::text
