// The benchmark run store: the SQLite file (schema, migrations, a small
// statement wrapper) and BenchRunStore's reads and writes (bench_store.h).
// The JSON forms of metrics and topology it keeps are in bench_report.cpp.
#include "octet/app/bench_store.h"

#include <signal.h>
#include <sqlite3.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "bench_json.h"
#include "octet/base/clock.h"
#include "octet/base/deadline.h"
#include "octet/base/json.h"

namespace octet::app {

using nlohmann::json;

namespace {

constexpr int kApplicationId = 0x4F435442;  // "OCTB": an Octet benchmark run store

std::string HostName() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "";
  return buf;
}

// ---- a small SQLite wrapper: statements with errors that say where ----------------

class Db {
 public:
  ~Db() {
    if (db_) sqlite3_close_v2(db_);
  }
  Status Open(const std::string& path) {
    path_ = path;
    const int rc = sqlite3_open_v2(
        path.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
        nullptr);
    if (rc != SQLITE_OK) {
      Status s = UnavailableError("cannot open '" + path +
                                  "': " + (db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc)));
      return s;
    }
    sqlite3_busy_timeout(db_, 5000);
    return Status::Ok();
  }
  Status Exec(const std::string& sql) {
    char* err = nullptr;
    if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
      std::string msg = err ? err : sqlite3_errmsg(db_);
      sqlite3_free(err);
      return Error(msg, sql);
    }
    return Status::Ok();
  }
  Status Error(const std::string& msg, const std::string& sql) const {
    const std::string where = sql.size() > 60 ? sql.substr(0, 60) + "..." : sql;
    const int code = sqlite3_errcode(db_);
    if (code == SQLITE_NOTADB || code == SQLITE_CORRUPT) {
      return DataLossError(path_ + ": " + msg + " (in: " + where + ")");
    }
    return UnavailableError(path_ + ": " + msg + " (in: " + where + ")");
  }
  sqlite3* get() { return db_; }
  int64_t last_insert_id() { return sqlite3_last_insert_rowid(db_); }

 private:
  sqlite3* db_ = nullptr;
  std::string path_;
};

class Stmt {
 public:
  Stmt(Db& db, const std::string& sql) : db_(db), sql_(sql) {
    rc_ = sqlite3_prepare_v2(db.get(), sql.c_str(), -1, &s_, nullptr);
  }
  ~Stmt() { sqlite3_finalize(s_); }
  Status status() const {
    return rc_ == SQLITE_OK ? Status::Ok() : db_.Error(sqlite3_errmsg(db_.get()), sql_);
  }
  Stmt& Bind(int i, int64_t v) {
    sqlite3_bind_int64(s_, i, v);
    return *this;
  }
  Stmt& Bind(int i, double v) {
    sqlite3_bind_double(s_, i, v);
    return *this;
  }
  Stmt& Bind(int i, const std::string& v) {
    sqlite3_bind_text(s_, i, v.c_str(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  // SQLITE_ROW: true; SQLITE_DONE: false; errors in `status`.
  bool Step(Status* status) {
    const int rc = sqlite3_step(s_);
    if (rc == SQLITE_ROW) return true;
    if (rc != SQLITE_DONE) *status = db_.Error(sqlite3_errmsg(db_.get()), sql_);
    return false;
  }
  Status Run() {
    Status st = status();
    if (!st.ok()) return st;
    Step(&st);
    return st;
  }
  int64_t Int(int col) { return sqlite3_column_int64(s_, col); }
  double Real(int col) { return sqlite3_column_double(s_, col); }
  std::string Text(int col) {
    const unsigned char* t = sqlite3_column_text(s_, col);
    return t ? reinterpret_cast<const char*>(t) : "";
  }

 private:
  Db& db_;
  std::string sql_;
  sqlite3_stmt* s_ = nullptr;
  int rc_ = SQLITE_OK;
};

// ---- schema -------------------------------------------------------------------------

// Version 1: runs with a topology blob, results with a metrics blob.
const char* kSchemaV1 = R"sql(
CREATE TABLE runs(
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  created_unix_ms INTEGER NOT NULL,
  label TEXT NOT NULL DEFAULT '',
  state TEXT NOT NULL,
  error TEXT NOT NULL DEFAULT '',
  url TEXT NOT NULL DEFAULT '',
  model TEXT NOT NULL DEFAULT '',
  topology_json TEXT NOT NULL DEFAULT '{}',
  latency_ms REAL NOT NULL DEFAULT 0,
  pid INTEGER NOT NULL DEFAULT 0,
  host TEXT NOT NULL DEFAULT '');
CREATE TABLE results(
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  test TEXT NOT NULL,
  prompt_size INTEGER NOT NULL,
  response_size INTEGER NOT NULL,
  depth INTEGER NOT NULL,
  concurrency INTEGER NOT NULL,
  runs INTEGER NOT NULL,
  metrics_json TEXT NOT NULL);
)sql";

// Version 2: where a run came from (imports), and the figures charts and
// queries filter on as columns (backfilled from the blobs).
const char* kSchemaV2 = R"sql(
ALTER TABLE runs ADD COLUMN source TEXT NOT NULL DEFAULT 'octet';
ALTER TABLE runs ADD COLUMN tool TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN prompt_mode TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN nodes INTEGER NOT NULL DEFAULT 1;
ALTER TABLE runs ADD COLUMN tp INTEGER NOT NULL DEFAULT 1;
ALTER TABLE runs ADD COLUMN transport TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN algorithm TEXT NOT NULL DEFAULT '';
ALTER TABLE results ADD COLUMN failed_requests INTEGER NOT NULL DEFAULT 0;
ALTER TABLE results ADD COLUMN pp_throughput REAL;
ALTER TABLE results ADD COLUMN tg_throughput REAL;
CREATE INDEX results_run ON results(run_id);
CREATE INDEX runs_created ON runs(created_unix_ms);
)sql";

Status MigrateToV2(Db& db) {
  OCTET_RETURN_IF_ERROR(db.Exec(kSchemaV2));
  {
    Stmt q(db, "SELECT id, topology_json FROM runs");
    OCTET_RETURN_IF_ERROR(q.status());
    Status st;
    std::vector<std::pair<int64_t, BenchTopology>> rows;
    while (q.Step(&st))
      rows.push_back({q.Int(0), TopologyFromJson(json::parse(q.Text(1), nullptr, false))});
    OCTET_RETURN_IF_ERROR(st);
    for (auto& [id, t] : rows) {
      Stmt u(db, "UPDATE runs SET nodes=?, tp=?, transport=?, algorithm=? WHERE id=?");
      OCTET_RETURN_IF_ERROR(u.Bind(1, int64_t(t.nodes))
                                .Bind(2, int64_t(t.tp))
                                .Bind(3, t.transport)
                                .Bind(4, t.algorithm)
                                .Bind(5, id)
                                .Run());
    }
  }
  Stmt q(db, "SELECT id, metrics_json FROM results");
  OCTET_RETURN_IF_ERROR(q.status());
  Status st;
  std::vector<std::pair<int64_t, BenchResult>> rows;
  while (q.Step(&st)) {
    BenchResult r;
    MetricsFromJson(json::parse(q.Text(1), nullptr, false), &r);
    rows.push_back({q.Int(0), r});
  }
  OCTET_RETURN_IF_ERROR(st);
  for (auto& [id, r] : rows) {
    Stmt u(db, "UPDATE results SET pp_throughput=?, tg_throughput=? WHERE id=?");
    OCTET_RETURN_IF_ERROR(
        u.Bind(1, r.pp_throughput.mean).Bind(2, r.tg_throughput.mean).Bind(3, id).Run());
  }
  return Status::Ok();
}

// Version 3: speculative decoding's drafted and kept tokens per result, and
// its acceptance rate (mean over the repetitions; also in metrics_json).
const char* kSchemaV3 = R"sql(
ALTER TABLE results ADD COLUMN drafted_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE results ADD COLUMN accepted_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE results ADD COLUMN acceptance_rate REAL;
)sql";

// Version 4: what a run measured and with what (BenchProvenance).
const char* kSchemaV4 = R"sql(
ALTER TABLE runs ADD COLUMN model_path TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN model_hash TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN serve_slots INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN serve_kv_dtype TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN serve_context INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN serve_threads INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN serve_backend TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN cpu_model TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN gpu_model TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN commit_id TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN server_commit TEXT NOT NULL DEFAULT '';
)sql";

}  // namespace

struct BenchRunStore::Impl {
  Db db;
  int version = 0;

  // Every statement of a write in one transaction (committed durably, WAL +
  // synchronous=FULL), rolled back on error.
  template <typename F>
  Status Transaction(F&& body) {
    OCTET_RETURN_IF_ERROR(db.Exec("BEGIN IMMEDIATE"));
    Status s = body();
    if (!s.ok()) {
      db.Exec("ROLLBACK").IgnoreError();
      return s;
    }
    return db.Exec("COMMIT");
  }

  Status InsertResult(int64_t run_id, const BenchResult& r) {
    Stmt s(db,
           "INSERT INTO results(run_id, test, prompt_size, response_size, depth, concurrency, "
           "runs, metrics_json, failed_requests, pp_throughput, tg_throughput, drafted_tokens, "
           "accepted_tokens, acceptance_rate) "
           "VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
    if (Status st = s.status(); !st.ok()) return st;
    s.Bind(1, run_id)
        .Bind(2, r.test.empty() ? r.Name() : r.test)
        .Bind(3, r.prompt_size)
        .Bind(4, r.response_size)
        .Bind(5, r.depth)
        .Bind(6, r.concurrency)
        .Bind(7, r.runs)
        .Bind(8, MetricsJson(r).dump())
        .Bind(9, r.failed_requests)
        .Bind(10, r.pp_throughput.mean)
        .Bind(11, r.tg_throughput.mean)
        .Bind(12, r.drafted_tokens)
        .Bind(13, r.accepted_tokens);
    if (!r.acceptance_rate.empty()) s.Bind(14, r.acceptance_rate.mean);  // NULL: not measured
    return s.Run();
  }

  Result<int64_t> InsertRunRow(const BenchRun& run, const std::string& state) {
    Stmt s(db,
           "INSERT INTO runs(created_unix_ms, label, state, error, url, model, topology_json, "
           "latency_ms, pid, host, source, tool, prompt_mode, nodes, tp, transport, algorithm, "
           "model_path, model_hash, serve_slots, serve_kv_dtype, serve_context, serve_threads, "
           "serve_backend, cpu_model, gpu_model, commit_id, server_commit) "
           "VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
    const BenchTopology& t = run.topology;
    const BenchProvenance& v = run.provenance;
    OCTET_RETURN_IF_ERROR(s.Bind(1, run.created_unix_ms > 0 ? run.created_unix_ms : UnixMs())
                              .Bind(2, run.label)
                              .Bind(3, state)
                              .Bind(4, run.error)
                              .Bind(5, run.url)
                              .Bind(6, t.model)
                              .Bind(7, TopologyJson(t).dump())
                              .Bind(8, run.latency_ms)
                              .Bind(9, int64_t(::getpid()))
                              .Bind(10, HostName())
                              .Bind(11, run.source)
                              .Bind(12, run.tool)
                              .Bind(13, run.prompt_mode)
                              .Bind(14, int64_t(t.nodes))
                              .Bind(15, int64_t(t.tp))
                              .Bind(16, t.transport)
                              .Bind(17, t.algorithm)
                              .Bind(18, v.model_path)
                              .Bind(19, v.model_hash)
                              .Bind(20, v.serve_slots)
                              .Bind(21, v.kv_dtype)
                              .Bind(22, v.context)
                              .Bind(23, v.threads)
                              .Bind(24, v.backend)
                              .Bind(25, v.cpu_model)
                              .Bind(26, v.gpu_model)
                              .Bind(27, v.commit)
                              .Bind(28, v.server_commit)
                              .Run());
    return db.last_insert_id();
  }

  // Runs left "running" by a process of this host that is gone.
  Status MarkInterrupted() {
    Stmt q(db, "SELECT id, pid FROM runs WHERE state='running' AND host=?");
    OCTET_RETURN_IF_ERROR(q.status());
    q.Bind(1, HostName());
    Status st;
    std::vector<std::pair<int64_t, int64_t>> dead;
    while (q.Step(&st)) {
      const pid_t pid = static_cast<pid_t>(q.Int(1));
      if (pid <= 0 || (::kill(pid, 0) != 0 && errno == ESRCH)) dead.push_back({q.Int(0), pid});
    }
    OCTET_RETURN_IF_ERROR(st);
    for (auto& [id, pid] : dead) {
      Stmt u(db, "UPDATE runs SET state='interrupted', error=? WHERE id=?");
      OCTET_RETURN_IF_ERROR(u.Bind(1, "the benchmark process (pid " + std::to_string(pid) +
                                          ") ended before the run finished; the results it "
                                          "completed are kept")
                                .Bind(2, id)
                                .Run());
    }
    return Status::Ok();
  }
};

Result<std::unique_ptr<BenchRunStore>> BenchRunStore::Open(const std::string& path) {
  std::unique_ptr<BenchRunStore> s(new BenchRunStore());
  s->path_ = path;
  s->impl_ = std::make_unique<Impl>();
  Db& db = s->impl_->db;
  OCTET_RETURN_IF_ERROR(db.Open(path));
  // The three reads share one read transaction, so they see one snapshot even
  // when another process (the workbench and an `octet bench` beside it) is
  // creating the store at this moment.
  OCTET_RETURN_IF_ERROR(db.Exec("BEGIN"));
  int app_id = 0, version = 0, tables = 0;
  {
    Stmt q(db, "PRAGMA application_id");
    Status st = q.status();
    if (st.ok() && q.Step(&st)) app_id = static_cast<int>(q.Int(0));
    if (!st.ok()) return DataLossError("'" + path + "' is not an SQLite database: " + st.message());
  }
  {
    Stmt q(db, "PRAGMA user_version");
    Status st = q.status();
    if (st.ok() && q.Step(&st)) version = static_cast<int>(q.Int(0));
    OCTET_RETURN_IF_ERROR(st);
  }
  {
    Stmt q(db, "SELECT count(*) FROM sqlite_master");
    Status st = q.status();
    if (st.ok() && q.Step(&st)) tables = static_cast<int>(q.Int(0));
    OCTET_RETURN_IF_ERROR(st);
  }
  OCTET_RETURN_IF_ERROR(db.Exec("COMMIT"));
  if (tables > 0 && app_id != kApplicationId) {
    return DataLossError("'" + path + "' is an SQLite file but not an Octet benchmark run store");
  }
  // A damaged file is found now, before a benchmark runs, not at its first
  // write after the measuring (quick_check reads every page once).
  if (tables > 0) {
    Stmt q(db, "PRAGMA quick_check(1)");
    Status st = q.status();
    std::string verdict = "no answer";
    if (st.ok() && q.Step(&st)) verdict = q.Text(0);
    if (!st.ok() || verdict != "ok") {
      return DataLossError(
          "'" + path + "' is damaged (SQLite quick_check: " + (st.ok() ? verdict : st.message()) +
          "); nothing was run and the file was not changed: move it aside and "
          "give a new --db");
    }
  }
  if (version > kSchemaVersion) {
    return FailedPreconditionError("'" + path + "' has run-store schema version " +
                                   std::to_string(version) + "; this Octet knows up to " +
                                   std::to_string(kSchemaVersion) +
                                   " (open it with a newer Octet; it was not changed)");
  }
  // Switching to WAL takes an exclusive lock, and SQLite answers "locked"
  // without its busy handler while another process is opening the same new
  // file; retry that for a while (the switch happens once per file).
  for (const Deadline wal_deadline = Deadline::AfterMs(5000);;) {
    Status wal = db.Exec("PRAGMA journal_mode=WAL");
    if (wal.ok()) break;
    const int code = sqlite3_errcode(db.get()) & 0xff;
    if ((code != SQLITE_BUSY && code != SQLITE_LOCKED) || wal_deadline.expired()) return wal;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  OCTET_RETURN_IF_ERROR(db.Exec("PRAGMA synchronous=FULL"));
  OCTET_RETURN_IF_ERROR(db.Exec("PRAGMA foreign_keys=ON"));
  if (version < kSchemaVersion) {
    // Each step and its version bump commit together: a crash mid-migration
    // leaves the file at the last complete version.
    Status m = s->impl_->Transaction([&]() -> Status {
      // Re-read under the write lock: another process may have created or
      // migrated the store since the snapshot above.
      {
        Stmt q(db, "PRAGMA user_version");
        Status st = q.status();
        if (st.ok() && q.Step(&st)) version = static_cast<int>(q.Int(0));
        OCTET_RETURN_IF_ERROR(st);
      }
      if (version >= kSchemaVersion) return Status::Ok();
      if (version < 1) {
        OCTET_RETURN_IF_ERROR(db.Exec(kSchemaV1));
        OCTET_RETURN_IF_ERROR(db.Exec("PRAGMA application_id=" + std::to_string(kApplicationId)));
      }
      if (version < 2) OCTET_RETURN_IF_ERROR(MigrateToV2(db));
      if (version < 3) OCTET_RETURN_IF_ERROR(db.Exec(kSchemaV3));
      if (version < 4) OCTET_RETURN_IF_ERROR(db.Exec(kSchemaV4));
      return db.Exec("PRAGMA user_version=" + std::to_string(kSchemaVersion));
    });
    if (!m.ok())
      return m.WithContext("migrating '" + path + "' from version " + std::to_string(version));
  }
  s->impl_->version = kSchemaVersion;
  OCTET_RETURN_IF_ERROR(s->impl_->MarkInterrupted());
  return s;
}

BenchRunStore::~BenchRunStore() = default;

int BenchRunStore::schema_version() const { return impl_->version; }

Result<int64_t> BenchRunStore::BeginRun(const BenchRun& run) {
  int64_t id = 0;
  OCTET_RETURN_IF_ERROR(impl_->Transaction([&]() -> Status {
    OCTET_ASSIGN_OR_RETURN(id, impl_->InsertRunRow(run, "running"));
    return Status::Ok();
  }));
  return id;
}

Status BenchRunStore::AddResult(int64_t run_id, const BenchResult& result) {
  return impl_->Transaction([&] { return impl_->InsertResult(run_id, result); });
}

Status BenchRunStore::FinishRun(int64_t run_id, const std::string& state,
                                const std::string& error) {
  if (state != "complete" && state != "failed" && state != "interrupted") {
    return InvalidArgumentError("a run ends 'complete', 'failed' or 'interrupted', not '" + state +
                                "'");
  }
  return impl_->Transaction([&] {
    Stmt u(impl_->db, "UPDATE runs SET state=?, error=? WHERE id=?");
    return u.Bind(1, state).Bind(2, error).Bind(3, run_id).Run();
  });
}

Result<int64_t> BenchRunStore::InsertRun(const BenchRun& run) {
  int64_t id = 0;
  OCTET_RETURN_IF_ERROR(impl_->Transaction([&]() -> Status {
    // A whole run is finished by definition: "running" (BenchRun's default)
    // would be marked interrupted by the next Open.
    const std::string state =
        run.state.empty() || run.state == "running" ? std::string("complete") : run.state;
    OCTET_ASSIGN_OR_RETURN(id, impl_->InsertRunRow(run, state));
    for (const BenchResult& r : run.results) OCTET_RETURN_IF_ERROR(impl_->InsertResult(id, r));
    return Status::Ok();
  }));
  return id;
}

Status BenchRunStore::DeleteRun(int64_t run_id) {
  return impl_->Transaction([&]() -> Status {
    Stmt d(impl_->db, "DELETE FROM results WHERE run_id=?");
    OCTET_RETURN_IF_ERROR(d.Bind(1, run_id).Run());
    Stmt r(impl_->db, "DELETE FROM runs WHERE id=?");
    return r.Bind(1, run_id).Run();
  });
}

namespace {
const char* kRunColumns =
    "r.id, r.created_unix_ms, r.label, r.state, r.error, r.url, r.topology_json, r.latency_ms, "
    "r.source, r.tool, r.prompt_mode, (SELECT count(*) FROM results WHERE run_id=r.id), "
    "r.model_path, r.model_hash, r.serve_slots, r.serve_kv_dtype, r.serve_context, "
    "r.serve_threads, r.serve_backend, r.cpu_model, r.gpu_model, r.commit_id, r.server_commit";

BenchRun ReadRun(Stmt& q) {
  BenchRun run;
  run.id = q.Int(0);
  run.created_unix_ms = q.Int(1);
  run.label = q.Text(2);
  run.state = q.Text(3);
  run.error = q.Text(4);
  run.url = q.Text(5);
  run.topology = TopologyFromJson(json::parse(q.Text(6), nullptr, false));
  run.latency_ms = q.Real(7);
  run.source = q.Text(8);
  run.tool = q.Text(9);
  run.prompt_mode = q.Text(10);
  run.result_count = q.Int(11);
  BenchProvenance& v = run.provenance;
  v.model_path = q.Text(12);
  v.model_hash = q.Text(13);
  v.serve_slots = q.Int(14);
  v.kv_dtype = q.Text(15);
  v.context = q.Int(16);
  v.threads = q.Int(17);
  v.backend = q.Text(18);
  v.cpu_model = q.Text(19);
  v.gpu_model = q.Text(20);
  v.commit = q.Text(21);
  v.server_commit = q.Text(22);
  return run;
}
}  // namespace

Result<std::vector<BenchRun>> BenchRunStore::ListRuns(int limit) {
  std::string sql = std::string("SELECT ") + kRunColumns + " FROM runs r ORDER BY r.id DESC";
  if (limit > 0) sql += " LIMIT " + std::to_string(limit);
  Stmt q(impl_->db, sql);
  OCTET_RETURN_IF_ERROR(q.status());
  std::vector<BenchRun> out;
  Status st;
  while (q.Step(&st)) out.push_back(ReadRun(q));
  OCTET_RETURN_IF_ERROR(st);
  return out;
}

Result<BenchRun> BenchRunStore::GetRun(int64_t run_id) {
  Stmt q(impl_->db, std::string("SELECT ") + kRunColumns + " FROM runs r WHERE r.id=?");
  OCTET_RETURN_IF_ERROR(q.status());
  q.Bind(1, run_id);
  Status st;
  if (!q.Step(&st)) {
    OCTET_RETURN_IF_ERROR(st);
    return NotFoundError("no run " + std::to_string(run_id) + " in '" + path_ + "'");
  }
  BenchRun run = ReadRun(q);
  Stmt r(impl_->db,
         "SELECT test, prompt_size, response_size, depth, concurrency, runs, metrics_json, "
         "failed_requests, drafted_tokens, accepted_tokens FROM results WHERE run_id=? ORDER BY "
         "id");
  OCTET_RETURN_IF_ERROR(r.status());
  r.Bind(1, run_id);
  while (r.Step(&st)) {
    BenchResult res;
    res.test = r.Text(0);
    res.prompt_size = r.Int(1);
    res.response_size = r.Int(2);
    res.depth = r.Int(3);
    res.concurrency = r.Int(4);
    res.runs = r.Int(5);
    MetricsFromJson(json::parse(r.Text(6), nullptr, false), &res);
    res.failed_requests = r.Int(7);
    res.drafted_tokens = r.Int(8);
    res.accepted_tokens = r.Int(9);
    run.results.push_back(std::move(res));
  }
  OCTET_RETURN_IF_ERROR(st);
  return run;
}

}  // namespace octet::app
