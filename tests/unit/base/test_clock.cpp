// Clock (base/clock.h) and the annotated Mutex (base/thread_annotations.h):
// what the scheduler, the router and their tests rely on when they wait.
#include <QtTest>
#include <atomic>
#include <thread>

#include "octet/base/clock.h"
#include "octet/base/deadline.h"
#include "octet/base/thread_annotations.h"

using namespace octet;

namespace {

// A flag behind a Mutex, waited for through a Clock.
struct Flag {
  Mutex mu;
  std::condition_variable cv;
  bool set GUARDED_BY(mu) = false;

  void Set() {
    {
      MutexLock lock(mu);
      set = true;
    }
    cv.notify_all();
  }
  // What Clock::WaitUntil returned, and whether the flag was set on return.
  std::pair<bool, bool> WaitUntil(Clock& clock, int64_t deadline_ns) {
    MutexLock lock(mu);
    const bool r = clock.WaitUntil(lock, cv, deadline_ns, [this]() REQUIRES(mu) { return set; });
    return {r, set};
  }
};

}  // namespace

class TestClock : public QObject {
  Q_OBJECT
 private slots:
  void manualClockMovesOnlyWhenAdvanced() {
    ManualClock clock(5'000'000);
    QCOMPARE(clock.NowNs(), int64_t{5'000'000});
    QCOMPARE(clock.NowMs(), int64_t{5});
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    QCOMPARE(clock.NowNs(), int64_t{5'000'000});
    clock.AdvanceMs(1500);
    QCOMPARE(clock.NowMs(), int64_t{1505});
    clock.AdvanceNs(1);
    QCOMPARE(clock.NowNs(), int64_t{1'505'000'001});
  }

  // A thread sleeping on the manual clock wakes when the test advances it
  // past the sleep, not before.
  void sleepEndsWhenTheClockPassesIt() {
    ManualClock clock;
    std::atomic<bool> woke{false};
    std::thread sleeper([&] {
      clock.SleepForMs(1000);
      woke = true;
    });
    QVERIFY(clock.AwaitWaiters(1));
    clock.AdvanceMs(999);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    QVERIFY(!woke.load());
    clock.AdvanceMs(1);
    sleeper.join();
    QVERIFY(woke.load());
    QCOMPARE(clock.waiters(), 0);
  }

  // WaitUntil: true as soon as the predicate holds (a notify, no time
  // passing); false once the clock reaches the deadline with it still false.
  void waitUntilEndsOnThePredicateOrTheDeadline() {
    ManualClock clock;
    Flag flag;
    std::pair<bool, bool> got{false, false};
    std::thread waiter([&] { got = flag.WaitUntil(clock, clock.NowNs() + 1'000'000'000); });
    QVERIFY(clock.AwaitWaiters(1));
    flag.Set();
    waiter.join();
    QCOMPARE(got, std::make_pair(true, true));

    Flag unset;
    std::thread timing_out([&] { got = unset.WaitUntil(clock, clock.NowNs() + 50'000'000); });
    QVERIFY(clock.AwaitWaiters(1));
    clock.AdvanceMs(50);
    timing_out.join();
    QCOMPARE(got, std::make_pair(false, false));
    // A deadline already passed: the predicate is still consulted first.
    QCOMPARE(flag.WaitUntil(clock, clock.NowNs() - 1), std::make_pair(true, true));
    QCOMPARE(unset.WaitUntil(clock, clock.NowNs()), std::make_pair(false, false));
  }

  // A test that forgets to advance the clock does not hang: the wait gives
  // up after the clock's real-time limit, as if its deadline had passed.
  void aForgottenAdvanceEndsTheWaitAfterTheRealLimit() {
    ManualClock clock(1'000'000'000, /*real_limit_ms=*/50);
    Flag flag;
    const int64_t t0 = NowNs();
    QCOMPARE(flag.WaitUntil(clock, clock.NowNs() + 3'600'000'000'000),
             std::make_pair(false, false));
    QVERIFY((NowNs() - t0) >= 50'000'000);
    const int64_t t1 = NowNs();
    clock.SleepForMs(3'600'000);
    QVERIFY((NowNs() - t1) >= 50'000'000);
  }

  // The real clock: the steady clock's timeline; a wait ends on a notify or
  // once its deadline has passed (never before it).
  void realClockWaitsInRealTime() {
    Clock& clock = Clock::Real();
    const int64_t a = clock.NowNs();
    const int64_t b = NowNs();
    QVERIFY(b >= a);
    Flag flag;
    const int64_t t0 = clock.NowNs();
    QCOMPARE(flag.WaitUntil(clock, t0 + 20'000'000), std::make_pair(false, false));
    QVERIFY(clock.NowNs() - t0 >= 20'000'000);
    std::thread setter([&] { flag.Set(); });
    QCOMPARE(flag.WaitUntil(clock, clock.NowNs() + 60'000'000'000), std::make_pair(true, true));
    setter.join();
    const int64_t t1 = clock.NowNs();
    clock.SleepForMs(10);
    QVERIFY(clock.NowNs() - t1 >= 10'000'000);
  }

  // MutexLock::Unlock/Lock: another thread takes the mutex in between.
  void mutexLockReleasesAndRetakes() {
    Mutex mu;
    int value = 0;  // guarded by mu (the annotation is for members and globals)
    MutexLock lock(mu);
    value = 1;
    lock.Unlock();
    std::thread other([&] {
      MutexLock l(mu);
      value = 2;
    });
    other.join();
    lock.Lock();
    QCOMPARE(value, 2);
  }
};

QTEST_GUILESS_MAIN(TestClock)
#include "test_clock.moc"
