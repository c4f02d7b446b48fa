// Fault: the disk fills while a training checkpoint is written. On a small
// tmpfs (mounting needs root: the program skips with 77 without it) a first
// checkpoint fits and a second does not. The failed save must say so clearly
// (which checkpoint, that the previous one is kept, the system's reason),
// leave no temporary folder holding the space, and leave the previous
// checkpoint whole: `latest` still names it and it loads back bit-exact. The
// process goes on: once space is freed, the next save succeeds.
#include <sys/mount.h>

#include <QTemporaryDir>
#include <QtTest>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "octet/kernels/backend.h"
#include "octet/trainer/checkpoint.h"
#include "octet/trainer/gpt_model.h"
#include "octet/trainer/optimizer.h"
#include "octet_test.h"

using namespace octet;
using namespace octet::trainer;
namespace fs = std::filesystem;

namespace {

struct Run {
  std::unique_ptr<kernels::KernelBackend> backend;
  std::unique_ptr<GptModel> model;
  std::unique_ptr<Optimizer> optimizer;
};

Run MakeRun(uint64_t seed) {
  Run r;
  auto be = kernels::CreateBackend("scalar", {.threads = 1});
  if (!be.ok()) qFatal("%s", be.status().ToString().c_str());
  r.backend = std::move(*be);
  GptConfig c{.n_layer = 2,
              .n_head = 2,
              .n_kv_head = 2,
              .n_embd = 32,
              .vocab_size = 48,
              .sequence_len = 16};
  auto m = GptModel::Create(c, r.backend.get());
  if (!m.ok()) qFatal("%s", m.status().ToString().c_str());
  r.model = std::move(*m);
  r.model->InitWeights(seed);
  OptimizerConfig oc;
  oc.kind = "adamw";
  auto o = Optimizer::Create(oc, r.model.get());
  if (!o.ok()) qFatal("%s", o.status().ToString().c_str());
  r.optimizer = std::move(*o);
  return r;
}

int64_t TreeBytes(const std::string& dir) {
  int64_t n = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) n += static_cast<int64_t>(e.file_size());
  }
  return n;
}

std::vector<std::string> Temporaries(const std::string& root) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(root)) {
    const std::string n = e.path().filename().string();
    if (n.rfind(".step-", 0) == 0) out.push_back(n);
  }
  return out;
}

}  // namespace

class TestFaultDiskFull : public QObject {
  Q_OBJECT

  QTemporaryDir tmp_;
  std::string mount_;

 private slots:
  void cleanupTestCase() {
    if (!mount_.empty()) ::umount2(mount_.c_str(), MNT_DETACH);
  }

  void checkpointOnAFullDisk() {
    // The size of one checkpoint, measured on the ordinary temporary folder.
    Run run = MakeRun(7);
    CheckpointState state;
    state.step = 1;
    state.settings_json = R"({"lr": 0.001})";
    const std::string probe = tmp_.path().toStdString() + "/probe";
    QVERIFY(SaveCheckpoint(probe, *run.model, *run.optimizer, state, "", 2).ok());
    const int64_t one = TreeBytes(probe + "/checkpoints");
    QVERIFY(one > 64 * 1024);

    // A tmpfs with room for two and a half checkpoints, one of them taken by
    // another file (what the user deletes to make room).
    mount_ = tmp_.path().toStdString() + "/small-disk";
    QVERIFY(fs::create_directories(mount_));
    const std::string opts = "size=" + std::to_string(one * 5 / 2) + ",mode=0755";
    if (::mount("tmpfs", mount_.c_str(), "tmpfs", 0, opts.c_str()) != 0) {
      const std::string why =
          std::string("cannot mount a tmpfs (needs root): ") + std::strerror(errno);
      mount_.clear();
      OCTET_SKIP_PREMISE(why.c_str());
    }
    const std::string out = mount_ + "/run";
    const std::string ballast = mount_ + "/other-file";
    {
      QFile f(QString::fromStdString(ballast));
      QVERIFY(f.open(QIODevice::WriteOnly));
      QCOMPARE(f.write(QByteArray(static_cast<int>(one), 'x')), qint64(one));
    }
    QVERIFY(SaveCheckpoint(out, *run.model, *run.optimizer, state, "", 2).ok());
    const std::vector<float> saved(run.model->params().begin(), run.model->params().end());

    // Training goes on; the next checkpoint does not fit.
    run.model->InitWeights(8);
    state.step = 2;
    const Status full = SaveCheckpoint(out, *run.model, *run.optimizer, state, "", 2);
    QVERIFY(!full.ok());
    const std::string msg = full.ToString();
    QVERIFY2(msg.find("step-000002") != std::string::npos, msg.c_str());
    QVERIFY2(msg.find("previous one is kept") != std::string::npos, msg.c_str());
    QVERIFY2(msg.find("No space left on device") != std::string::npos, msg.c_str());
    // No temporary folder is left holding the space.
    const auto temps = Temporaries(out + "/checkpoints");
    QVERIFY2(temps.empty(), temps.empty() ? "" : temps.front().c_str());

    // The previous checkpoint is whole and loads back bit-exact.
    auto latest = LatestCheckpoint(out);
    QVERIFY2(latest.ok(), latest.status().ToString().c_str());
    QVERIFY2(latest->find("step-000001") != std::string::npos, latest->c_str());
    Run back = MakeRun(99);
    CheckpointState loaded;
    const Status ls = LoadCheckpoint(*latest, *back.model, *back.optimizer, &loaded);
    QVERIFY2(ls.ok(), ls.ToString().c_str());
    QCOMPARE(loaded.step, int64_t(1));
    QCOMPARE(back.model->params().size(), saved.size());
    QVERIFY(std::memcmp(back.model->params().data(), saved.data(), saved.size() * sizeof(float)) ==
            0);

    // Space freed, the next save succeeds (and replaces step 1: keep = 1).
    fs::remove(ballast);
    const Status again = SaveCheckpoint(out, *run.model, *run.optimizer, state, "", 1);
    QVERIFY2(again.ok(), again.ToString().c_str());
    auto now = LatestCheckpoint(out);
    QVERIFY(now.ok() && now->find("step-000002") != std::string::npos);
  }
};

QTEST_APPLESS_MAIN(TestFaultDiskFull)
#include "test_fault_disk_full.moc"
