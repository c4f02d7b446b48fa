// The backend registry (octet/kernels/backends.h) and `--backend` as a user
// meets it: "cuda" is listed in a CUDA build with whether it runs here and
// why not; asking for it where it cannot run is one line saying why (the
// library call and `octet generate`, which exits non-zero); "auto" still
// works. On a machine with a usable GPU the same test checks that "cuda" and
// "auto" give the CUDA backend instead. Runs (and can fail) on every machine.
#include <QtTest>
#include <string>

#include "octet/kernels/backends.h"
#include "octet_test.h"

#if OCTET_HAVE_CUDA
#include "octet/kernels/cuda/cuda_device.h"
#endif

using namespace octet;
using namespace octet::kernels;
using octet::test::RunProgram;

namespace {

// Whether this build has CUDA and device 0 is usable here, and the probe's line.
bool CudaUsable(std::string* why) {
#if OCTET_HAVE_CUDA
  const cuda::CudaProbeResult p = cuda::CudaProbe();
  *why = p.why;
  return p.usable;
#else
  *why = "not in this build";
  return false;
#endif
}

}  // namespace

class TestBackendRegistry : public QObject {
  Q_OBJECT
 private slots:
  void probeListsCudaWithItsReason() {
    std::string why;
    const bool usable = CudaUsable(&why);
    const auto all = ProbeAllBackends();
    bool found = false;
    for (const BackendInfo& b : all) {
      if (b.name != "cuda") continue;
      found = true;
      QCOMPARE(b.available, usable);
      QVERIFY2(b.description.find(why) != std::string::npos, b.description.c_str());
    }
    QCOMPARE(found, bool(OCTET_HAVE_CUDA));
    // The CPU backends are all there too.
    for (const BackendInfo& c : ProbeBackends()) {
      bool listed = false;
      for (const BackendInfo& b : all) listed |= b.name == c.name;
      QVERIFY2(listed, c.name.c_str());
    }
    QVERIFY(BackendNamesForHelp().find("auto") == 0);
  }

  // "auto" makes the last backend of the list that runs here and that the
  // list lets auto take (avx512-rows only on AMD); every other name makes
  // itself where it runs.
  void autoTakesTheLastBackendTheListAllows() {
    std::string want = "scalar";
    for (const BackendInfo& b : ProbeBackends()) {
      if (b.available && b.auto_choice) want = b.name;
      if (!b.available) continue;
      auto named = CreateBackend(b.name, {.threads = 1});
      QVERIFY2(named.ok(), b.name.c_str());
      QCOMPARE(std::string((*named)->name()), b.name);
    }
    auto a = CreateBackend("auto", {.threads = 1});
    QVERIFY2(a.ok(), a.status().ToString().c_str());
    QCOMPARE(std::string((*a)->name()), want);
  }

  void cudaWhereItCannotRunIsOneLine() {
    std::string why;
    auto b = CreateAnyBackend("cuda");
    if (CudaUsable(&why)) {
      QVERIFY2(b.ok(), b.status().ToString().c_str());
      QCOMPARE((*b)->name(), std::string_view("cuda"));
      QVERIFY((*b)->memory_kind() == MemoryKind::kDevice);
      return;
    }
    QVERIFY(!b.ok());
    QCOMPARE(b.status().code(), StatusCode::kUnavailable);
    const std::string msg = b.status().message();
    QVERIFY2(msg.find("cuda") != std::string::npos, msg.c_str());
    QVERIFY2(msg.find('\n') == std::string::npos, msg.c_str());
    if (OCTET_HAVE_CUDA) QVERIFY2(msg.find(why) != std::string::npos, msg.c_str());
  }

  void autoAlwaysGivesABackend() {
    std::string why;
    auto b = CreateAnyBackend("auto", {.threads = 1});
    QVERIFY2(b.ok(), b.status().ToString().c_str());
    QCOMPARE((*b)->name() == "cuda", CudaUsable(&why));
  }

  void unknownNameListsEveryBackend() {
    auto b = CreateAnyBackend("tpu");
    QVERIFY(!b.ok());
    QCOMPARE(b.status().code(), StatusCode::kInvalidArgument);
    if (OCTET_HAVE_CUDA) {
      QVERIFY2(b.status().message().find("cuda") != std::string::npos,
               b.status().message().c_str());
    }
    QVERIFY2(b.status().message().find("scalar") != std::string::npos,
             b.status().message().c_str());
  }

  // `octet generate --backend cuda` without a usable GPU: non-zero exit and
  // one line that says why; `--backend auto` generates.
  void cliBackendCuda() {
    OCTET_REQUIRE_FIXTURES();
    const std::string dir = test::FixturesDir() + "/qwen3-tiny";
    std::string why;
    const bool usable = CudaUsable(&why);
    auto r =
        RunProgram({"octet", "generate", "--model", dir, "--prompt-ids", "1,2,3", "--max-tokens",
                    "2", "--ignore-eos", "--threads", "1", "--backend", "cuda"});
    if (usable) {
      QVERIFY2(r.exit_code == 0, r.output.c_str());
    } else {
      QVERIFY2(r.exit_code != 0, r.output.c_str());
      // The reason, on one line naming the backend.
      size_t lines = 0, pos = 0;
      std::string reason;
      while (pos < r.output.size()) {
        const size_t end = std::min(r.output.find('\n', pos), r.output.size());
        const std::string line = r.output.substr(pos, end - pos);
        if (line.find("cuda") != std::string::npos) {
          ++lines;
          reason = line;
        }
        pos = end + 1;
      }
      QVERIFY2(lines == 1, r.output.c_str());
      if (OCTET_HAVE_CUDA) QVERIFY2(reason.find(why) != std::string::npos, r.output.c_str());
    }
    auto a =
        RunProgram({"octet", "generate", "--model", dir, "--prompt-ids", "1,2,3", "--max-tokens",
                    "2", "--ignore-eos", "--threads", "1", "--backend", "auto"});
    QVERIFY2(a.exit_code == 0, a.output.c_str());
  }
};

QTEST_GUILESS_MAIN(TestBackendRegistry)
#include "test_backend_registry.moc"
