#include "text/utf8.h"

namespace octet::engine::text {
namespace {

// For a lead byte: the sequence length and the range allowed for the second
// byte (which excludes overlongs, surrogates and code points > U+10FFFF).
struct LeadInfo {
  int length;  // 0: not a lead byte
  uint8_t second_lo;
  uint8_t second_hi;
};

inline LeadInfo Lead(uint8_t b) {
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

}  // namespace

int DecodeUtf8Char(std::string_view s, uint32_t* cp) {
  if (s.empty()) return 0;
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  if (p[0] < 0x80) {
    *cp = p[0];
    return 1;
  }
  const LeadInfo li = Lead(p[0]);
  if (li.length == 0 || s.size() < static_cast<size_t>(li.length)) return 0;
  if (p[1] < li.second_lo || p[1] > li.second_hi) return 0;
  for (int i = 2; i < li.length; ++i) {
    if ((p[i] & 0xC0) != 0x80) return 0;
  }
  switch (li.length) {
    case 2:
      *cp = (uint32_t(p[0] & 0x1F) << 6) | (p[1] & 0x3F);
      break;
    case 3:
      *cp = (uint32_t(p[0] & 0x0F) << 12) | (uint32_t(p[1] & 0x3F) << 6) | (p[2] & 0x3F);
      break;
    default:
      *cp = (uint32_t(p[0] & 0x07) << 18) | (uint32_t(p[1] & 0x3F) << 12) |
            (uint32_t(p[2] & 0x3F) << 6) | (p[3] & 0x3F);
  }
  return li.length;
}

size_t InvalidUtf8Prefix(std::string_view s, bool* truncated) {
  *truncated = false;
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const LeadInfo li = Lead(p[0]);
  if (li.length == 0) return 1;
  // Count the bytes that still fit a valid sequence: that is the maximal subpart.
  size_t i = 1;
  for (; i < static_cast<size_t>(li.length); ++i) {
    if (i >= s.size()) {
      *truncated = true;
      return i;
    }
    const bool ok =
        (i == 1) ? (p[1] >= li.second_lo && p[1] <= li.second_hi) : ((p[i] & 0xC0) == 0x80);
    if (!ok) return i;
  }
  return i;  // not reached for an invalid prefix; a complete sequence is valid
}

size_t ValidUtf8Length(std::string_view s) {
  size_t i = 0;
  const size_t n = s.size();
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  while (i < n) {
    // ASCII fast path, 8 bytes at a time.
    while (i + 8 <= n) {
      uint64_t w;
      __builtin_memcpy(&w, p + i, 8);
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= n) break;
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    uint32_t cp;
    const int len = DecodeUtf8Char(s.substr(i), &cp);
    if (len == 0) return i;
    i += static_cast<size_t>(len);
  }
  return n;
}

void AppendUtf8(std::string* out, uint32_t cp) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

size_t AppendUtf8Lossy(std::string_view bytes, bool hold_incomplete_tail, std::string* out) {
  static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
  size_t i = 0;
  while (i < bytes.size()) {
    const size_t valid = ValidUtf8Length(bytes.substr(i));
    out->append(bytes.data() + i, valid);
    i += valid;
    if (i >= bytes.size()) break;
    bool truncated = false;
    const size_t bad = InvalidUtf8Prefix(bytes.substr(i), &truncated);
    if (truncated && hold_incomplete_tail) return i;
    out->append(kReplacement);
    i += bad;
  }
  return bytes.size();
}

}  // namespace octet::engine::text
