#include "text/split_regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <atomic>

#include "octet/base/log.h"

namespace octet::engine::text {

const char kWhiteSpaceClassItems[] =
    "\\x{9}-\\x{D}\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}"
    "\\x{202F}\\x{205F}\\x{3000}";

std::string RewriteWhiteSpaceEscapes(std::string_view p) {
  const std::string ws = kWhiteSpaceClassItems;
  std::string out;
  out.reserve(p.size() + 64);
  size_t i = 0;
  const size_t n = p.size();
  // Copies an escape starting at p[i] == '\\' that is not \s or \S into `dst`:
  // \Q..\E literally, \p{..}/\x{..}/\N{..} with their braces, else two bytes.
  auto copy_escape = [&](std::string* dst) {
    if (i + 1 >= n) {
      dst->push_back(p[i++]);
      return;
    }
    const char d = p[i + 1];
    if (d == 'Q') {
      const size_t e = p.find("\\E", i + 2);
      const size_t stop = e == std::string_view::npos ? n : e + 2;
      dst->append(p.substr(i, stop - i));
      i = stop;
      return;
    }
    if ((d == 'p' || d == 'P' || d == 'x' || d == 'N' || d == 'o') && i + 2 < n &&
        p[i + 2] == '{') {
      const size_t e = p.find('}', i + 3);
      const size_t stop = e == std::string_view::npos ? n : e + 1;
      dst->append(p.substr(i, stop - i));
      i = stop;
      return;
    }
    dst->append(p.substr(i, 2));
    i += 2;
  };
  while (i < n) {
    const char c = p[i];
    if (c == '\\') {
      if (i + 1 < n && (p[i + 1] == 's' || p[i + 1] == 'S')) {
        out += p[i + 1] == 's' ? "[" + ws + "]" : "[^" + ws + "]";
        i += 2;
      } else {
        copy_escape(&out);
      }
      continue;
    }
    if (c != '[') {
      out.push_back(c);
      ++i;
      continue;
    }
    // A character class: collect its items, rewriting \s in place and noting \S
    // (which cannot be spelled as items of the same class).
    ++i;
    bool negated = false;
    if (i < n && p[i] == '^') {
      negated = true;
      ++i;
    }
    std::string items;
    bool has_non_space = false;
    bool first = true;
    while (i < n) {
      const char d = p[i];
      if (d == ']' && !first) break;
      first = false;
      if (d == '\\') {
        if (i + 1 < n && p[i + 1] == 's') {
          items += ws;
          i += 2;
        } else if (i + 1 < n && p[i + 1] == 'S') {
          has_non_space = true;
          i += 2;
        } else {
          copy_escape(&items);
        }
        continue;
      }
      if (d == '[' && i + 1 < n && p[i + 1] == ':') {  // POSIX class [:alpha:]
        const size_t e = p.find(":]", i + 2);
        const size_t stop = e == std::string_view::npos ? n : e + 2;
        items.append(p.substr(i, stop - i));
        i = stop;
        continue;
      }
      items.push_back(d);
      ++i;
    }
    if (i < n) ++i;  // the closing ']' (a missing one is left for PCRE2 to report)
    if (!has_non_space) {
      out += negated ? "[^" : "[";
      out += items;
      out += "]";
    } else if (!negated) {  // [I\S] = I or not-space
      out += items.empty() ? "[^" + ws + "]" : "(?:[" + items + "]|[^" + ws + "])";
    } else {  // [^I\S] = space and not I
      out += items.empty() ? "[" + ws + "]" : "(?:(?![" + items + "])[" + ws + "])";
    }
  }
  return out;
}

struct RegexScratch::Impl {
  pcre2_match_data* match_data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;
};

RegexScratch::RegexScratch() : impl_(std::make_unique<Impl>()) {
  impl_->match_data = pcre2_match_data_create(1, nullptr);
}

RegexScratch::~RegexScratch() {
  if (impl_->match_data) pcre2_match_data_free(impl_->match_data);
  if (impl_->context) pcre2_match_context_free(impl_->context);
  if (impl_->jit_stack) pcre2_jit_stack_free(impl_->jit_stack);
}

Result<std::unique_ptr<SplitRegex>> SplitRegex::Compile(std::string_view pattern) {
  std::unique_ptr<SplitRegex> re(new SplitRegex());
  re->pattern_ = std::string(pattern);
  const std::string rewritten = RewriteWhiteSpaceEscapes(pattern);
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(rewritten.data()), rewritten.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (!code) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    return InvalidArgumentError(
        "split regex does not compile (PCRE2: " + std::string(reinterpret_cast<char*>(message)) +
        ", at offset " + std::to_string(offset) +
        " of the rewritten pattern): " + std::string(pattern));
  }
  re->code_ = code;
  re->jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  return re;
}

SplitRegex::~SplitRegex() {
  if (code_) pcre2_code_free(static_cast<pcre2_code*>(code_));
}

void SplitRegex::FindAll(std::string_view subject, RegexScratch* scratch,
                         std::vector<MatchSpan>* out) const {
  auto* code = static_cast<pcre2_code*>(code_);
  RegexScratch::Impl* s = scratch->impl();
  const auto* data = reinterpret_cast<PCRE2_SPTR>(subject.data());
  const size_t n = subject.size();
  size_t pos = 0;
  while (pos <= n) {
    // The subject was validated by the caller, so the per-call UTF check is skipped.
    int rc =
        jit_ ? pcre2_jit_match(code, data, n, pos, PCRE2_NO_UTF_CHECK, s->match_data, s->context)
             : pcre2_match(code, data, n, pos, PCRE2_NO_UTF_CHECK, s->match_data, s->context);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !s->jit_stack) {
      // Deep backtracking on a long run: give the JIT a larger stack and retry.
      s->jit_stack = pcre2_jit_stack_create(size_t{32} << 10, size_t{64} << 20, nullptr);
      s->context = pcre2_match_context_create(nullptr);
      pcre2_jit_stack_assign(s->context, nullptr, s->jit_stack);
      continue;
    }
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      rc = pcre2_match(code, data, n, pos, PCRE2_NO_UTF_CHECK, s->match_data, nullptr);
    }
    if (rc == PCRE2_ERROR_NOMATCH) return;
    if (rc < 0) {
      // Resource limits only (the pattern compiled and the subject is valid):
      // the rest of the subject stays one unmatched piece.
      static std::atomic<bool> warned{false};
      if (!warned.exchange(true)) {
        PCRE2_UCHAR message[256];
        pcre2_get_error_message(rc, message, sizeof(message));
        OCTET_LOG(WARNING) << "split regex gave up on a " << n << "-byte piece ("
                           << reinterpret_cast<char*>(message) << "); it is kept whole";
      }
      return;
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(s->match_data);
    const size_t begin = ov[0];
    const size_t end = ov[1];
    out->push_back({begin, end});
    if (end > begin) {
      pos = end;
    } else {
      if (end >= n) return;
      // Step over one whole character after an empty match.
      pos = end + 1;
      while (pos < n && (static_cast<unsigned char>(subject[pos]) & 0xC0) == 0x80) ++pos;
    }
  }
}

}  // namespace octet::engine::text
