// SseTokenCounter: the gateway's count of the completion tokens in a relayed
// SSE body (both stream paths feed it every upstream read). Internal to the
// gateway's files.
#pragma once

#include <cstdint>
#include <string_view>

#include "octet/base/json.h"
#include "octet/base/sse.h"

namespace octet::router {

// Counts completion tokens in an SSE body: usage.completion_tokens when the
// upstream reports it, else the number of events carrying non-empty content.
class SseTokenCounter {
 public:
  void Feed(std::string_view data) {
    // An oversized event is dropped by the reader (and not counted); the
    // relay itself goes on.
    (void)reader_.Feed(data, [this](const SseReader::Event& e) { Event(e.data); });
  }
  uint64_t tokens() const { return usage_ >= 0 ? static_cast<uint64_t>(usage_) : events_; }

 private:
  static bool NonEmptyString(std::string_view s, std::string_view key) {
    size_t p = s.find(key);
    while (p != std::string_view::npos) {
      size_t k = p + key.size();
      while (k < s.size() && (s[k] == ' ' || s[k] == ':')) ++k;
      if (k + 1 < s.size() && s[k] == '"' && s[k + 1] != '"') return true;
      p = s.find(key, p + 1);
    }
    return false;
  }
  void Event(std::string_view payload) {
    if (payload == "[DONE]") return;
    if (payload.find("\"completion_tokens\"") != std::string_view::npos) {
      nlohmann::json j = nlohmann::json::parse(payload, nullptr, false);
      if (!j.is_discarded() && j.contains("usage") && j["usage"].is_object()) {
        // An upstream's count that is not an integer is no count (not cast).
        const std::optional<int64_t> n = IntegerMember(j["usage"], "completion_tokens", -1);
        if (n && *n >= 0) {
          usage_ = *n;
          return;
        }
      }
    }
    if (NonEmptyString(payload, "\"content\"") || NonEmptyString(payload, "\"text\"")) ++events_;
  }
  SseReader reader_{size_t{1} << 20};
  uint64_t events_ = 0;
  int64_t usage_ = -1;
};

}  // namespace octet::router
