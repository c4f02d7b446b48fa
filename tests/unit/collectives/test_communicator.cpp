// Communicator behaviour with ranks as threads of one process: every op on
// every transport, start-up vote and fallback (verbs and NCCL without
// hardware), errors that name the rank, poisoning, the one-call-at-a-time
// rule, Duplicate, stats and auto's agreed algorithm table. Multi-process runs, killed
// ranks and network namespaces are in tests/integration/collectives.
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <QtTest>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <limits>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "algorithm_table.h"
#include "backend.h"
#include "communicator_checks.h"
#include "octet/base/file_util.h"
#include "octet/collectives/communicator.h"
#include "octet/collectives/local_rendezvous.h"
#include "rank_threads.h"
#include "reduce.h"
#include "transport.h"

using namespace octet;
using namespace octet::collectives;
using namespace octet::collectives::test;

class TestCommunicator : public QObject {
  Q_OBJECT
 private slots:
  void oneRankDoesLocalCopies() {
    auto r = RunRanks(1, {}, [](Communicator& c) {
      OCTET_RETURN_IF_ERROR(Expect(c.size() == 1 && c.rank() == 0, "identity"));
      return CheckAllOps(c, DType::kF32, 100);
    });
    QVERIFY2(AllOk(r), Join(r).c_str());
  }

  void everyOpOnEveryTransport_data() {
    QTest::addColumn<int>("transport");
    QTest::addColumn<int>("algorithm");
    QTest::addColumn<int>("ranks");
    for (auto t : {TransportKind::kShm, TransportKind::kTcp}) {
      for (auto a : {AlgorithmKind::kOneShot, AlgorithmKind::kRing, AlgorithmKind::kAuto}) {
        for (int n : {2, 3}) {
          QTest::addRow("%s %s n=%d", TransportName(t).data(), AlgorithmName(a).data(), n)
              << int(t) << int(a) << n;
        }
      }
    }
  }
  void everyOpOnEveryTransport() {
    QFETCH(int, transport);
    QFETCH(int, algorithm);
    QFETCH(int, ranks);
    CommunicatorOptions o;
    o.transport = static_cast<TransportKind>(transport);
    o.algorithm = static_cast<AlgorithmKind>(algorithm);
    o.oneshot_max_bytes = 2048;  // auto: both paths below
    o.slot_bytes = 8192;         // one-shot splits the larger sizes into steps
    o.chunk_bytes = 4096;        // ring pipelines them in pieces
    auto r = RunRanks(ranks, o, [&](Communicator& c) {
      OCTET_RETURN_IF_ERROR(Expect(c.transport() == o.transport, "transport " + c.Describe()));
      for (DType d : {DType::kF32, DType::kBF16, DType::kF16}) {
        for (size_t count : {size_t{1}, size_t{5}, size_t{999}, size_t{5000}}) {
          OCTET_RETURN_IF_ERROR(CheckAllOps(c, d, count).WithContext(
              std::string(DTypeName(d)) + " x" + std::to_string(count)));
        }
      }
      return Status::Ok();
    });
    QVERIFY2(AllOk(r), Join(r).c_str());
  }

  void resultsAreBitIdenticalOnEveryRank_data() {
    QTest::addColumn<int>("algorithm");
    QTest::newRow("oneshot") << int(AlgorithmKind::kOneShot);
    QTest::newRow("ring") << int(AlgorithmKind::kRing);
  }
  void resultsAreBitIdenticalOnEveryRank() {
    QFETCH(int, algorithm);
    CommunicatorOptions o;
    o.transport = TransportKind::kShm;
    o.algorithm = static_cast<AlgorithmKind>(algorithm);
    const int n = 3;
    const size_t count = 10007;
    std::vector<std::vector<float>> results(n);
    std::vector<std::vector<float>> inputs(n, std::vector<float>(count));
    std::mt19937 rng(5);
    std::normal_distribution<float> g;
    for (auto& v : inputs) for (float& f : v) f = g(rng);
    auto r = RunRanks(n, o, [&](Communicator& c) {
      results[c.rank()] = inputs[c.rank()];
      return c.AllReduce(results[c.rank()].data(), count, DType::kF32);
    });
    QVERIFY2(AllOk(r), Join(r).c_str());
    for (int q = 1; q < n; ++q) {
      QVERIFY(std::memcmp(results[q].data(), results[0].data(), count * 4) == 0);
    }
    for (size_t i = 0; i < count; ++i) {
      double want = 0;
      for (int q = 0; q < n; ++q) want += inputs[q][i];
      QVERIFY(std::fabs(results[0][i] - want) < 1e-5);
    }
  }

  void pointToPointBuffersEarlyMessages_data() {
    QTest::addColumn<int>("transport");
    QTest::newRow("shm") << int(TransportKind::kShm);
    QTest::newRow("tcp") << int(TransportKind::kTcp);
  }
  void pointToPointBuffersEarlyMessages() {
    QFETCH(int, transport);
    CommunicatorOptions o;
    o.transport = static_cast<TransportKind>(transport);
    o.chunk_bytes = 64 << 10;
    auto r = RunRanks(2, o, [&](Communicator& c) {
      std::vector<uint8_t> msg(100'000), got(100'000), big(3 << 20), big_got(3 << 20);
      for (size_t i = 0; i < msg.size(); ++i) msg[i] = static_cast<uint8_t>(i * 7);
      for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 13 + c.rank());
      if (c.rank() == 0) {
        // Sent before rank 1 posts its receive (rank 1 is in the barrier).
        OCTET_RETURN_IF_ERROR(c.Send(msg.data(), msg.size(), 1));
        OCTET_RETURN_IF_ERROR(c.Barrier());
      } else {
        OCTET_RETURN_IF_ERROR(c.Barrier());
        OCTET_RETURN_IF_ERROR(c.Recv(got.data(), got.size(), 0));
        OCTET_RETURN_IF_ERROR(Expect(got == msg, "early message corrupted"));
      }
      // Both directions at once, larger than any buffering.
      const int peer = 1 - c.rank();
      OCTET_RETURN_IF_ERROR(
          c.SendRecv(big.data(), big.size(), peer, big_got.data(), big_got.size(), peer));
      for (size_t i = 0; i < big_got.size(); i += 4099) {
        if (big_got[i] != static_cast<uint8_t>(i * 13 + peer)) return DataLossError("sendrecv");
      }
      // Zero-byte messages are messages too.
      if (c.rank() == 0) return c.Send(nullptr, 0, 1);
      return c.Recv(nullptr, 0, 0);
    });
    QVERIFY2(AllOk(r), Join(r).c_str());
  }

  void secondConcurrentCallIsRejected() {
    std::atomic<bool> rejected{false};
    auto r = RunRanks(2, {}, [&](Communicator& c) -> Status {
      float x[4] = {1, 2, 3, 4};
      if (c.rank() == 1) {
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        return c.AllReduce(x, 4, DType::kF32);
      }
      // Rank 0 blocks in AllReduce (rank 1 is late); a second thread tries
      // to use the same communicator meanwhile.
      std::thread other([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(150));
        float y[4];
        Status s = c.AllReduce(y, 4, DType::kF32);
        rejected = s.code() == StatusCode::kFailedPrecondition;
      });
      Status s = c.AllReduce(x, 4, DType::kF32);
      other.join();
      return s;
    });
    QVERIFY2(AllOk(r), Join(r).c_str());
    QVERIFY(rejected);
  }

  void statsCountCallsBytesAndTime() {
    CommunicatorOptions o;
    o.algorithm = AlgorithmKind::kAuto;
    o.oneshot_max_bytes = 1024;
    auto r = RunRanks(2, o, [&](Communicator& c) {
      std::vector<float> small(16), large(4096);
      OCTET_RETURN_IF_ERROR(c.AllReduce(small.data(), small.size(), DType::kF32));
      OCTET_RETURN_IF_ERROR(c.AllReduce(large.data(), large.size(), DType::kF32));
      OCTET_RETURN_IF_ERROR(c.Barrier());
      const CollectiveStats s = c.stats();
      OCTET_RETURN_IF_ERROR(Expect(s.calls == 3, "calls"));
      OCTET_RETURN_IF_ERROR(Expect(s.bytes == 16 * 4 + 4096 * 4, "bytes"));
      OCTET_RETURN_IF_ERROR(Expect(s.oneshot_calls == 2 && s.ring_calls == 1,
                                   "algorithm counts (barrier is one-shot)"));
      OCTET_RETURN_IF_ERROR(Expect(s.busy_ns > 0, "time"));
      c.ResetStats();
      return Expect(c.stats().calls == 0 && c.stats().busy_ns == 0, "reset");
    });
    QVERIFY2(AllOk(r), Join(r).c_str());
  }

  // AllReduceWith runs the named algorithm whatever the communicator's choice
  // (the benchmark compares algorithms over one communicator's links), with
  // the same sums on every rank; anything but one-shot or ring is refused
  // without poisoning.
  void allReduceWithForcesTheAlgorithm() {
    CommunicatorOptions o;
    o.algorithm = AlgorithmKind::kAuto;
    o.oneshot_max_bytes = 1 << 20;  // auto's table: one-shot at these sizes
    const int n = 3;
    const size_t count = 1001;
    std::vector<std::vector<float>> results(n, std::vector<float>(count));
    auto r = RunRanks(n, o, [&](Communicator& c) {
      std::vector<float> in(count);
      for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>(c.rank() * 1000 + i);
      std::vector<float>& out = results[c.rank()];
      OCTET_RETURN_IF_ERROR(c.AllReduceWith(AlgorithmKind::kRing, in.data(), out.data(), count,
                                            DType::kF32));
      for (size_t i = 0; i < count; ++i) {
        OCTET_RETURN_IF_ERROR(Expect(out[i] == static_cast<float>(3000 + 3 * i), "ring sum"));
      }
      OCTET_RETURN_IF_ERROR(c.AllReduceWith(AlgorithmKind::kOneShot, in.data(), out.data(), count,
                                            DType::kF32));
      OCTET_RETURN_IF_ERROR(Expect(c.stats().ring_calls == 1 && c.stats().oneshot_calls == 1,
                                   "one ring and one one-shot call"));
      const Status bad =
          c.AllReduceWith(AlgorithmKind::kAuto, in.data(), out.data(), count, DType::kF32);
      OCTET_RETURN_IF_ERROR(Expect(bad.code() == StatusCode::kInvalidArgument, bad.ToString()));
      return Expect(!c.poisoned(), "poisoned by a bad argument");
    });
    QVERIFY2(AllOk(r), Join(r).c_str());
    for (int q = 1; q < n; ++q) QVERIFY(results[q] == results[0]);
  }

  void duplicateServesASecondThread() {
    auto r = RunRanks(3, {}, [&](Communicator& c) -> Status {
      auto dup = c.Duplicate();
      if (!dup.ok()) return dup.status();
      // Both communicators busy at once, from two threads of each rank.
      Status bg;
      std::thread t([&] { bg = CheckAllOps(**dup, DType::kBF16, 3000); });
      Status fg = CheckAllOps(c, DType::kF32, 3000);
      t.join();
      OCTET_RETURN_IF_ERROR(fg);
      OCTET_RETURN_IF_ERROR(bg.WithContext("duplicate"));
      return Expect((*dup)->transport() == c.transport(), "same transport");
    });
    QVERIFY2(AllOk(r), Join(r).c_str());
  }

  void verbsWithoutDeviceFallsBackTogether() {
    Status probe = ProbeVerbs(TransportConfig{});
    if (probe.ok()) QSKIP("this machine has an RDMA device: the fallback path is not taken");
    // The clean "no device" answer (or "not compiled in" without rdma-core).
    QVERIFY2(probe.message().find("no RDMA device") != std::string::npos ||
                 probe.message().find("not compiled in") != std::string::npos,
             probe.message().c_str());
    QCOMPARE(probe.code(), StatusCode::kUnavailable);
    CommunicatorOptions o;
    o.transport = TransportKind::kVerbs;
    std::mutex mu;
    std::vector<std::string> reasons;
    auto r = RunRanks(2, o, [&](Communicator& c) {
      std::lock_guard<std::mutex> l(mu);
      reasons.push_back(c.fallback_reason());
      OCTET_RETURN_IF_ERROR(Expect(c.transport() == TransportKind::kShm, c.Describe()));
      return Status::Ok();
    });
    QVERIFY2(AllOk(r), Join(r).c_str());
    QCOMPARE(reasons.size(), size_t{2});
    QCOMPARE(reasons[0], reasons[1]);  // every rank tells the same story
    QVERIFY2(reasons[0].find("verbs unavailable") != std::string::npos, reasons[0].c_str());
    QVERIFY2(reasons[0].find(probe.message()) != std::string::npos, reasons[0].c_str());
  }

  void ncclWithoutGpuFallsBackTogether() {
    Status probe = ProbeNccl();
    if (probe.ok()) QSKIP("this machine has a usable GPU: the fallback path is not taken");
    CommunicatorOptions o;
    o.transport = TransportKind::kNccl;
    auto r = RunRanks(2, o, [&](Communicator& c) {
      OCTET_RETURN_IF_ERROR(Expect(c.transport() == TransportKind::kShm, c.Describe()));
      OCTET_RETURN_IF_ERROR(Expect(c.fallback_reason().find("nccl unavailable") == 0,
                                   c.fallback_reason()));
      return CheckAllOps(c, DType::kF32, 10);
    });
    QVERIFY2(AllOk(r), Join(r).c_str());
  }

  void inheritedRendezvousIsTakenOnceForItsPort() {
    // What rank 0 does with the socket its spawner bound (local_rendezvous.h).
    auto rv = LocalRendezvous::Open();
    QVERIFY2(rv.ok(), rv.status().ToString().c_str());
    auto other = LocalRendezvous::Open();
    QVERIFY2(other.ok(), other.status().ToString().c_str());
    const std::string env = LocalRendezvous::EnvFor({&*rv});
    const size_t eq = env.find('=');
    QVERIFY(eq != std::string::npos);
    ::setenv(env.substr(0, eq).c_str(), env.substr(eq + 1).c_str(), 1);
    QCOMPARE(TakeInheritedRendezvous(other->port()), -1);  // not named
    const int fd = TakeInheritedRendezvous(rv->port());
    QVERIFY(fd >= 0);
    QCOMPARE(TakeInheritedRendezvous(rv->port()), -1);  // at most once
    // The descriptor named for a port must listen on that port.
    ::setenv(env.substr(0, eq).c_str(), (std::to_string(other->port()) + ":0").c_str(), 1);
    QCOMPARE(TakeInheritedRendezvous(other->port()), -1);  // fd 0 is not that socket
    ::unsetenv(env.substr(0, eq).c_str());
    QCOMPARE(TakeInheritedRendezvous(other->port()), -1);
  }

  // A spawner that is rank 0 itself (`octet serve --tp`) keeps the socket for
  // its own Communicator::Create: taken once, listening on that port, and
  // close-on-exec; then a real two-rank communicator runs on that address.
  void keptRendezvousServesThisProcessAsRankZero() {
    auto rv = LocalRendezvous::Open();
    QVERIFY2(rv.ok(), rv.status().ToString().c_str());
    const std::string address = rv->address();
    const int port = rv->port();
    rv->KeepForThisProcess();
    rv->Close();  // no longer its to close
    CommunicatorOptions o;
    o.connect_timeout_ms = 10000;
    Result<std::unique_ptr<Communicator>> c0 = UnavailableError("not run");
    Result<std::unique_ptr<Communicator>> c1 = UnavailableError("not run");
    std::thread t1([&] { c1 = Communicator::Create(address, 2, 1, o); });
    c0 = Communicator::Create(address, 2, 0, o);
    t1.join();
    QVERIFY2(c0.ok(), c0.status().ToString().c_str());
    QVERIFY2(c1.ok(), c1.status().ToString().c_str());
    QCOMPARE(TakeInheritedRendezvous(port), -1);  // taken by rank 0's Create
    std::vector<float> a = {1, 2, 3}, b = {10, 20, 30};
    Status s1;
    std::thread r1([&] { s1 = (*c1)->AllReduce(b.data(), b.size(), DType::kF32); });
    const Status s0 = (*c0)->AllReduce(a.data(), a.size(), DType::kF32);
    r1.join();
    QVERIFY2(s0.ok() && s1.ok(), (s0.ToString() + " / " + s1.ToString()).c_str());
    QCOMPARE(a, (std::vector<float>{11, 22, 33}));
    QCOMPARE(b, a);
    // Kept and taken by hand: the descriptor listens on the port, close-on-exec.
    auto again = LocalRendezvous::Open();
    QVERIFY(again.ok());
    const int p2 = again->port();
    again->KeepForThisProcess();
    const int fd = TakeInheritedRendezvous(p2);
    QVERIFY(fd >= 0);
    QVERIFY(::fcntl(fd, F_GETFD) & FD_CLOEXEC);
    int listening = 0;
    socklen_t len = sizeof listening;
    QVERIFY(::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) == 0 && listening);
    QCOMPARE(TakeInheritedRendezvous(p2), -1);
    ::close(fd);
  }

  void mismatchedWorldSizeIsNamed() {
    const std::string rv = LoopbackRendezvous();
    CommunicatorOptions o;
    o.connect_timeout_ms = 5000;
    Status s0, s1;
    std::thread t0([&] { s0 = Communicator::Create(rv, 2, 0, o).status(); });
    std::thread t1([&] { s1 = Communicator::Create(rv, 3, 1, o).status(); });
    t0.join();
    t1.join();
    QVERIFY(!s0.ok() && !s1.ok());
    QVERIFY2(s0.message().find("rank 1") != std::string::npos &&
                 s0.message().find("world size 3") != std::string::npos,
             s0.message().c_str());
    QVERIFY2(s1.message().find("world size 3") != std::string::npos, s1.message().c_str());
  }

  void mismatchedOptionsAreNamed() {
    const std::string rv = LoopbackRendezvous();
    CommunicatorOptions a, b;
    b.transport = TransportKind::kTcp;
    Status s0, s1;
    std::thread t0([&] { s0 = Communicator::Create(rv, 2, 0, a).status(); });
    std::thread t1([&] { s1 = Communicator::Create(rv, 2, 1, b).status(); });
    t0.join();
    t1.join();
    QVERIFY(!s0.ok() && !s1.ok());
    QVERIFY2(s0.message().find("transport=tcp") != std::string::npos, s0.message().c_str());
  }

  void missingRankTimesOutNamingIt() {
    CommunicatorOptions o;
    o.connect_timeout_ms = 400;
    auto start = std::chrono::steady_clock::now();
    auto c = Communicator::Create(LoopbackRendezvous(), 3, 0, o);
    QVERIFY(!c.ok());
    QCOMPARE(c.status().code(), StatusCode::kDeadlineExceeded);
    QVERIFY2(c.status().message().find("1, 2 did not join") != std::string::npos,
             c.status().message().c_str());
    QVERIFY(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
    // A rank other than 0 with nobody at the rendezvous.
    auto c1 = Communicator::Create(LoopbackRendezvous(), 2, 1, o);
    QVERIFY(!c1.ok());
    QVERIFY2(c1.status().message().find("rendezvous") != std::string::npos,
             c1.status().message().c_str());
  }

  void badArgumentsAreRejected() {
    for (const char* bad : {"nohost", "host:", ":29500", "host:99999", "host:12x", "[::1]29500"}) {
      auto c = Communicator::Create(bad, 2, 0);
      QVERIFY(!c.ok());
      QCOMPARE(c.status().code(), StatusCode::kInvalidArgument);
      QVERIFY2(c.status().message().find(bad) != std::string::npos, c.status().message().c_str());
    }
    QCOMPARE(Communicator::Create("127.0.0.1:1", 2, 2).status().code(),
             StatusCode::kInvalidArgument);
    QCOMPARE(Communicator::Create("127.0.0.1:1", 0, 0).status().code(),
             StatusCode::kInvalidArgument);
    CommunicatorOptions o;
    o.chunk_bytes = 100;
    QCOMPARE(Communicator::Create("127.0.0.1:1", 1, 0, o).status().code(),
             StatusCode::kInvalidArgument);
    auto r = RunRanks(2, {}, [](Communicator& c) {
      char b[8];
      Status s = c.Broadcast(b, 8, 5);
      OCTET_RETURN_IF_ERROR(Expect(s.code() == StatusCode::kInvalidArgument, s.ToString()));
      s = c.Send(b, 8, c.rank());
      OCTET_RETURN_IF_ERROR(Expect(s.code() == StatusCode::kInvalidArgument, s.ToString()));
      // Bad arguments caught locally do not poison.
      return Expect(!c.poisoned(), "poisoned by a bad argument");
    });
    QVERIFY2(AllOk(r), Join(r).c_str());
  }

  void sizeMismatchNamesPeerAndPoisons_data() {
    QTest::addColumn<int>("transport");
    QTest::newRow("shm") << int(TransportKind::kShm);
    QTest::newRow("tcp") << int(TransportKind::kTcp);
  }
  void sizeMismatchNamesPeerAndPoisons() {
    QFETCH(int, transport);
    CommunicatorOptions o;
    o.transport = static_cast<TransportKind>(transport);
    o.algorithm = AlgorithmKind::kOneShot;
    o.peer_timeout_ms = 2000;
    auto r = RunRanks(2, o, [&](Communicator& c) {
      std::vector<float> v(c.rank() == 0 ? 10 : 20);
      Status s = c.AllReduce(v.data(), v.size(), DType::kF32);
      OCTET_RETURN_IF_ERROR(Expect(!s.ok(), "a size mismatch went unnoticed"));
      OCTET_RETURN_IF_ERROR(Expect(s.message().find("rank " + std::to_string(1 - c.rank())) !=
                                       std::string::npos,
                                   s.message()));
      OCTET_RETURN_IF_ERROR(Expect(c.poisoned(), "not poisoned"));
      Status again = c.Barrier();
      return Expect(again.message() == c.health().message() && !again.ok(), again.ToString());
    });
    QVERIFY2(AllOk(r), Join(r).c_str());
  }

  // The table from noisy paired start-up timings (made up, deterministic
  // "noise"): a difference within the pairs' noise is a tie, ties keep the
  // band below's choice (one-shot at the smallest) up to 512 KiB and go to
  // ring from 1 MiB, a difference well outside it switches, and close calls
  // are named for a second round of timing.
  void bandTableFromNoisyPairs() {
    std::vector<size_t> sizes;
    for (size_t s = 8; s <= (size_t{16} << 20); s *= 2) sizes.push_back(s);
    const size_t kMax = std::numeric_limits<size_t>::max();
    using B = std::vector<AlgorithmBand>;
    const auto kO = AlgorithmKind::kOneShot, kR = AlgorithmKind::kRing;
    // 21 pairs per band; pair i's one-shot time is ring * ratio(s) * a
    // spread factor that alternates around 1 (median 1) with amplitude
    // noise(s): large noise makes a band's median ratio uncertain.
    auto bands = [&](const std::function<double(size_t)>& ratio,
                     const std::function<double(size_t)>& noise) {
      std::vector<BandTimings> out;
      for (size_t s : sizes) {
        BandTimings t;
        t.bytes = s;
        for (int i = 0; i < 21; ++i) {
          const double ring = 1000.0 + static_cast<double>(s) / 10;
          const double wobble = i == 0 ? 1.0 : (i % 2 ? 1 + noise(s) : 1 / (1 + noise(s)));
          t.ring_ns.push_back(ring);
          t.oneshot_ns.push_back(ring * ratio(s) * wobble);
        }
        out.push_back(t);
      }
      return out;
    };
    auto quiet = [](size_t) { return 0.02; };
    auto noisy = [](size_t) { return 0.8; };

    // Noise-free-ish pairs: the measured crossover at 16 KiB.
    auto crossover = [](size_t s) { return s <= 16384 ? 0.7 : 1.4; };
    QVERIFY(ChooseBands(bands(crossover, quiet)) == B({{16384, kO}, {kMax, kR}}));
    QVERIFY(BandsToRetime(bands(crossover, quiet)).empty());

    // Ring 8% faster everywhere: decisive with quiet pairs...
    auto ring_by_8 = [](size_t) { return 1.08; };
    QVERIFY(ChooseBands(bands(ring_by_8, quiet)) == B({{kMax, kR}}));
    // ...a tie within noise with noisy pairs: the model's one-shot stays up to
    // 512 KiB, and from 1 MiB (bandwidth-bound) a tie goes to ring,
    QVERIFY(ChooseBands(bands(ring_by_8, noisy)) == B({{512 << 10, kO}, {kMax, kR}}));
    // and every band up to 1 MiB is a close call worth timing again.
    const std::vector<size_t> again = BandsToRetime(bands(ring_by_8, noisy));
    QCOMPARE(again.size(), static_cast<size_t>(18));  // 8 B..1 MiB
    QCOMPARE(sizes[again.back()], kRetimeMaxBytes);

    // Noise above the crossover: once ring has won decisively, ties above
    // keep ring (ring for large) instead of flipping back.
    auto ring_then_tie = [](size_t s) {
      return s <= 4096 ? 0.6 : s <= 65536 ? 1.5 : s % 3 ? 0.93 : 1.07;
    };
    auto noisy_large = [](size_t s) { return s > 65536 ? 0.8 : 0.02; };
    QVERIFY(ChooseBands(bands(ring_then_tie, noisy_large)) == B({{4096, kO}, {kMax, kR}}));

    // Many runs of the same noisy timings give one table (no flip on noise):
    // one-shot and ring swap which is faster by a few % from run to run.
    for (int seed = 0; seed < 8; ++seed) {
      auto jitter = [seed](size_t s) {
        const double sign = ((s >> 3) + static_cast<size_t>(seed)) % 2 ? 1 : -1;
        return s <= 2048 ? 0.6 : 1 + sign * 0.06;  // +-6% past 2 KiB
      };
      QVERIFY2(ChooseBands(bands(jitter, noisy)) == B({{512 << 10, kO}, {kMax, kR}}),
               std::to_string(seed).c_str());
    }
    // One-shot decisively faster at a large size stays one-shot (a tie goes
    // to ring, a measured win does not).
    auto oneshot_large = [](size_t s) { return s <= 2048 ? 0.6 : 0.8; };
    QVERIFY(ChooseBands(bands(oneshot_large, quiet)) == B({{kMax, kO}}));

    // Blocks of back-to-back runs: the first run of each block (after the
    // other algorithm's block) is left out, the median of the rest counts.
    BandTimings runs{64, {900, 100, 110, 500, 300, 200}, {50, 60, 70, 1, 2, 3}};
    const BandTimings pairs = PairsFromBlocks(runs, 3);
    QVERIFY(pairs.oneshot_ns == std::vector<double>({105, 250}));
    QVERIFY(pairs.ring_ns == std::vector<double>({65, 2.5}));
    QVERIFY(PairsFromBlocks(runs, 1).oneshot_ns == runs.oneshot_ns);
    QCOMPARE(TimingSchedule(8).second, 5);
    QCOMPARE(TimingSchedule(size_t{16} << 20).second, 1);

    // The judgement itself: median ratio over pairs, and a noise estimate
    // only from 3 pairs on.
    BandTimings one{64, {1100}, {1000}};
    QVERIFY(std::fabs(JudgeBand(one).log_ratio - std::log(1.1)) < 1e-12);
    QCOMPARE(JudgeBand(one).std_error, 0.0);
    BandTimings three{64, {1100, 5000, 900}, {1000, 1000, 1000}};
    QVERIFY(std::fabs(JudgeBand(three).log_ratio - std::log(1.1)) < 1e-12);
    QVERIFY(JudgeBand(three).std_error > 0.1);
  }

  // The table from start-up timings, with made-up timings: real crossovers
  // switch the algorithm, one disturbed band or a sub-5% difference does not.
  void bandTableFromTimings() {
    std::vector<size_t> sizes;
    for (size_t s = 8; s <= (size_t{16} << 20); s *= 2) sizes.push_back(s);
    const size_t kMax = std::numeric_limits<size_t>::max();
    // ratio(s) = one-shot time / ring time at size s.
    auto table = [&](const std::function<double(size_t)>& ratio) {
      std::vector<double> os, ring;
      for (size_t s : sizes) {
        ring.push_back(1000.0 + static_cast<double>(s) / 10);
        os.push_back(ring.back() * ratio(s));
      }
      return ChooseBands(sizes, os, ring);
    };
    using B = std::vector<AlgorithmBand>;
    const auto kO = AlgorithmKind::kOneShot, kR = AlgorithmKind::kRing;
    QVERIFY(table([](size_t s) { return s <= 16384 ? 0.5 : 2.0; }) == B({{16384, kO}, {kMax, kR}}));
    // One disturbed band in a run of one-shot wins.
    QVERIFY(table([](size_t s) { return s == 4096 ? 1.5 : 0.5; }) == B({{kMax, kO}}));
    // Within 5% the table does not flip back and forth (a tie: one-shot up to
    // 512 KiB, ring from 1 MiB).
    QVERIFY(table([](size_t s) { return (s / 8) % 2 ? 1.03 : 0.97; }) ==
            B({{512 << 10, kO}, {kMax, kR}}));
    // Two real switches; sizes past 16 MiB take the 16 MiB band's choice.
    QVERIFY(table([](size_t s) {
              return s <= (1 << 20) ? 0.7 : s <= (4 << 20) ? 1.5 : 0.6;
            }) == B({{1 << 20, kO}, {4 << 20, kR}, {kMax, kO}}));
    QVERIFY(table([](size_t) { return 3.0; }) == B({{kMax, kR}}));

    // Rank 0's table survives the wire; anything malformed decodes empty.
    const B t = {{16384, kO}, {4 << 20, kR}, {kMax, kO}};
    QVERIFY(DecodeBands(EncodeBands(t)) == t);
    std::string wire = EncodeBands(t);
    QVERIFY(DecodeBands(wire.substr(0, wire.size() - 1)).empty());
    QVERIFY(DecodeBands(EncodeBands(B({{4096, kR}, {1024, kO}, {kMax, kR}}))).empty());
    QVERIFY(DecodeBands(EncodeBands(B({{4096, kR}}))).empty());
    QVERIFY(DecodeBands(EncodeBands(B({{kMax, AlgorithmKind::kAuto}}))).empty());
    QVERIFY(DecodeBands("").empty());

    // Profile lines.
    auto parse = [](const std::string& text) {
      std::istringstream f(text);
      return ParseProfileBands(f);
    };
    QVERIFY(parse("oneshot:16384 ring:4194304 oneshot:max") == t);
    QCOMPARE(ProfileLine(TransportKind::kShm, 4, t),
             std::string("shm 4 oneshot:16384 ring:4194304 oneshot:max"));
    QVERIFY(parse("12345") == B({{12345, kO}, {kMax, kR}}));
    for (const char* bad : {"", "0", "12x", "oneshot:100", "ring:0 oneshot:max",
                            "oneshot:100 ring:50 oneshot:max", "fast:max", "oneshot:max ring:max",
                            "oneshot:-1 ring:max", "oneshot:abc ring:max"}) {
      QVERIFY2(parse(bad).empty(), bad);
    }
  }

  void autoTimingLongerThanTheConnectTimeoutIsNoFailure() {
    // The connect timeout bounds each start-up exchange, not auto's timing
    // between them (8 B-16 MiB, seconds on a loaded machine): with every
    // exchange's deadline taken before the timing, the next exchange failed
    // at once with "no answer ... in time" from every rank.
    CommunicatorOptions o;
    o.transport = TransportKind::kShm;
    o.algorithm = AlgorithmKind::kAuto;
    // Every exchange takes milliseconds; the timing of 2 ranks 0.1-0.4 s quiet.
    o.connect_timeout_ms = 150;
    int64_t took_ms = 0;
    const int64_t start = NowNs();
    auto r = RunRanks(2, o, [&](Communicator& c) {
      if (c.rank() == 0) took_ms = (NowNs() - start) / 1'000'000;
      return c.algorithm_bands().empty() ? InternalError("no table") : Status::Ok();
    });
    for (const Status& s : r) QVERIFY2(s.ok(), Join(r).c_str());
    qInfo("2-rank shm start-up with auto took %lld ms", static_cast<long long>(took_ms));
  }

  void autoAgreesOnOneBandTableAndStoresIt() {
    const std::string profile =
        QDir::tempPath().toStdString() + "/octet-crossover-" + std::to_string(::getpid()) + ".txt";
    std::remove(profile.c_str());
    CommunicatorOptions o;
    o.transport = TransportKind::kShm;
    o.algorithm = AlgorithmKind::kAuto;
    o.crossover_profile = profile;
    // Which algorithm wins where is this machine's business (under ASan,
    // ring measured faster even at 8 B); what must hold is that every rank
    // maps every size to the same algorithm and the stored table is it.
    std::vector<std::vector<AlgorithmBand>> seen(2);
    std::vector<std::vector<AlgorithmKind>> chosen(2);
    auto r = RunRanks(2, o, [&](Communicator& c) {
      seen[c.rank()] = c.algorithm_bands();
      for (size_t bytes = 4; bytes <= (size_t{64} << 20); bytes *= 2) {
        chosen[c.rank()].push_back(c.AlgorithmFor(CollectiveOp::kAllReduce, bytes));
        chosen[c.rank()].push_back(c.AlgorithmFor(CollectiveOp::kAllReduce, bytes + 4));
      }
      return Status::Ok();
    });
    QVERIFY2(AllOk(r), Join(r).c_str());
    QVERIFY(seen[0] == seen[1]);
    QVERIFY(chosen[0] == chosen[1]);
    QVERIFY(!seen[0].empty());
    QCOMPARE(seen[0].back().max_bytes, std::numeric_limits<size_t>::max());
    for (size_t i = 1; i < seen[0].size(); ++i) {
      QVERIFY(seen[0][i].max_bytes > seen[0][i - 1].max_bytes);
      QVERIFY(seen[0][i].algorithm != seen[0][i - 1].algorithm);
    }
    auto text = ReadFileToString(profile);
    QVERIFY(text.ok());
    QVERIFY2(text->find("\n" + ProfileLine(TransportKind::kShm, 2, seen[0]) + "\n") !=
                 std::string::npos,
             text->c_str());
    QVERIFY2(text->find(":max\n") != std::string::npos, text->c_str());

    // A stored table is used instead of measuring again, band by band.
    QVERIFY(WriteFileAtomic(profile, "shm 2 oneshot:16384 ring:65536 oneshot:1048576 ring:max\n")
                .ok());
    r = RunRanks(2, o, [&](Communicator& c) {
      const std::vector<std::pair<size_t, AlgorithmKind>> want = {
          {8, AlgorithmKind::kOneShot},         {16384, AlgorithmKind::kOneShot},
          {16385, AlgorithmKind::kRing},        {65536, AlgorithmKind::kRing},
          {65537, AlgorithmKind::kOneShot},     {1 << 20, AlgorithmKind::kOneShot},
          {(1 << 20) + 4, AlgorithmKind::kRing}, {size_t{1} << 40, AlgorithmKind::kRing}};
      for (const auto& [bytes, algo] : want) {
        OCTET_RETURN_IF_ERROR(
            Expect(c.AlgorithmFor(CollectiveOp::kAllReduce, bytes) == algo,
                   std::to_string(bytes) + " bytes: " + c.Describe()));
      }
      // Sums stay right on both sides of every band edge.
      for (size_t count : {size_t{4096}, size_t{4097}, size_t{16384}, size_t{16385}}) {
        std::vector<float> v(count);
        for (size_t i = 0; i < count; ++i) v[i] = static_cast<float>((c.rank() + 1) * (i % 7));
        OCTET_RETURN_IF_ERROR(c.AllReduce(v.data(), count, DType::kF32));
        for (size_t i = 0; i < count; ++i) {
          OCTET_RETURN_IF_ERROR(Expect(v[i] == static_cast<float>(3 * (i % 7)),
                                       "wrong sum at " + std::to_string(i)));
        }
      }
      return Expect(c.oneshot_max_bytes() == 16384, c.Describe());
    });
    QVERIFY2(AllOk(r), Join(r).c_str());

    // The one-crossover format of earlier profiles still reads.
    QVERIFY(WriteFileAtomic(profile, "shm 2 12345\n").ok());
    r = RunRanks(2, o, [&](Communicator& c) {
      OCTET_RETURN_IF_ERROR(Expect(c.oneshot_max_bytes() == 12345, c.Describe()));
      return Expect(c.AlgorithmFor(CollectiveOp::kAllReduce, 12346) == AlgorithmKind::kRing,
                    c.Describe());
    });
    QVERIFY2(AllOk(r), Join(r).c_str());
    std::remove(profile.c_str());
  }

  // Only rank 0's profile counts: another rank's different (or missing)
  // profile cannot make the ranks disagree on a path.
  void autoTakesRankZerosTable() {
    const std::string dir = QDir::tempPath().toStdString() + "/octet-bands-" +
                            std::to_string(::getpid());
    QVERIFY(MakeDirs(dir).ok());
    QVERIFY(WriteFileAtomic(dir + "/p0", "shm 2 ring:4096 oneshot:max\n").ok());
    QVERIFY(WriteFileAtomic(dir + "/p1", "shm 2 oneshot:max\n").ok());
    std::vector<std::vector<AlgorithmBand>> seen(2);
    std::vector<std::string> errors(2);
    std::vector<std::thread> threads;
    const std::string addr = "127.0.0.1:" + std::to_string(FreePort());
    for (int rank = 0; rank < 2; ++rank) {
      threads.emplace_back([&, rank] {
        CommunicatorOptions o;
        o.transport = TransportKind::kShm;
        o.crossover_profile = dir + "/p" + std::to_string(rank);
        auto c = Communicator::Create(addr, 2, rank, o);
        if (!c.ok()) {
          errors[rank] = c.status().ToString();
          return;
        }
        seen[rank] = (*c)->algorithm_bands();
      });
    }
    for (auto& t : threads) t.join();
    QVERIFY2(errors[0].empty() && errors[1].empty(), (errors[0] + errors[1]).c_str());
    const std::vector<AlgorithmBand> want = {{4096, AlgorithmKind::kRing},
                                             {std::numeric_limits<size_t>::max(),
                                              AlgorithmKind::kOneShot}};
    QVERIFY(seen[0] == want);
    QVERIFY(seen[1] == want);
    std::remove((dir + "/p0").c_str());
    std::remove((dir + "/p1").c_str());
    ::rmdir(dir.c_str());
  }
};

QTEST_APPLESS_MAIN(TestCommunicator)
#include "test_communicator.moc"
