// Fault: the disk fills while a training checkpoint is written. On a small
// tmpfs (mounting needs root: the program skips with 77 without it) a first
// checkpoint fits and a second does not. The failed save must say so clearly
// (which checkpoint, that the previous one is kept, the system's reason),
// leave no temporary folder holding the space, and leave the previous
// checkpoint whole: `latest` still names it and it loads back bit-exact. The
// process goes on: once space is freed, the next save succeeds.
//
// Fault: the disk of `octet bench`'s run store fills during a run: the
// results are kept in a side file and the user is told where
// (benchRunOnAFullDisk). The agent's state disk is full when it must store
// its node id: it stays up and says so (agentStateOnAFullDisk).
#include <fcntl.h>
#include <sys/mount.h>

#include <QTemporaryDir>
#include <QtTest>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "octet/base/file_util.h"
#include "octet/base/json.h"
#include "octet/base/subprocess.h"
#include "octet/kernels/backend.h"
#include "octet/trainer/checkpoint.h"
#include "octet/trainer/gpt_model.h"
#include "octet/trainer/optimizer.h"
#include "octet_test.h"
#include "serving_test_util.h"

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
  std::vector<std::string> mounts_;

  // A tmpfs of `bytes` at `dir`; "" or why not (mounting needs root).
  std::string MountTmpfs(const std::string& dir, int64_t bytes) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    const std::string opts = "size=" + std::to_string(bytes) + ",mode=0755";
    if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, opts.c_str()) != 0)
      return std::string("cannot mount a tmpfs (needs root): ") + std::strerror(errno);
    mounts_.push_back(dir);
    return "";
  }

 private slots:
  void cleanupTestCase() {
    if (!mount_.empty()) ::umount2(mount_.c_str(), MNT_DETACH);
    for (const auto& m : mounts_) ::umount2(m.c_str(), MNT_DETACH);
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

  // Fault: the disk of `octet bench`'s run store fills while the benchmark
  // runs. The store was checked before running (it opened); the results it
  // then refuses are kept in a side file (beside the store, else, that disk
  // being full, in $TMPDIR), the user is told where, and the side file
  // imports into the store once there is room. The runs stored before are
  // intact.
  void benchRunOnAFullDisk() {
    const std::string disk = tmp_.path().toStdString() + "/bench-disk";
    if (std::string why = MountTmpfs(disk, 4 << 20); !why.empty()) OCTET_SKIP_PREMISE(why.c_str());
    const std::string model = tmp_.path().toStdString() + "/tiny";
    // Large enough that the measured run lasts seconds: the disk must fill
    // while it runs, and the default tiny shape (~50,000 tokens a second)
    // let the whole run finish inside the 50 ms the test waits for the run
    // row's commit, so it sometimes stored its results before the disk was
    // full (seen in a CI-like run).
    engine::RandomModelShape shape;
    shape.vocab_size = 256;
    shape.hidden_size = 512;
    shape.intermediate_size = 1536;
    shape.num_layers = 4;
    shape.num_heads = 8;
    shape.num_kv_heads = 4;
    shape.head_dim = 64;
    shape.max_position_embeddings = 1024;
    QVERIFY(engine::WriteRandomCheckpoint(shape, model).ok());
    test::ServerProcess server;
    Status st = server.Start({"--model", model, "--context", "512", "--grpc-port", "off",
                              "--threads", "1", "--slots", "2"});
    QVERIFY2(st.ok(), st.ToString().c_str());
    const std::string url = "http://127.0.0.1:" + std::to_string(server.port());
    const std::string db = disk + "/runs.sqlite";
    auto first = test::RunProgram({"octet", "bench", "--url", url, "--pp", "8", "--tg", "4",
                                   "--runs", "1", "--no-warmup", "--db", db, "--label", "before"},
                                  120'000);
    QVERIFY2(first.exit_code == 0, first.output.c_str());

    // The second run: the disk fills once the run is under way (its row is
    // in the store's write-ahead log), long before its results are written.
    const std::string side_dir = tmp_.path().toStdString() + "/side";
    QVERIFY(fs::create_directories(side_dir));
    auto out = std::make_shared<std::string>();
    auto mu = std::make_shared<std::mutex>();
    SpawnOptions so;
    so.argv = {
        test::BinDir() + "/octet", "bench", "--url",  url, "--pp", "32", "--tg",    "200",
        "--concurrency",           "1,2",   "--runs", "6", "--db", db,   "--label", "during"};
    so.env = {"TMPDIR=" + side_dir};
    so.on_output = [out, mu](std::string_view chunk) {
      std::lock_guard<std::mutex> lock(*mu);
      out->append(chunk);
    };
    auto bench = Subprocess::Spawn(so);
    QVERIFY(bench.ok());
    const std::string wal = db + "-wal";
    const Deadline begun = Deadline::AfterMs(60'000);
    std::error_code ec;
    while (!begun.expired() && !(fs::exists(wal, ec) && fs::file_size(wal, ec) > 0) &&
           !(*bench)->Poll())
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    QVERIFY2(!begun.expired() && fs::file_size(wal, ec) > 0, out->c_str());
    // The log grows while the run's row is written: wait until that
    // transaction is over (the log still for 50 ms), or the disk could fill
    // under its COMMIT, before the run has begun at all.
    for (auto size = fs::file_size(wal, ec);;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      const auto now = fs::file_size(wal, ec);
      if (now == size || begun.expired() || (*bench)->Poll()) break;
      size = now;
    }
    // Fill every byte that is left.
    const std::string ballast = disk + "/ballast";
    {
      const int fd = ::open(ballast.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
      QVERIFY(fd >= 0);
      const std::string block(64 * 1024, 'x');
      int64_t wrote = 0;
      for (;;) {
        const ssize_t n = ::write(fd, block.data(), block.size());
        if (n > 0) wrote += n;
        if (n < static_cast<ssize_t>(block.size())) break;
      }
      ::close(fd);
      QVERIFY(wrote > 0);
    }
    auto ended = (*bench)->Wait(Deadline::AfterMs(120'000));
    QVERIFY(ended.ok());
    const std::string text = [&] {
      std::lock_guard<std::mutex> lock(*mu);
      return *out;
    }();
    QVERIFY2(ended->exited && ended->code == 1, text.c_str());
    for (size_t p = text.find("octet bench:"); p != std::string::npos;
         p = text.find("octet bench:", p + 1))
      qInfo("%s", text.substr(p, text.find('\n', p) - p).c_str());
    // The table was printed, and the user is told what failed and where the results are.
    QVERIFY2(text.find("pp32 tg200 (c2)") != std::string::npos, text.c_str());
    QVERIFY2(text.find("octet bench: error: the run store " + db + " refused the results") !=
                 std::string::npos,
             text.c_str());
    QVERIFY2(text.find("full") != std::string::npos, text.c_str());
    const std::string key = "octet bench: the results are kept in ";
    const size_t at = text.find(key);
    QVERIFY2(at != std::string::npos, text.c_str());
    const std::string side =
        text.substr(at + key.size(), text.find(' ', at + key.size()) - at - key.size());
    QVERIFY2(side.rfind(side_dir + "/", 0) == 0, side.c_str());  // the store's disk is full
    auto doc = ReadFileToString(side);
    QVERIFY2(doc.ok(), side.c_str());
    const auto j = nlohmann::json::parse(*doc, nullptr, false);
    QVERIFY2(j.is_object() && j["benchmarks"].size() == 2, doc->c_str());
    for (const auto& b : j["benchmarks"]) {
      QCOMPARE(b["failed_requests"].get<int>(), 0);
      QCOMPARE(b["response_size"].get<int>(), 200);
    }

    // The earlier run is intact; with room again the side file imports.
    fs::remove(ballast);
    auto list = test::RunProgram({"octet", "bench", "list", "--db", db, "--json"});
    QVERIFY2(list.exit_code == 0, list.output.c_str());
    auto runs = nlohmann::json::parse(list.output, nullptr, false);
    QVERIFY2(runs.is_array(), list.output.c_str());
    bool before_intact = false;
    for (const auto& r : runs) {
      if (r["label"] == "before")
        before_intact = r["state"] == "complete" && r["results"].get<int>() == 1;
    }
    QVERIFY2(before_intact, list.output.c_str());
    auto imported = test::RunProgram({"octet", "bench", "import", "--db", db, side, "--json"});
    QVERIFY2(imported.exit_code == 0, imported.output.c_str());
    list = test::RunProgram({"octet", "bench", "list", "--db", db, "--json"});
    runs = nlohmann::json::parse(list.output, nullptr, false);
    const int64_t id = nlohmann::json::parse(imported.output, nullptr, false)["id"].get<int64_t>();
    bool found = false;
    for (const auto& r : runs) {
      if (r["id"].get<int64_t>() == id) found = r["results"].get<int>() == 2;
    }
    QVERIFY2(found, list.output.c_str());
  }

  // Fault: the agent's state disk is full when it must store a new node id (a
  // copied image, its machine id changed). The agent comes up and serves
  // with the new id, says in its log that the id could not be saved and why,
  // and the stored record is left whole (no half-written file, no temporary).
  void agentStateOnAFullDisk() {
    const std::string disk = tmp_.path().toStdString() + "/agent-disk";
    if (std::string why = MountTmpfs(disk, 256 << 10); !why.empty())
      OCTET_SKIP_PREMISE(why.c_str());
    const std::string d = tmp_.path().toStdString() + "/agent";
    QVERIFY(fs::create_directories(d));
    QVERIFY(WriteFileAtomic(d + "/token", "disk-full-agent-token-0123456789", 0600).ok());
    QVERIFY(WriteFileAtomic(d + "/machine-id", "machine-a\n").ok());
    const std::string state = disk + "/state";
    auto start_agent = [&](std::shared_ptr<std::string> log) {
      fs::remove(d + "/address");
      SpawnOptions so;
      so.argv = {test::BinDir() + "/octet-agent",
                 "--listen",
                 "127.0.0.1:0",
                 "--token-file",
                 d + "/token",
                 "--state-dir",
                 state,
                 "--machine-id-file",
                 d + "/machine-id",
                 "--no-discovery",
                 "--port-file",
                 d + "/address"};
      auto mu = std::make_shared<std::mutex>();
      so.on_output = [log, mu](std::string_view chunk) {
        std::lock_guard<std::mutex> lock(*mu);
        log->append(chunk);
      };
      return Subprocess::Spawn(so);
    };
    auto address = [&]() -> std::string {
      for (const Deadline dl = Deadline::AfterMs(20'000); !dl.expired();) {
        auto a = ReadFileToString(d + "/address");
        if (a.ok() && !a->empty() && a->back() == '\n') return a->substr(0, a->size() - 1);
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      return "";
    };
    auto node_id_of = [&](const std::string& addr, std::string* output) -> std::string {
      auto r = test::RunProgram(
          {"octet", "cluster", "status", "--agents", addr, "--token-file", d + "/token", "--json"},
          30'000, {"OCTET_CONFIG_DIR=" + d + "/config", "HOME=" + d});
      *output = r.output;
      if (r.exit_code != 0) return "";
      auto j = nlohmann::json::parse(r.output.substr(r.output.find('{')), nullptr, false);
      if (!j.is_object()) return "";
      return j["nodes"][0]["facts"].value("node_id", "");
    };

    // First start: the id is stored.
    auto log1 = std::make_shared<std::string>();
    auto a1 = start_agent(log1);
    QVERIFY(a1.ok());
    std::string out;
    const std::string id1 = node_id_of(address(), &out);
    QVERIFY2(!id1.empty(), (out + *log1).c_str());
    (*a1)->Kill(SIGTERM);
    QVERIFY((*a1)->Wait(Deadline::AfterMs(10'000)).ok());
    auto stored = ReadFileToString(state + "/node_id");
    QVERIFY(stored.ok() && stored->find(id1) != std::string::npos);

    // The disk fills; the image moves to another machine.
    {
      const int fd = ::open((disk + "/ballast").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
      QVERIFY(fd >= 0);
      const std::string block(4096, 'x');
      while (::write(fd, block.data(), block.size()) == static_cast<ssize_t>(block.size())) {
      }
      ::close(fd);
    }
    QVERIFY(WriteFileAtomic(d + "/machine-id", "machine-b\n").ok());
    auto log2 = std::make_shared<std::string>();
    auto a2 = start_agent(log2);
    QVERIFY(a2.ok());
    const std::string addr2 = address();
    QVERIFY2(!addr2.empty(), log2->c_str());
    const std::string id2 = node_id_of(addr2, &out);
    QVERIFY2(!id2.empty() && id2 != id1, (out + *log2).c_str());
    QVERIFY2(log2->find("node id " + id2 + " could not be saved") != std::string::npos,
             log2->c_str());
    QVERIFY2(log2->find("No space left on device") != std::string::npos, log2->c_str());
    // The stored record is whole, and no temporary holds the space.
    QCOMPARE(*ReadFileToString(state + "/node_id"), *stored);
    for (const auto& e : fs::directory_iterator(state))
      QVERIFY2(e.path().filename() == "node_id", e.path().c_str());
    // Still alive a moment later.
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    QCOMPARE(node_id_of(addr2, &out), id2);
    QVERIFY(!(*a2)->Poll());
    (*a2)->Kill(SIGTERM);
    QVERIFY((*a2)->Wait(Deadline::AfterMs(10'000)).ok());
  }
};

QTEST_APPLESS_MAIN(TestFaultDiskFull)
#include "test_fault_disk_full.moc"
