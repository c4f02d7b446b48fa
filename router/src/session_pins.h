// SessionPins: which pool and replica a session's requests stick to (LRU with
// a time-to-live); RouterCore reads and writes them while routing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <mutex>
#include <string>
#include <unordered_map>

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
  bool Lookup(const std::string& key, int64_t now_ms, int64_t ttl_ms, Pin* out) const;
  void Set(const std::string& key, Pin pin, int64_t now_ms, size_t max_entries);
  size_t size() const;

 private:
  struct Entry {
    Pin pin;
    int64_t last_used_ms;
    std::list<std::string>::iterator lru;
  };
  mutable std::mutex mu_;
  mutable std::list<std::string> lru_;                      // most recent first; guarded by mu_
  mutable std::unordered_map<std::string, Entry> entries_;  // guarded by mu_
};

}  // namespace octet::router
