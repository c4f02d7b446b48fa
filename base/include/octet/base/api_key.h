// API keys for the HTTP front ends (`octet serve`, `octet route`): the key
// comes from --api-key KEY or --api-key-file FILE (first line, whitespace
// trimmed), and a request carries it as "Authorization: Bearer KEY". The
// comparison takes the same time wherever the strings differ.
#pragma once

#include <string>
#include <string_view>

#include "octet/base/status.h"

namespace octet {

// The key from exactly one of `key` and `key_file` ("" when neither is given).
// Errors: both given, an unreadable or empty file, a key with spaces or
// control characters.
Result<std::string> LoadApiKey(const std::string& key, const std::string& key_file);

// True when `a` == `b`, in time that depends only on their lengths.
bool ConstantTimeEqual(std::string_view a, std::string_view b);

// True when `authorization` (the header's value) is "Bearer KEY" for `key`.
bool BearerMatches(std::string_view authorization, const std::string& key);

}  // namespace octet
