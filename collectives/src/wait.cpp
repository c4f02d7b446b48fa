#include "wait.h"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "bootstrap.h"
#include "octet/base/deadline.h"

namespace octet::collectives {

namespace {

// Brief spin before yielding: long enough to cover a peer that runs on
// another CPU and is about to arrive (a small shared-memory step takes well
// under a microsecond), short enough that a peer sharing this CPU gets it
// back quickly: with two ranks on one busy core every hand-off costs this
// spin (20 us measured 42 us per 8-byte all-reduce; 2 us about 5 us).
constexpr int64_t kSpinNs = 500;
// Yield for up to this long before sleeping in slices. Short: on a CPU
// crowded with other processes a yield can give the core away for a whole
// time slice, while a sleeper is woken with the scheduler's wake-up
// preference.
constexpr int64_t kYieldNs = 50'000;
// Longest sleep between liveness checks.
constexpr int64_t kSliceNs = 1'000'000;

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

void FutexWait(std::atomic<uint32_t>* word, uint32_t expected, int64_t ns) {
  timespec ts{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
  // Not FUTEX_PRIVATE: the word lives in memory shared between processes.
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

}  // namespace

void RingDoorbell(const Doorbell& bell) {
  if (bell.sleeping->load(std::memory_order_seq_cst) == 0) return;
  bell.word->fetch_add(1, std::memory_order_seq_cst);
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(bell.word), FUTEX_WAKE, INT32_MAX, nullptr,
            nullptr, 0);
}

std::string OpLabel::ToString() const {
  std::string s(OpName(op));
  s += " #" + std::to_string(index);
  if (!algorithm.empty()) s += ", " + std::string(algorithm);
  if (!transport.empty()) s += " over " + std::string(transport);
  return s;
}

Waiter::Waiter(Bootstrap* bootstrap, int64_t peer_timeout_ns, bool oversubscribed)
    : bootstrap_(bootstrap),
      peer_timeout_ns_(peer_timeout_ns),
      spin_ns_(oversubscribed ? 0 : kSpinNs) {}

Status Waiter::CheckPeers() {
  if (!bootstrap_) return Status::Ok();
  PeerFailure f = bootstrap_->CheckPeers();
  if (f.status.ok()) return Status::Ok();
  blamed_ = f.rank;
  return Status(f.status.code(), f.status.message() + " [" + label_.ToString() + "]");
}

void Waiter::SetWaitingOn(int peer) {
  if (bootstrap_) bootstrap_->SetWaitingOn(peer);
}

Status Waiter::Silence(int peer, const char* what) {
  OCTET_RETURN_IF_ERROR(CheckPeers());
  int culprit = peer;
  std::string via;
  if (bootstrap_) {
    // A rank that is itself stuck waiting answers whom it waits for; the
    // first one that does not answer (frozen, or busy past the timeout) or
    // is not waiting is the one that stopped.
    const int64_t answer_ms = std::max<int64_t>(200, peer_timeout_ns_ / 10'000'000);
    std::vector<bool> seen(bootstrap_->size(), false);
    seen[bootstrap_->rank()] = true;
    for (int q = peer; q >= 0 && !seen[q];) {
      seen[q] = true;
      culprit = q;
      const int next = bootstrap_->AskWaitingOn(q, Deadline::AfterMs(answer_ms));
      OCTET_RETURN_IF_ERROR(CheckPeers());  // an ABORT may have arrived meanwhile
      if (next < 0 || next >= bootstrap_->size() || seen[next]) break;
      via += (via.empty() ? "" : ", ") + std::string("rank ") + std::to_string(q) +
             " waits for rank " + std::to_string(next);
      q = next;
    }
  }
  blamed_ = culprit;
  const std::string who =
      bootstrap_ ? bootstrap_->Describe(culprit) : "rank " + std::to_string(culprit);
  std::string msg = who + " did not respond within " +
                    std::to_string(peer_timeout_ns_ / 1'000'000) + " ms (";
  if (!via.empty()) msg += via + "; ";
  msg += "this rank waited for " + std::string(culprit == peer ? "" : "rank " + std::to_string(peer) + "'s ") +
         what + ", " + label_.ToString() + ")";
  return DeadlineExceededError(msg);
}

Status Waiter::LeftError(int peer, const char* what) const {
  const std::string who = bootstrap_ ? bootstrap_->Describe(peer) : "rank " + std::to_string(peer);
  return UnavailableError(who + " closed its communicator while this rank waited for " + what +
                          " (" + label_.ToString() + ")");
}

Status Waiter::WaitSlow(FunctionRef<bool()> ready, int peer, const char* what,
                        const Doorbell* bell) {
  const int64_t start = NowNs();
  // Spin.
  struct Mark {
    Waiter* w;
    ~Mark() { w->SetWaitingOn(-1); }
  } mark{this};
  SetWaitingOn(peer);
  if (spin_ns_ > 0) {
    // A pause costs up to ~50 ns on recent x86: look at the clock often.
    do {
      for (int i = 0; i < 4; ++i) {
        CpuRelax();
        if (ready()) return Status::Ok();
      }
    } while (NowNs() - start < spin_ns_);
  }
  // Yield.
  for (int i = 1;; ++i) {
    ::sched_yield();
    if (ready()) return Status::Ok();
    if (NowNs() - start >= kYieldNs) break;
    if ((i & 63) == 0) OCTET_RETURN_IF_ERROR(CheckPeers());
  }
  // Sleep in slices, checking liveness and the deadline between them.
  for (;;) {
    OCTET_RETURN_IF_ERROR(CheckPeers());
    if (bootstrap_ && bootstrap_->PeerLeft(peer) && !ready()) {
      blamed_ = peer;
      return LeftError(peer, what);
    }
    if (NowNs() - start >= peer_timeout_ns_) {
      if (ready()) return Status::Ok();
      return Silence(peer, what);
    }
    if (bell && bell->word) {
      const uint32_t seen = bell->word->load(std::memory_order_acquire);
      bell->sleeping->store(1, std::memory_order_seq_cst);
      if (!ready()) FutexWait(bell->word, seen, kSliceNs);
      bell->sleeping->store(0, std::memory_order_relaxed);
    } else {
      timespec ts{0, 50'000};  // 50 us
      ::nanosleep(&ts, nullptr);
    }
    if (ready()) return Status::Ok();
  }
}

}  // namespace octet::collectives
