// SessionPins: which pool and replica a session's requests stick to (LRU with
// a time-to-live); RouterCore reads and writes them while routing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <string>
#include <unordered_map>

#include "octet/base/thread_annotations.h"

namespace octet::router {

// Session pins, LRU with a time-to-live. Keys: the session key for the
// session-level pin, session key + '\x1f' + pool for a replica pin.
class SessionPins {
 public:
  struct Pin {
    std::string pool;  // session-level: the pool; replica pin: ""
    std::string route;
    std::string replica;  // replica pin: the replica URL
    bool escalated = false;
  };
  // A pin unused for more than ttl_ms (on the caller's clock) has expired: false.
  bool Lookup(const std::string& key, int64_t now_ms, int64_t ttl_ms, Pin* out) const EXCLUDES(mu_);
  // Evicts the least recently used pins beyond max_entries.
  void Set(const std::string& key, Pin pin, int64_t now_ms, size_t max_entries) EXCLUDES(mu_);
  size_t size() const EXCLUDES(mu_);

 private:
  struct Entry {
    Pin pin;
    int64_t last_used_ms;
    std::list<std::string>::iterator lru;
  };
  // Lookup drops an expired pin, so the state is mutable.
  mutable Mutex mu_;
  mutable std::list<std::string> lru_ GUARDED_BY(mu_);  // most recent first
  mutable std::unordered_map<std::string, Entry> entries_ GUARDED_BY(mu_);
};

}  // namespace octet::router
