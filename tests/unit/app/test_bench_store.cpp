// The benchmark run store and the llama-benchy arithmetic (octet/app/bench_store.h,
// bench_runner.h): what the CLI and the workbench read back is what was stored;
// a run whose process dies keeps its committed results and is marked interrupted;
// a file that is not a run store (garbage, another SQLite file, a newer schema)
// is refused with an error naming it, and left unchanged; a version-1 file is
// migrated; the metrics follow llama-benchy's definitions on hand-made times;
// comparisons give the deltas; llama-benchy reports import.
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <QDir>
#include <QFile>
#include <QTemporaryDir>
#include <QtTest>
#include <atomic>
#include <thread>

#include "octet/app/bench_runner.h"
#include "octet/app/bench_store.h"
#include "octet/base/file_util.h"
#include "octet_test.h"

using namespace octet;
using namespace octet::app;

namespace {

BenchResult MakeResult(int64_t pp, int64_t c, std::vector<double> tg) {
  BenchResult r;
  r.prompt_size = pp;
  r.response_size = 64;
  r.concurrency = c;
  r.runs = static_cast<int64_t>(tg.size());
  r.test = r.Name();
  r.tg_throughput = MetricStats::Of(tg);
  r.pp_throughput = MetricStats::Of({1000.0 * c, 1100.0 * c});
  r.e2e_ttft = MetricStats::Of({50, 70});
  return r;
}

BenchRun MakeRun(const std::string& label) {
  BenchRun run;
  run.label = label;
  run.url = "http://127.0.0.1:8000";
  run.tool = "octet bench test";
  run.latency_ms = 0.25;
  run.prompt_mode = "token-ids";
  run.topology.nodes = 2;
  run.topology.tp = 2;
  run.topology.transport = "tcp";
  run.topology.algorithm = "ring";
  run.topology.cabling = "direct";
  run.topology.model = "qwen3-0.6b-random";
  run.topology.dtype = "bfloat16";
  run.topology.engine = "octet 0.1.0";
  run.topology.extra_json = R"({"threads": 1})";
  return run;
}

int Exec(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  sqlite3_open(path.c_str(), &db);
  const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr);
  sqlite3_close(db);
  return rc;
}

}  // namespace

class TestBenchStore : public QObject {
  Q_OBJECT
 private:
  QTemporaryDir tmp_;
  std::string Path(const char* name) { return tmp_.path().toStdString() + "/" + name; }

 private slots:
  void roundTrip() {
    auto store = BenchRunStore::Open(Path("rt.sqlite"));
    QVERIFY2(store.ok(), store.status().ToString().c_str());
    QCOMPARE((*store)->schema_version(), BenchRunStore::kSchemaVersion);
    auto id = (*store)->BeginRun(MakeRun("first"));
    QVERIFY(id.ok());
    QVERIFY((*store)->AddResult(*id, MakeResult(512, 1, {20.0, 22.0})).ok());
    QVERIFY((*store)->AddResult(*id, MakeResult(512, 4, {60.0, 64.0})).ok());
    QVERIFY((*store)->FinishRun(*id, "complete", "").ok());
    store->reset();

    // A second Open (what the workbench does) reads the same run.
    auto again = BenchRunStore::Open(Path("rt.sqlite"));
    QVERIFY(again.ok());
    auto list = (*again)->ListRuns();
    QVERIFY(list.ok());
    QCOMPARE(list->size(), size_t(1));
    QCOMPARE((*list)[0].result_count, int64_t(2));
    QVERIFY((*list)[0].results.empty());
    auto run = (*again)->GetRun(*id);
    QVERIFY2(run.ok(), run.status().ToString().c_str());
    QCOMPARE(run->state, std::string("complete"));
    QCOMPARE(run->label, std::string("first"));
    QCOMPARE(run->topology.tp, 2);
    QCOMPARE(run->topology.nodes, 2);
    QCOMPARE(run->topology.transport, std::string("tcp"));
    QCOMPARE(run->topology.algorithm, std::string("ring"));
    QCOMPARE(run->topology.cabling, std::string("direct"));
    QCOMPARE(run->topology.model, std::string("qwen3-0.6b-random"));
    QCOMPARE(run->topology.extra_json, std::string(R"({"threads":1})"));
    QCOMPARE(run->latency_ms, 0.25);
    QCOMPARE(run->results.size(), size_t(2));
    const BenchResult& c4 = run->results[1];
    QCOMPARE(c4.concurrency, int64_t(4));
    QCOMPARE(c4.test, std::string("pp512 tg64 (c4)"));
    QCOMPARE(c4.tg_throughput.values, (std::vector<double>{60.0, 64.0}));
    QCOMPARE(c4.tg_throughput.mean, 62.0);
    QCOMPARE(c4.tg_throughput.std, 2.0);  // population std, as numpy / llama-benchy
    QVERIFY(c4.tg_req_throughput.empty());

    QVERIFY(!(*again)->GetRun(*id + 100).ok());
    QCOMPARE((*again)->GetRun(*id + 100).status().code(), StatusCode::kNotFound);
    QVERIFY(!(*again)->FinishRun(*id, "great", "").ok());
    QVERIFY((*again)->DeleteRun(*id).ok());
    QCOMPARE((*again)->ListRuns()->size(), size_t(0));
  }

  // The workbench and an `octet bench` beside it may both create the store at
  // the same moment: each must open it, neither may take it for a foreign file.
  void concurrentFirstOpensAgree() {
    for (int round = 0; round < 20; ++round) {
      const std::string path = Path(("race-" + std::to_string(round) + ".sqlite").c_str());
      std::atomic<int> ready{0};
      Status results[2];
      auto open = [&](int who) {
        ready.fetch_add(1);
        while (ready.load() < 2) std::this_thread::yield();
        auto store = BenchRunStore::Open(path);
        results[who] = store.ok() ? Status::Ok() : store.status();
      };
      std::thread a(open, 0), b(open, 1);
      a.join();
      b.join();
      QVERIFY2(results[0].ok(), results[0].ToString().c_str());
      QVERIFY2(results[1].ok(), results[1].ToString().c_str());
    }
  }

  // A process killed mid-run: the results it committed survive, and the next
  // Open marks the run interrupted (not "running" forever).
  void crashMidRunLosesOnlyThatRun() {
    const std::string path = Path("crash.sqlite");
    {
      auto store = BenchRunStore::Open(path);
      QVERIFY(store.ok());
      auto done = (*store)->InsertRun([] {
        BenchRun r = MakeRun("earlier");
        r.results = {MakeResult(128, 1, {30.0})};
        return r;
      }());
      QVERIFY(done.ok());
    }
    const pid_t child = ::fork();
    QVERIFY(child >= 0);
    if (child == 0) {
      auto store = BenchRunStore::Open(path);
      if (!store.ok()) ::_exit(3);
      auto id = (*store)->BeginRun(MakeRun("killed"));
      if (!id.ok() || !(*store)->AddResult(*id, MakeResult(512, 1, {20.0})).ok()) ::_exit(4);
      ::kill(::getpid(), SIGKILL);  // no destructor, no FinishRun
      ::_exit(5);
    }
    int wstatus = 0;
    QCOMPARE(::waitpid(child, &wstatus, 0), child);
    QVERIFY2(WIFSIGNALED(wstatus), "the child should have been killed mid-run");
    auto store = BenchRunStore::Open(path);
    QVERIFY2(store.ok(), store.status().ToString().c_str());
    auto list = (*store)->ListRuns();
    QVERIFY(list.ok());
    QCOMPARE(list->size(), size_t(2));
    const BenchRun& killed = (*list)[0];  // newest first
    QCOMPARE(killed.label, std::string("killed"));
    QCOMPARE(killed.state, std::string("interrupted"));
    QVERIFY2(killed.error.find("pid " + std::to_string(child)) != std::string::npos,
             killed.error.c_str());
    QCOMPARE(killed.result_count, int64_t(1));
    QCOMPARE((*list)[1].state, std::string("complete"));
    QCOMPARE((*list)[1].result_count, int64_t(1));
  }

  void refusesWhatIsNotARunStore() {
    const std::string garbage = Path("garbage.sqlite");
    QVERIFY(WriteFileAtomic(garbage, std::string(4096, 'x')).ok());
    auto g = BenchRunStore::Open(garbage);
    QVERIFY(!g.ok());
    QCOMPARE(g.status().code(), StatusCode::kDataLoss);
    QVERIFY2(g.status().message().find(garbage) != std::string::npos, g.status().message().c_str());
    QCOMPARE(*ReadFileToString(garbage), std::string(4096, 'x'));  // untouched

    const std::string other = Path("other.sqlite");
    QCOMPARE(Exec(other, "CREATE TABLE notes(t TEXT); INSERT INTO notes VALUES('mine');"),
             SQLITE_OK);
    auto o = BenchRunStore::Open(other);
    QVERIFY(!o.ok());
    QVERIFY2(o.status().message().find("not an Octet benchmark run store") != std::string::npos,
             o.status().message().c_str());

    // Truncated in the middle of a page (a torn copy): an error, not a crash.
    const std::string torn = Path("torn.sqlite");
    {
      auto s = BenchRunStore::Open(torn);
      QVERIFY(s.ok());
      BenchRun r = MakeRun("x");
      for (int i = 0; i < 50; ++i) r.results.push_back(MakeResult(512 + i, 1, {1.0, 2.0}));
      QVERIFY((*s)->InsertRun(r).ok());
    }
    auto bytes = ReadFileToString(torn);
    QVERIFY(bytes.ok() && bytes->size() > 8192);
    std::string cut = bytes->substr(0, 100) + std::string(bytes->size() - 100, '\xff');
    QVERIFY(WriteFileAtomic(torn, cut).ok());
    QFile::remove(QString::fromStdString(torn + "-wal"));
    QFile::remove(QString::fromStdString(torn + "-shm"));
    auto t = BenchRunStore::Open(torn);
    if (t.ok()) {
      // SQLite may open the header; reading the runs must then fail cleanly.
      auto l = (*t)->ListRuns();
      QVERIFY(!l.ok());
      QVERIFY2(l.status().message().find(torn) != std::string::npos, l.status().message().c_str());
    } else {
      QVERIFY2(t.status().message().find(torn) != std::string::npos, t.status().message().c_str());
    }
  }

  // A store damaged in the middle (a bad sector, a torn copy) is found when it
  // is opened, before `octet bench` measures anything, and is left as it was.
  void damagedStoreIsFoundAtOpen() {
    const std::string path = Path("damaged.sqlite");
    {
      auto s = BenchRunStore::Open(path);
      QVERIFY(s.ok());
      for (int k = 0; k < 4; ++k) {
        BenchRun r = MakeRun("run" + std::to_string(k));
        for (int i = 0; i < 60; ++i) r.results.push_back(MakeResult(512 + i, 1, {1.0, 2.0}));
        QVERIFY((*s)->InsertRun(r).ok());
      }
    }
    QFile::remove(QString::fromStdString(path + "-wal"));
    QFile::remove(QString::fromStdString(path + "-shm"));
    auto bytes = ReadFileToString(path);
    QVERIFY(bytes.ok() && bytes->size() > 6 * 4096);
    std::string damaged = *bytes;
    for (size_t i = 3 * 4096; i < 4 * 4096; ++i) damaged[i] = static_cast<char>(0xa5);
    QVERIFY(WriteFileAtomic(path, damaged).ok());
    auto d = BenchRunStore::Open(path);
    QVERIFY(!d.ok());
    QCOMPARE(d.status().code(), StatusCode::kDataLoss);
    QVERIFY2(d.status().message().find("damaged") != std::string::npos &&
                 d.status().message().find(path) != std::string::npos,
             d.status().message().c_str());
    QCOMPARE(*ReadFileToString(path), damaged);  // not changed
  }

  void newerSchemaIsRefusedUnchanged() {
    const std::string path = Path("newer.sqlite");
    { QVERIFY(BenchRunStore::Open(path).ok()); }
    QCOMPARE(Exec(path, "PRAGMA user_version=99"), SQLITE_OK);
    auto s = BenchRunStore::Open(path);
    QVERIFY(!s.ok());
    QCOMPARE(s.status().code(), StatusCode::kFailedPrecondition);
    QVERIFY(s.status().message().find("99") != std::string::npos);
  }

  // A file written by the first schema (no source/tp columns) opens, is
  // migrated, and its run keeps its topology and results.
  void migratesVersion1() {
    const std::string path = Path("v1.sqlite");
    const std::string v1 = R"sql(
PRAGMA application_id=1329812546;
CREATE TABLE runs(id INTEGER PRIMARY KEY AUTOINCREMENT, created_unix_ms INTEGER NOT NULL,
  label TEXT NOT NULL DEFAULT '', state TEXT NOT NULL, error TEXT NOT NULL DEFAULT '',
  url TEXT NOT NULL DEFAULT '', model TEXT NOT NULL DEFAULT '',
  topology_json TEXT NOT NULL DEFAULT '{}', latency_ms REAL NOT NULL DEFAULT 0,
  pid INTEGER NOT NULL DEFAULT 0, host TEXT NOT NULL DEFAULT '');
CREATE TABLE results(id INTEGER PRIMARY KEY AUTOINCREMENT,
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE, test TEXT NOT NULL,
  prompt_size INTEGER NOT NULL, response_size INTEGER NOT NULL, depth INTEGER NOT NULL,
  concurrency INTEGER NOT NULL, runs INTEGER NOT NULL, metrics_json TEXT NOT NULL);
INSERT INTO runs VALUES(1, 1700000000000, 'old', 'complete', '', 'http://x', 'm',
  '{"nodes":4,"tp":4,"transport":"tcp","algorithm":"ring","model":"m"}', 0.5, 0, '');
INSERT INTO results VALUES(1, 1, 'pp512 tg128 (c8)', 512, 128, 0, 8, 3,
  '{"tg_throughput":{"mean":80,"std":1,"values":[79,80,81]}}');
PRAGMA user_version=1;
)sql";
    QCOMPARE(Exec(path, v1), SQLITE_OK);
    auto s = BenchRunStore::Open(path);
    QVERIFY2(s.ok(), s.status().ToString().c_str());
    QCOMPARE((*s)->schema_version(), BenchRunStore::kSchemaVersion);
    auto run = (*s)->GetRun(1);
    QVERIFY2(run.ok(), run.status().ToString().c_str());
    QCOMPARE(run->topology.tp, 4);
    QCOMPARE(run->source, std::string("octet"));
    QCOMPARE(run->results.size(), size_t(1));
    QCOMPARE(run->results[0].tg_throughput.mean, 80.0);
    // New runs go on after the migrated one.
    auto id = (*s)->InsertRun(MakeRun("new"));
    QVERIFY(id.ok());
    QCOMPARE(*id, int64_t(2));
  }

  // Speculative decoding's counts: summed over the requests, the acceptance
  // rate per repetition, stored (columns and metrics) and read back; a
  // version-2 file gains the columns, its results reading "not measured".
  void speculativeCountsAreKept() {
    RequestSample a;
    a.start_s = 1.0;
    a.first_response_s = a.first_token_s = 1.1;
    a.end_s = 1.6;
    a.completion_tokens = 11;
    a.drafted_tokens = 12;
    a.accepted_tokens = 9;
    RequestSample b = a;
    b.drafted_tokens = 8;
    b.accepted_tokens = 1;
    RequestSample c = a;  // a second repetition: everything kept
    c.accepted_tokens = 12;
    BenchResult r = SummarizeTest({{a, b}, {c}}, 1.0, 16, 11, 0, 2);
    QCOMPARE(r.drafted_tokens, int64_t(32));
    QCOMPARE(r.accepted_tokens, int64_t(22));
    QCOMPARE(r.acceptance_rate.values, (std::vector<double>{0.5, 1.0}));
    // A server that does not report drafts: nothing measured.
    RequestSample plain = a;
    plain.drafted_tokens = -1;
    QVERIFY(SummarizeTest({{plain}}, 1.0, 16, 11, 0, 1).acceptance_rate.empty());

    const std::string path = Path("spec.sqlite");
    QCOMPARE(Exec(path, R"sql(
PRAGMA application_id=1329812546;
CREATE TABLE runs(id INTEGER PRIMARY KEY AUTOINCREMENT, created_unix_ms INTEGER NOT NULL,
  label TEXT NOT NULL DEFAULT '', state TEXT NOT NULL, error TEXT NOT NULL DEFAULT '',
  url TEXT NOT NULL DEFAULT '', model TEXT NOT NULL DEFAULT '',
  topology_json TEXT NOT NULL DEFAULT '{}', latency_ms REAL NOT NULL DEFAULT 0,
  pid INTEGER NOT NULL DEFAULT 0, host TEXT NOT NULL DEFAULT '',
  source TEXT NOT NULL DEFAULT 'octet', tool TEXT NOT NULL DEFAULT '',
  prompt_mode TEXT NOT NULL DEFAULT '', nodes INTEGER NOT NULL DEFAULT 1,
  tp INTEGER NOT NULL DEFAULT 1, transport TEXT NOT NULL DEFAULT '',
  algorithm TEXT NOT NULL DEFAULT '');
CREATE TABLE results(id INTEGER PRIMARY KEY AUTOINCREMENT,
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE, test TEXT NOT NULL,
  prompt_size INTEGER NOT NULL, response_size INTEGER NOT NULL, depth INTEGER NOT NULL,
  concurrency INTEGER NOT NULL, runs INTEGER NOT NULL, metrics_json TEXT NOT NULL,
  failed_requests INTEGER NOT NULL DEFAULT 0, pp_throughput REAL, tg_throughput REAL);
INSERT INTO runs(id, created_unix_ms, state, model) VALUES(1, 1700000000000, 'complete', 'm');
INSERT INTO results(run_id, test, prompt_size, response_size, depth, concurrency, runs,
  metrics_json) VALUES(1, 'pp512 tg128 (c1)', 512, 128, 0, 1, 1,
  '{"tg_throughput":{"mean":80,"std":0,"values":[80]}}');
PRAGMA user_version=2;
)sql"),
             SQLITE_OK);
    auto store = BenchRunStore::Open(path);
    QVERIFY2(store.ok(), store.status().ToString().c_str());
    auto old = (*store)->GetRun(1);
    QVERIFY2(old.ok(), old.status().ToString().c_str());
    QVERIFY(old->results[0].acceptance_rate.empty());
    QCOMPARE(old->results[0].drafted_tokens, int64_t(0));
    BenchRun run = MakeRun("speculative");
    run.topology.speculative = "ngram K=3";
    run.results.push_back(r);
    auto id = (*store)->InsertRun(run);
    QVERIFY2(id.ok(), id.status().ToString().c_str());
    auto back = (*store)->GetRun(*id);
    QVERIFY(back.ok());
    QCOMPARE(back->topology.speculative, std::string("ngram K=3"));
    QCOMPARE(back->results[0].drafted_tokens, int64_t(32));
    QCOMPARE(back->results[0].accepted_tokens, int64_t(22));
    QCOMPARE(back->results[0].acceptance_rate.mean, 0.75);
    store->reset();
    // The column queries filter on.
    sqlite3* db = nullptr;
    sqlite3_open(path.c_str(), &db);
    sqlite3_stmt* q = nullptr;
    sqlite3_prepare_v2(db, "SELECT acceptance_rate, drafted_tokens FROM results ORDER BY id", -1,
                       &q, nullptr);
    QCOMPARE(sqlite3_step(q), SQLITE_ROW);
    QCOMPARE(sqlite3_column_type(q, 0), SQLITE_NULL);  // the migrated result: not measured
    QCOMPARE(sqlite3_step(q), SQLITE_ROW);
    QCOMPARE(sqlite3_column_double(q, 0), 0.75);
    QCOMPARE(sqlite3_column_int64(q, 1), sqlite3_int64(32));
    sqlite3_finalize(q);
    sqlite3_close(db);
    // The JSON report carries them, and reads back.
    auto parsed = ParseLlamaBenchyJson(BenchRunToJson(*back), "report");
    QVERIFY2(parsed.ok(), parsed.status().ToString().c_str());
    QCOMPARE(parsed->results[0].accepted_tokens, int64_t(22));
    QCOMPARE(parsed->results[0].acceptance_rate.values, (std::vector<double>{0.5, 1.0}));
    QCOMPARE(parsed->topology.speculative, std::string("ngram K=3"));
    QVERIFY(FormatBenchTable(*back).find("accepted (%)") != std::string::npos);
    QVERIFY(FormatBenchTable(*old).find("accepted (%)") == std::string::npos);
  }

  // Schema v4: a version-3 file keeps its rows (provenance empty), and a new
  // run's provenance (model path and content hash, serve settings, machine,
  // commits) reads back.
  void provenanceIsKeptAndMigrated() {
    const std::string path = Path("v3.sqlite");
    QCOMPARE(Exec(path, R"sql(
PRAGMA application_id=1329812546;
CREATE TABLE runs(id INTEGER PRIMARY KEY AUTOINCREMENT, created_unix_ms INTEGER NOT NULL,
  label TEXT NOT NULL DEFAULT '', state TEXT NOT NULL, error TEXT NOT NULL DEFAULT '',
  url TEXT NOT NULL DEFAULT '', model TEXT NOT NULL DEFAULT '',
  topology_json TEXT NOT NULL DEFAULT '{}', latency_ms REAL NOT NULL DEFAULT 0,
  pid INTEGER NOT NULL DEFAULT 0, host TEXT NOT NULL DEFAULT '',
  source TEXT NOT NULL DEFAULT 'octet', tool TEXT NOT NULL DEFAULT '',
  prompt_mode TEXT NOT NULL DEFAULT '', nodes INTEGER NOT NULL DEFAULT 1,
  tp INTEGER NOT NULL DEFAULT 1, transport TEXT NOT NULL DEFAULT '',
  algorithm TEXT NOT NULL DEFAULT '');
CREATE TABLE results(id INTEGER PRIMARY KEY AUTOINCREMENT,
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE, test TEXT NOT NULL,
  prompt_size INTEGER NOT NULL, response_size INTEGER NOT NULL, depth INTEGER NOT NULL,
  concurrency INTEGER NOT NULL, runs INTEGER NOT NULL, metrics_json TEXT NOT NULL,
  failed_requests INTEGER NOT NULL DEFAULT 0, pp_throughput REAL, tg_throughput REAL,
  drafted_tokens INTEGER NOT NULL DEFAULT 0, accepted_tokens INTEGER NOT NULL DEFAULT 0,
  acceptance_rate REAL);
INSERT INTO runs(id, created_unix_ms, label, state, model) VALUES(1, 1700000000000, 'v3 run',
  'complete', 'm');
INSERT INTO results(run_id, test, prompt_size, response_size, depth, concurrency, runs,
  metrics_json) VALUES(1, 'pp512 tg128 (c1)', 512, 128, 0, 1, 1,
  '{"tg_throughput":{"mean":80,"std":0,"values":[80]}}');
PRAGMA user_version=3;
)sql"),
             SQLITE_OK);
    auto store = BenchRunStore::Open(path);
    QVERIFY2(store.ok(), store.status().ToString().c_str());
    QCOMPARE((*store)->schema_version(), 4);
    auto old = (*store)->GetRun(1);
    QVERIFY2(old.ok(), old.status().ToString().c_str());
    QCOMPARE(old->label, std::string("v3 run"));
    QCOMPARE(old->results.size(), size_t(1));
    QCOMPARE(old->results[0].tg_throughput.mean, 80.0);
    QVERIFY(old->provenance.model_hash.empty());
    BenchRun run = MakeRun("with provenance");
    run.provenance.model_path = "/models/qwen3-tiny";
    run.provenance.model_hash = "sha256:00ff";
    run.provenance.serve_slots = 8;
    run.provenance.kv_dtype = "f16";
    run.provenance.context = 4096;
    run.provenance.threads = 16;
    run.provenance.backend = "avx2 x16 threads per rank";
    run.provenance.cpu_model = "Test CPU";
    run.provenance.gpu_model = "NVIDIA GB10";
    run.provenance.commit = "0123456789ab";
    run.provenance.server_commit = "ba9876543210";
    auto id = (*store)->InsertRun(run);
    QVERIFY2(id.ok(), id.status().ToString().c_str());
    auto back = (*store)->GetRun(*id);
    QVERIFY(back.ok());
    const BenchProvenance& v = back->provenance;
    QCOMPARE(v.model_path, run.provenance.model_path);
    QCOMPARE(v.model_hash, run.provenance.model_hash);
    QCOMPARE(v.serve_slots, int64_t(8));
    QCOMPARE(v.kv_dtype, std::string("f16"));
    QCOMPARE(v.context, int64_t(4096));
    QCOMPARE(v.threads, int64_t(16));
    QCOMPARE(v.backend, run.provenance.backend);
    QCOMPARE(v.cpu_model, std::string("Test CPU"));
    QCOMPARE(v.gpu_model, std::string("NVIDIA GB10"));
    QCOMPARE(v.commit, std::string("0123456789ab"));
    QCOMPARE(v.server_commit, std::string("ba9876543210"));
    auto listed = (*store)->ListRuns();
    QVERIFY(listed.ok());
    QCOMPARE(listed->front().provenance.model_hash, std::string("sha256:00ff"));
  }

  // The model content hash: SHA-256 over config.json, the index and the
  // safetensors headers; the same folder gives the same hash, a changed config
  // or header another, and the weights' bytes are not read.
  void modelContentHash() {
    if (!test::FixturesPresent()) QSKIP("fixtures not found (OCTET_FIXTURES_DIR)");
    const std::string src = test::FixturesDir() + "/llama3-tiny-sharded";
    const std::string dir = Path("model");
    QVERIFY(QDir().mkpath(QString::fromStdString(dir)));
    for (const auto& e : QDir(QString::fromStdString(src)).entryList(QDir::Files)) {
      QVERIFY(QFile::copy(QString::fromStdString(src) + "/" + e,
                          QString::fromStdString(dir) + "/" + e));
    }
    auto a = ModelContentHash(src);
    QVERIFY2(a.ok(), a.status().ToString().c_str());
    QVERIFY(a->rfind("sha256:", 0) == 0);
    QCOMPARE(a->size(), size_t(7 + 64));
    auto b = ModelContentHash(dir);
    QVERIFY(b.ok());
    QCOMPARE(*b, *a);
    // A weight byte past the headers: the same hash (the weights are not read).
    const QStringList shards = QDir(QString::fromStdString(dir)).entryList({"*.safetensors"});
    QVERIFY(!shards.isEmpty());
    {
      QFile f(QString::fromStdString(dir) + "/" + shards.back());
      QVERIFY(f.open(QIODevice::ReadWrite));
      f.seek(f.size() - 1);
      char c = 0;
      f.getChar(&c);
      f.seek(f.size() - 1);
      f.putChar(static_cast<char>(c ^ 0x5a));
    }
    auto c = ModelContentHash(dir);
    QVERIFY(c.ok());
    QCOMPARE(*c, *a);
    // A changed config: another hash.
    {
      QFile f(QString::fromStdString(dir) + "/config.json");
      QVERIFY(f.open(QIODevice::Append));
      f.write(" ");
    }
    auto d = ModelContentHash(dir);
    QVERIFY(d.ok());
    QVERIFY(*d != *a);
    auto missing = ModelContentHash(Path("nowhere"));
    QVERIFY(!missing.ok());
  }

  // llama-benchy's arithmetic on hand-made timestamps (seconds).
  void summarizeFollowsLlamaBenchy() {
    // Two requests together, latency 10 ms, pp 100 tokens, tg 11 tokens each.
    RequestSample a;
    a.start_s = 1.000;
    a.first_response_s = 1.110;  // est_ppt = 110 - 10 = 100 ms -> pp_req 1000 t/s
    a.first_token_s = 1.110;
    a.end_s = 1.610;  // 10 tokens after the first in 0.5 s -> 20 t/s
    a.prompt_tokens = 100;
    a.completion_tokens = 11;
    RequestSample b = a;
    b.start_s = 1.000;
    b.first_response_s = 1.210;  // est_ppt 200 ms -> 500 t/s
    b.first_token_s = 1.210;
    b.end_s = 2.210;  // 10 / 1.0 s -> 10 t/s
    const BenchResult r = SummarizeTest({{a, b}}, 10.0, 100, 11, 0, 2);
    QCOMPARE(r.runs, int64_t(1));
    QCOMPARE(r.failed_requests, int64_t(0));
    QVERIFY(std::fabs(r.pp_req_throughput.mean - 750.0) < 1e-6);  // (1000 + 500) / 2
    QVERIFY(std::fabs(r.pp_req_throughput.std - 250.0) < 1e-6);
    QVERIFY(std::fabs(r.tg_req_throughput.mean - 15.0) < 1e-6);
    QVERIFY(std::fabs(r.est_ppt.mean - 150.0) < 1e-6);
    QVERIFY(std::fabs(r.ttfr.mean - 160.0) < 1e-6);
    QVERIFY(std::fabs(r.e2e_ttft.mean - 160.0) < 1e-6);
    // Totals: 200 prompt tokens by the last first token (0.21 s after the
    // start); 20 tokens after the first tokens, from the first first token
    // (1.110) to the last end (2.210).
    QVERIFY(std::fabs(r.pp_throughput.mean - 200.0 / 0.21) < 1e-6);
    QVERIFY(std::fabs(r.tg_throughput.mean - 20.0 / 1.1) < 1e-6);

    // A failed request is counted and left out of the figures.
    RequestSample failed;
    failed.error = "HTTP 500";
    const BenchResult f = SummarizeTest({{a, failed}, {a}}, 10.0, 100, 11, 0, 2);
    QCOMPARE(f.failed_requests, int64_t(1));
    QCOMPARE(f.tg_req_throughput.values.size(), size_t(2));
    QVERIFY(std::fabs(f.tg_req_throughput.mean - 20.0) < 1e-6);
  }

  void compareGivesDeltas() {
    BenchRun a = MakeRun("a");
    a.id = 1;
    a.results = {MakeResult(512, 1, {20.0}), MakeResult(512, 8, {100.0})};
    BenchRun b = MakeRun("b");
    b.id = 2;
    b.results = {MakeResult(512, 1, {30.0}), MakeResult(2048, 1, {10.0})};
    b.results[0].e2e_ttft = MetricStats::Of({30.0});  // faster first token (a: 60 ms)
    const auto rows = CompareRuns(a, b);
    QCOMPARE(rows.size(), size_t(3));
    QVERIFY(rows[0].in_a && rows[0].in_b);
    bool saw_tg = false, saw_ttft = false;
    for (const auto& m : rows[0].metrics) {
      if (m.name == "tg_throughput") {
        saw_tg = true;
        QCOMPARE(m.a, 20.0);
        QCOMPARE(m.b, 30.0);
        QVERIFY(std::fabs(m.delta_pct - 50.0) < 1e-9);
        QVERIFY(m.higher_is_better);
      }
      if (m.name == "e2e_ttft") {
        saw_ttft = true;
        QVERIFY(std::fabs(m.delta_pct + 50.0) < 1e-9);
        QVERIFY(!m.higher_is_better);
      }
    }
    QVERIFY(saw_tg && saw_ttft);
    QVERIFY(rows[1].in_a && !rows[1].in_b && rows[1].metrics.empty());
    QVERIFY(!rows[2].in_a && rows[2].in_b);
    const std::string text = FormatComparison(a, b);
    QVERIFY2(text.find("| pp512 tg64 (c1) | tg_throughput | 20.00 | 30.00 | +50.0% better |") !=
                 std::string::npos,
             text.c_str());
    QVERIFY2(text.find("| pp512 tg64 (c1) | e2e_ttft | 60.00 | 30.00 | -50.0% better |") !=
                 std::string::npos,
             text.c_str());
    QVERIFY2(text.find("(only in A)") != std::string::npos, text.c_str());
  }

  void importsLlamaBenchyReports() {
    // A report in llama-benchy's schema (schemas/benchmark_report_schema.json),
    // written by hand: a vLLM run at two concurrencies plus a context-prefill
    // phase entry, which is a different measurement and is skipped.
    const std::string report = R"({
      "version": "0.3.1", "timestamp": "2026-01-05T10:20:30", "latency_mode": "api",
      "latency_ms": 1.5, "model": "Qwen/Qwen3-8B", "prefix_caching_enabled": false,
      "max_concurrency": 4, "prompt_source": "synthetic",
      "benchmarks": [
        {"concurrency": 1, "context_size": 0, "prompt_size": 512, "response_size": 128,
         "is_context_prefill_phase": false,
         "pp_throughput": {"mean": 3000, "std": 10, "values": [2990, 3010]},
         "tg_throughput": {"mean": 40, "std": 1, "values": [39, 41]},
         "tg_req_throughput": {"mean": 40, "std": 1, "values": [39, 41]},
         "ttfr": null, "e2e_ttft": {"mean": 180, "std": 5, "values": [175, 185]}},
        {"concurrency": 4, "context_size": 4096, "prompt_size": 512, "response_size": 128,
         "is_context_prefill_phase": true},
        {"concurrency": 4, "context_size": 0, "prompt_size": 512, "response_size": 128,
         "is_context_prefill_phase": false,
         "tg_throughput": {"mean": 120, "std": 3, "values": [117, 123]}}
      ]})";
    auto run = ParseLlamaBenchyJson(report, "vllm.json");
    QVERIFY2(run.ok(), run.status().ToString().c_str());
    QCOMPARE(run->source, std::string("llama-benchy"));
    QCOMPARE(run->tool, std::string("llama-benchy 0.3.1"));
    QCOMPARE(run->topology.model, std::string("Qwen/Qwen3-8B"));
    QCOMPARE(run->results.size(), size_t(2));
    QCOMPARE(run->results[0].tg_throughput.values, (std::vector<double>{39, 41}));
    QCOMPARE(run->results[0].runs, int64_t(2));
    QVERIFY(run->results[0].ttfr.empty());
    QCOMPARE(run->results[1].concurrency, int64_t(4));
    QCOMPARE(run->created_unix_ms, int64_t(1767608430) * 1000);

    auto store = BenchRunStore::Open(Path("import.sqlite"));
    QVERIFY(store.ok());
    auto id = (*store)->InsertRun(*run);
    QVERIFY(id.ok());
    auto back = (*store)->GetRun(*id);
    QVERIFY(back.ok());
    QCOMPARE(back->source, std::string("llama-benchy"));
    QCOMPARE(back->results.size(), size_t(2));

    // Our own JSON output reads back with its topology.
    BenchRun mine = MakeRun("mine");
    mine.results = {MakeResult(512, 1, {20.0, 22.0})};
    auto round = ParseLlamaBenchyJson(BenchRunToJson(mine), "octet.json");
    QVERIFY2(round.ok(), round.status().ToString().c_str());
    QCOMPARE(round->topology.tp, 2);
    QCOMPARE(round->label, std::string("mine"));
    QCOMPARE(round->results[0].tg_throughput.values, (std::vector<double>{20.0, 22.0}));

    // Errors name the JSON path.
    auto bad = ParseLlamaBenchyJson(R"({"benchmarks": [{"concurrency": 1, "prompt_size": "x",
                                        "response_size": 1}]})",
                                    "r.json");
    QVERIFY(!bad.ok());
    QVERIFY2(bad.status().message().find("r.json: benchmarks[0].prompt_size") != std::string::npos,
             bad.status().message().c_str());
    QVERIFY(!ParseLlamaBenchyJson("not json", "r.json").ok());
    QVERIFY(!ParseLlamaBenchyJson("{}", "r.json").ok());
    // An optional count that is not an integer is refused by name, not cast:
    // a float past int64's range (fuzz_benchy: undefined behaviour), a
    // fraction, a string.
    for (const char* depth : {"1e70", "11111111111111111111111", "2.5", "\"4096\""}) {
      auto odd = ParseLlamaBenchyJson(
          std::string(R"({"benchmarks": [{"concurrency": 1, "prompt_size": 8, "response_size": 1,
                                            "context_size": )") +
              depth + "}]}",
          "r.json");
      QVERIFY2(!odd.ok(), depth);
      QVERIFY2(odd.status().message().find(
                   "r.json: benchmarks[0].context_size is not an integer") != std::string::npos,
               odd.status().message().c_str());
    }
    auto counts = ParseLlamaBenchyJson(
        R"({"benchmarks": [{"concurrency": 1, "prompt_size": 8, "response_size": 1,
                            "context_size": null, "drafted_tokens": 12, "accepted_tokens": 9}]})",
        "r.json");
    QVERIFY2(counts.ok(), counts.status().ToString().c_str());
    QCOMPARE(counts->results[0].depth, int64_t(0));
    QCOMPARE(counts->results[0].drafted_tokens, int64_t(12));
    QCOMPARE(counts->results[0].accepted_tokens, int64_t(9));
  }
};

QTEST_GUILESS_MAIN(TestBenchStore)
#include "test_bench_store.moc"
