#include "session_pins.h"

namespace octet::router {

bool SessionPins::Lookup(const std::string& key, int64_t now_ms, int64_t ttl_ms, Pin* out) const {
  MutexLock lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return false;
  if (now_ms - it->second.last_used_ms > ttl_ms) {
    lru_.erase(it->second.lru);
    entries_.erase(it);
    return false;
  }
  *out = it->second.pin;
  return true;
}

void SessionPins::Set(const std::string& key, Pin pin, int64_t now_ms, size_t max_entries) {
  MutexLock lock(mu_);
  auto it = entries_.find(key);
  if (it != entries_.end()) {
    lru_.erase(it->second.lru);
    lru_.push_front(key);
    it->second.pin = std::move(pin);
    it->second.last_used_ms = now_ms;
    it->second.lru = lru_.begin();
    return;
  }
  lru_.push_front(key);
  entries_.emplace(key, Entry{std::move(pin), now_ms, lru_.begin()});
  while (entries_.size() > max_entries && !lru_.empty()) {
    entries_.erase(lru_.back());
    lru_.pop_back();
  }
}

size_t SessionPins::size() const {
  MutexLock lock(mu_);
  return entries_.size();
}

}  // namespace octet::router
