// How a rank waits for its peers.
//
// A wait first checks its condition inline (the fast path: no syscall, no
// clock read). If that fails it spins briefly (~0.5 us; skipped when the host
// has more local ranks than CPUs), then yields the CPU for up to 50 us, then
// sleeps in slices of at most a millisecond: on a futex "doorbell" when the
// transport rings one (shared memory), else a short nanosleep. Between slices
// it checks the control mesh for dead peers and ABORTs, and gives up with
// DeadlineExceeded, naming the awaited peer, when nothing has happened for the
// communicator's peer timeout. So 8 ranks on 2 cores still make progress, and
// nothing ever waits without a deadline.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "octet/base/status.h"
#include "octet/collectives/types.h"

namespace octet::collectives {

class Bootstrap;

// A non-owning reference to a callable, cheaper than std::function (no
// allocation); the callable must outlive the call it is passed to.
template <typename Signature>
class FunctionRef;
template <typename R, typename... Args>
class FunctionRef<R(Args...)> {
 public:
  template <typename F, typename = std::enable_if_t<!std::is_same_v<std::decay_t<F>, FunctionRef>>>
  FunctionRef(F&& f)  // NOLINT: implicit by design
      : obj_(const_cast<void*>(static_cast<const void*>(&f))),
        call_([](void* o, Args... a) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(o))(std::forward<Args>(a)...);
        }) {}
  R operator()(Args... a) const { return call_(obj_, std::forward<Args>(a)...); }

 private:
  void* obj_;
  R (*call_)(void*, Args...);
};

// A futex word a sleeping waiter can be woken through, and the flag that says
// it is asleep (both in shared memory). A waker that changes state a sleeper
// may wait for loads `sleeping` and, when set, bumps and wakes `word`.
struct Doorbell {
  std::atomic<uint32_t>* word = nullptr;
  std::atomic<uint32_t>* sleeping = nullptr;
};
void RingDoorbell(const Doorbell& bell);

// Describes the operation in progress, for error messages.
struct OpLabel {
  CollectiveOp op = CollectiveOp::kBarrier;
  uint64_t index = 0;
  std::string_view algorithm;
  std::string_view transport;
  std::string ToString() const;  // "all_reduce #12, oneshot over shm"
};

class Waiter {
 public:
  Waiter(Bootstrap* bootstrap, int64_t peer_timeout_ns, bool oversubscribed);

  void set_label(const OpLabel& label) { label_ = label; }
  const OpLabel& label() const { return label_; }
  int64_t peer_timeout_ns() const { return peer_timeout_ns_; }
  Bootstrap* bootstrap() const { return bootstrap_; }

  // Waits until ready() returns true. `peer` is the rank waited for and
  // `what` what is awaited from it ("its one-shot data"), for the error.
  template <typename Ready>
  Status Wait(Ready&& ready, int peer, const char* what, const Doorbell* bell = nullptr) {
    if (ready()) return Status::Ok();
    return WaitSlow(FunctionRef<bool()>(ready), peer, what, bell);
  }

  // Checks the control mesh now (one poll(2)); an error names the failed rank.
  Status CheckPeers();
  // The error for "peer showed no progress for the peer timeout". Before
  // blaming `peer` it follows the chain of waits over the control mesh (peer
  // waits for q, q waits for ...) to the rank that is not waiting or does not
  // answer, and blames that one; it also returns an ABORT that arrived
  // meanwhile. Sets blamed().
  Status Silence(int peer, const char* what);
  // Marks what this rank waits for (for peers following the chain); -1: none.
  void SetWaitingOn(int peer);
  // The error for "peer closed its communicator while this rank needed it".
  Status LeftError(int peer, const char* what) const;
  // Which rank the last error returned by this waiter blames (-1: none).
  int blamed() const { return blamed_; }
  void Blame(int peer) { blamed_ = peer; }

 private:
  Status WaitSlow(FunctionRef<bool()> ready, int peer, const char* what, const Doorbell* bell);

  Bootstrap* bootstrap_;
  int64_t peer_timeout_ns_;
  int64_t spin_ns_;
  OpLabel label_;
  int blamed_ = -1;
};

}  // namespace octet::collectives
