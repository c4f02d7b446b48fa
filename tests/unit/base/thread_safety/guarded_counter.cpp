// Compiled by check.sh with clang's thread-safety analysis, twice: as is (it
// must compile) and with OCTET_TSA_VIOLATE (it must not: each function below
// then breaks one rule the annotations state).
#include "octet/base/thread_annotations.h"

namespace {

class Counter {
 public:
  void Add(int n) EXCLUDES(mu_) {
    octet::MutexLock lock(mu_);
    AddLocked(n);
  }
  int Get() EXCLUDES(mu_) {
    octet::MutexLock lock(mu_);
    return value_;
  }
#ifdef OCTET_TSA_VIOLATE
  // Reads a guarded member without the lock.
  int GetUnlocked() { return value_; }
  // Calls a REQUIRES function without the lock.
  void AddUnlocked(int n) { AddLocked(n); }
  // Releases the lock, then writes.
  void AddAfterUnlock(int n) EXCLUDES(mu_) {
    octet::MutexLock lock(mu_);
    lock.Unlock();
    value_ += n;
  }
#endif

 private:
  void AddLocked(int n) REQUIRES(mu_) { value_ += n; }

  octet::Mutex mu_;
  int value_ GUARDED_BY(mu_) = 0;
};

}  // namespace

int main() {
  Counter c;
  c.Add(2);
  return c.Get() == 2 ? 0 : 1;
}
