// The load-time memory check (LoadOptions::check_memory): a model whose share
// of the weights does not fit in MemAvailable is refused before anything is
// paged in, with an error that names both figures and the way out; a share
// that fits loads; the override loads anyway; a TP rank counts only its
// share; an unreadable meminfo is no reason to refuse. MemAvailable comes from
// a meminfo file written here (the same format as /proc/meminfo). A GPU's
// budget: its free memory, or on unified memory (GB10) the larger of that and
// MemAvailable, the figure named (the choice, which the CUDA backend makes
// from the driver's figures; tests/gpu/test_cuda_backend reads a real one).
#include <QTemporaryDir>
#include <QtTest>
#include <string>

#include "octet/base/file_util.h"
#include "octet/engine/model.h"
#include "octet/kernels/backend.h"
#include "octet_test.h"

using namespace octet;
using namespace octet::engine;

namespace {

// llama3-tiny/model.safetensors: its tensors (the file less its 8 + 2,136-byte header).
constexpr int64_t kCheckpointBytes = 476416;

}  // namespace

class TestLoadMemoryCheck : public QObject {
  Q_OBJECT

  QTemporaryDir tmp_;
  std::string model_;

  // A meminfo file with `available_kib` of MemAvailable.
  std::string MemInfo(int64_t available_kib) {
    const std::string path =
        tmp_.path().toStdString() + "/meminfo-" + std::to_string(available_kib);
    const std::string text =
        "MemTotal:       16318284 kB\nMemFree:          123456 kB\n"
        "MemAvailable:   " +
        std::to_string(available_kib) + " kB\n";
    if (!WriteFileAtomic(path, text).ok()) qFatal("cannot write %s", path.c_str());
    return path;
  }

  LoadOptions Options(const std::string& meminfo) {
    LoadOptions o;
    o.backend = "scalar";
    o.threads = 1;
    o.meminfo_path = meminfo;
    return o;
  }

 private slots:
  void initTestCase() {
    OCTET_REQUIRE_FIXTURES();
    model_ = test::FixturesDir() + "/llama3-tiny";
  }

  void refusesAModelThatDoesNotFit() {
    // 100 KiB available, a 465 KiB checkpoint.
    auto m = Model::Load(model_, Options(MemInfo(100)));
    QVERIFY(!m.ok());
    QCOMPARE(m.status().code(), StatusCode::kResourceExhausted);
    const std::string msg = m.status().message();
    QVERIFY2(msg.find("MemAvailable is 100 KiB") != std::string::npos, msg.c_str());
    QVERIFY2(msg.find("needs about 465 KiB") != std::string::npos, msg.c_str());
    QVERIFY2(msg.find("--ignore-memory-check") != std::string::npos, msg.c_str());
    QVERIFY2(msg.find(model_) != std::string::npos, msg.c_str());
  }

  void loadsAModelThatFits() {
    auto m = Model::Load(model_, Options(MemInfo(64 * 1024)));
    QVERIFY2(m.ok(), m.status().ToString().c_str());
    QCOMPARE((*m)->WeightBytes(), kCheckpointBytes);
  }

  void theOverrideLoadsAnyway() {
    LoadOptions o = Options(MemInfo(100));
    o.check_memory = false;
    auto m = Model::Load(model_, o);
    QVERIFY2(m.ok(), m.status().ToString().c_str());
  }

  void aTpRankCountsItsShare() {
    // 300 KiB available: the whole checkpoint does not fit, a half does. The
    // check uses tp_ranks alone (the TP runtime sets it with the shard), so a
    // whole model loaded with tp_ranks = 2 passes it here.
    LoadOptions o = Options(MemInfo(300));
    auto whole = Model::Load(model_, o);
    QVERIFY(!whole.ok());
    QVERIFY2(whole.status().message().find("on this machine") != std::string::npos,
             whole.status().ToString().c_str());
    o.tp_ranks = 2;
    auto half = Model::Load(model_, o);
    QVERIFY2(half.ok(), half.status().ToString().c_str());
    // And a third of it on 100 KiB does not.
    o = Options(MemInfo(100));
    o.tp_ranks = 3;
    auto third = Model::Load(model_, o);
    QVERIFY(!third.ok());
    QVERIFY2(third.status().message().find("needs about 155 KiB") != std::string::npos,
             third.status().ToString().c_str());
    QVERIFY2(third.status().message().find("1/3 share") != std::string::npos,
             third.status().ToString().c_str());
    QVERIFY2(third.status().message().find("on this rank") != std::string::npos,
             third.status().ToString().c_str());
  }

  void aHostBackendsBudgetIsMemAvailable() {
    auto be = kernels::CreateBackend("scalar", {1});
    QVERIFY(be.ok());
    auto budget = (*be)->AvailableMemory(MemInfo(2048));
    QVERIFY2(budget.ok(), budget.status().ToString().c_str());
    QCOMPARE(budget->bytes, int64_t{2048} * 1024);
    QCOMPARE(budget->source, std::string("MemAvailable"));
    QVERIFY(!(*be)->AvailableMemory(tmp_.path().toStdString() + "/missing").ok());
  }

  void aDeviceBudgetSaysWhichFigure() {
    constexpr int64_t kGiB = int64_t{1} << 30;
    octet::MemInfo host;
    host.total_bytes = 128 * kGiB;
    host.available_bytes = 110 * kGiB;
    // A discrete GPU: what its driver says is free, whatever the host has.
    const kernels::MemoryBudget discrete = kernels::DeviceMemoryBudget(20 * kGiB, false, host);
    QCOMPARE(discrete.bytes, 20 * kGiB);
    QVERIFY2(discrete.source.find("cudaMemGetInfo") != std::string::npos, discrete.source.c_str());
    // GB10: the driver's 20 GiB leaves out the page cache; MemAvailable counts.
    const kernels::MemoryBudget spark = kernels::DeviceMemoryBudget(20 * kGiB, true, host);
    QCOMPARE(spark.bytes, 110 * kGiB);
    QVERIFY2(spark.source.rfind("MemAvailable", 0) == 0 &&
                 spark.source.find("20480 MiB") != std::string::npos,
             spark.source.c_str());
    // Where the driver's figure is the larger, it is the budget, both named.
    host.available_bytes = 10 * kGiB;
    const kernels::MemoryBudget driver = kernels::DeviceMemoryBudget(20 * kGiB, true, host);
    QCOMPARE(driver.bytes, 20 * kGiB);
    QVERIFY2(driver.source.find("cudaMemGetInfo") != std::string::npos &&
                 driver.source.find("MemAvailable 10240 MiB") != std::string::npos,
             driver.source.c_str());
    // No meminfo: the driver's figure alone.
    const kernels::MemoryBudget alone =
        kernels::DeviceMemoryBudget(20 * kGiB, true, NotFoundError("no /proc/meminfo"));
    QCOMPARE(alone.bytes, 20 * kGiB);
    QVERIFY2(alone.source.find("cudaMemGetInfo") != std::string::npos, alone.source.c_str());
  }

  void noMemInfoNoCheck() {
    auto m = Model::Load(model_, Options(tmp_.path().toStdString() + "/missing"));
    QVERIFY2(m.ok(), m.status().ToString().c_str());
  }
};

QTEST_APPLESS_MAIN(TestLoadMemoryCheck)
#include "test_load_memory_check.moc"
