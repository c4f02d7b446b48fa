#include "octet/base/api_key.h"

#include <algorithm>

#include "octet/base/file_util.h"

namespace octet {

Result<std::string> LoadApiKey(const std::string& key, const std::string& key_file) {
  if (!key.empty() && !key_file.empty()) {
    return InvalidArgumentError("give --api-key or --api-key-file, not both");
  }
  std::string k = key;
  if (!key_file.empty()) {
    auto text = ReadFileToString(key_file);
    if (!text.ok()) {
      return InvalidArgumentError("--api-key-file " + key_file + ": " + text.status().message());
    }
    k = text->substr(0, text->find('\n'));
    while (!k.empty() && (k.back() == '\r' || k.back() == ' ' || k.back() == '\t')) k.pop_back();
    size_t start = 0;
    while (start < k.size() && (k[start] == ' ' || k[start] == '\t')) ++start;
    k = k.substr(start);
    if (k.empty())
      return InvalidArgumentError("--api-key-file " + key_file + ": the first line is empty");
  } else if (key.empty()) {
    return std::string();
  }
  for (unsigned char c : k) {
    if (c <= 0x20 || c == 0x7f) {
      return InvalidArgumentError(
          std::string(key_file.empty() ? "--api-key" : "--api-key-file " + key_file) +
          ": the key must not contain spaces or control characters");
    }
  }
  return k;
}

bool ConstantTimeEqual(std::string_view a, std::string_view b) {
  // Every byte of the longer string is visited; the lengths are not secret.
  const size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  // volatile: keeps the compiler from turning the loop into an early exit.
  volatile unsigned char result = diff;
  return result == 0;
}

bool BearerMatches(std::string_view authorization, const std::string& key) {
  constexpr std::string_view kBearer = "Bearer ";
  if (authorization.size() < kBearer.size()) return false;
  // The scheme is case-insensitive (RFC 9110 11.1).
  for (size_t i = 0; i < kBearer.size(); ++i) {
    const char c = authorization[i];
    const char want = kBearer[i];
    if ((c | 0x20) != (want | 0x20)) return false;
  }
  std::string_view presented = authorization.substr(kBearer.size());
  while (!presented.empty() && presented.front() == ' ') presented.remove_prefix(1);
  while (!presented.empty() && (presented.back() == ' ' || presented.back() == '\t'))
    presented.remove_suffix(1);
  return ConstantTimeEqual(presented, key);
}

}  // namespace octet
