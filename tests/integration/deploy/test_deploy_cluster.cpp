// `octet deploy` on `octet cluster local --nodes 8` (a ring), end to end with
// this build's octet and octet-agent: the seed's layout with two different
// fixture models (qwen3-tiny as 3 replicas at TP 2, minicpm-tiny as 2 at TP
// 1) checked (each TP group on ring neighbours), then applied: 5 replicas
// ready on 8 distinct nodes, a router whose `instance:` pools answer with the
// right pool; applying the same file again changes nothing (the same job
// ids), also while a node's agent is frozen for a few seconds (apply waits for
// it, --node-wait-ms) and refuses naming the node when it stays away; the
// router job holds its admin token in its environment (derived from the
// cluster token), never on its command line; a 9-node
// deployment and a TP 4 split of the ring are refused by `check` with why; a
// replica killed mid-run reads failed in `status` while the router ejects it
// and keeps serving from the others; applying again restarts it and the
// router follows it to its new endpoint; `deploy watch` restarts a killed
// replica by itself (the router follows again); a changed file (3 -> 2 large
// replicas, another model for the small instance) stops one large replica
// and restarts only the small ones; `down` leaves no job running, no
// worker process alive and no memory in use on any node; Ctrl-C during an
// apply that waits stops what it started.
#include <httplib.h>
#include <signal.h>

#include <QCryptographicHash>
#include <QDir>
#include <QFile>
#include <QMessageAuthenticationCode>
#include <QtTest>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "octet/app/cluster_profile.h"
#include "octet/app/cluster_session.h"
#include "octet/app/deployment.h"
#include "octet/app/deployment_file.h"
#include "octet/app/local_cluster.h"
#include "octet/base/file_util.h"
#include "octet/base/json.h"
#include "octet_test.h"

using namespace octet;
using namespace octet::app;
using nlohmann::json;

namespace {

void WriteFile(const std::string& path, const std::string& text) {
  QFile f(QString::fromStdString(path));
  QVERIFY(f.open(QIODevice::WriteOnly | QIODevice::Truncate));
  f.write(text.data(), static_cast<qint64>(text.size()));
}

}  // namespace

class TestDeployCluster : public QObject {
  Q_OBJECT
 private:
  QTemporaryDir dir_;
  std::string root_, config_;
  std::string deploy_yaml_;  // deploy.yaml's text
  std::unique_ptr<Subprocess> cluster_;
  std::shared_ptr<std::string> cluster_out_ = std::make_shared<std::string>();
  std::shared_ptr<std::mutex> cluster_mu_ = std::make_shared<std::mutex>();
  std::unique_ptr<ClusterSession> session_;

  // `octet deploy ARGS --cluster dtest`: exit code, stdout (JSON) and stderr apart.
  struct Run {
    int code = -1;
    std::string out, err;
    json doc;
  };
  Run Deploy(const std::vector<std::string>& args, int timeout_ms = 60'000) {
    std::string cmd = "'" + test::BinDir() + "/octet' deploy";
    for (const auto& a : args) cmd += " '" + a + "'";
    cmd += " --cluster dtest --config-dir '" + config_ + "' 2>'" + root_ + "/stderr.txt'";
    const auto r = test::RunProgram({"/bin/sh", "-c", cmd}, timeout_ms);
    Run run;
    run.code = r.exit_code;
    run.out = r.output;
    QFile e(QString::fromStdString(root_ + "/stderr.txt"));
    if (e.open(QIODevice::ReadOnly)) run.err = e.readAll().toStdString();
    run.doc = json::parse(run.out, nullptr, false);
    return run;
  }

  json Status() {
    Run r = Deploy({"status", "demo", "--json"});
    if (r.code != 0 || !r.doc.is_object()) {
      qWarning("status: %s %s", r.out.c_str(), r.err.c_str());
      return json();
    }
    return r.doc;
  }

  static const json* Replica(const json& status, const std::string& name) {
    if (!status.is_object() || status["deployments"].empty()) return nullptr;
    for (const auto& r : status["deployments"][0]["instances"]) {
      if (r["name"] == name) return &r;
    }
    return nullptr;
  }

  // POST /v1/completions through the router; the pool that answered.
  std::string Complete(const std::string& router_url, const std::string& model, int* status) {
    httplib::Client cli(router_url);
    cli.set_read_timeout(std::chrono::seconds(60));
    // Token ids: the fixture models carry no tokenizer.
    const json body = {{"model", model}, {"prompt", {1, 2, 3}}, {"max_tokens", 3}};
    auto res = cli.Post("/v1/completions", body.dump(), "application/json");
    *status = res ? res->status : -1;
    return res ? res->get_header_value("X-Octet-Pool") : "";
  }

  // replica -> job id, from `deploy status`.
  std::map<std::string, std::string> JobIds(const json& status) {
    std::map<std::string, std::string> ids;
    if (!status.is_object() || status["deployments"].empty()) return ids;
    for (const auto& r : status["deployments"][0]["instances"]) ids[r["name"]] = r["job_id"];
    if (status["deployments"][0]["router"].is_object())
      ids["router"] = status["deployments"][0]["router"]["job_id"];
    return ids;
  }

  // Whether `deploy status` lists these replica -> job id pairs, asked up to
  // 5 times (a status taken while an agent is slow to answer lists fewer);
  // ids_text_ says what it listed last.
  std::string ids_text_;
  bool SameJobsSoon(const std::map<std::string, std::string>& ids) {
    for (int i = 0; i < 5; ++i) {
      const auto now = JobIds(Status());
      if (now == ids) return true;
      ids_text_ = "expected:";
      for (const auto& [k, v] : ids) ids_text_ += " " + k + "=" + v;
      ids_text_ += "; listed:";
      for (const auto& [k, v] : now) ids_text_ += " " + k + "=" + v;
      qWarning("%s", ids_text_.c_str());
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
    return false;
  }

  static std::string ProcFile(pid_t pid, const char* name) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/" + name, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }

  // The octet-agent process of local node `index` (its state folder node-INDEX).
  pid_t AgentPid(int index) {
    const std::string mark = root_ + "/state/node-" + std::to_string(index) + "/address";
    QDir proc("/proc");
    for (const QString& e : proc.entryList(QDir::Dirs)) {
      bool ok = false;
      const pid_t pid = e.toInt(&ok);
      if (!ok) continue;
      std::string cmd = ProcFile(pid, "cmdline");
      std::replace(cmd.begin(), cmd.end(), '\0', ' ');
      if (cmd.find("octet-agent") != std::string::npos && cmd.find(mark) != std::string::npos)
        return pid;
    }
    return 0;
  }

  // Bytes in use on each node of the local cluster, as its agent accounts them
  // (a simulated node: its budget minus the resident memory of its jobs).
  std::vector<uint64_t> UsedBytesPerNode() {
    std::vector<uint64_t> used;
    for (size_t i = 0; i < session_->size(); ++i) {
      auto f = session_->client(i).GetFacts(Deadline::AfterMs(5000));
      if (!f.ok()) {
        qWarning("node %zu: %s", i, f.status().ToString().c_str());
        used.push_back(UINT64_MAX);
        continue;
      }
      used.push_back(f->memory.total_bytes - f->memory.available_bytes);
    }
    return used;
  }

  static std::string BytesText(const std::vector<uint64_t>& used) {
    std::string t;
    for (uint64_t u : used) t += " " + std::to_string(u);
    return t;
  }

  // kill -9 of rank 0's worker of a running job; false when none runs.
  bool KillRankZero(const std::string& job) {
    pid_t pid = 0;
    for (const auto& j : AllJobs()) {
      if (j.spec.job_id == job && j.spec.rank == 0 && j.state == "running") pid = j.pid;
    }
    return pid > 0 && ::kill(pid, SIGKILL) == 0;
  }

  std::vector<JobStatus> AllJobs() {
    std::vector<JobStatus> all;
    for (size_t i = 0; i < session_->size(); ++i) {
      auto jobs = session_->client(i).ListJobs(Deadline::AfterMs(5000));
      if (jobs.ok()) all.insert(all.end(), jobs->begin(), jobs->end());
    }
    return all;
  }

 private slots:
  void initTestCase() {
    OCTET_REQUIRE_FIXTURES();
    QVERIFY(dir_.isValid());
    root_ = dir_.path().toStdString();
    config_ = root_ + "/config";
    SpawnOptions o;
    o.argv = {test::BinDir() + "/octet",
              "cluster",
              "local",
              "--nodes",
              "8",
              "--name",
              "dtest",
              "--cabling",
              "ring",
              "--memory-per-node",
              "4G",
              "--config-dir",
              config_,
              "--state-dir",
              root_ + "/state",
              "--model-roots",
              test::FixturesDir() + "," + root_,
              "--for",
              "1200"};
    auto out = cluster_out_;
    auto mu = cluster_mu_;
    o.on_output = [out, mu](std::string_view chunk) {
      std::lock_guard<std::mutex> lock(*mu);
      out->append(chunk);
    };
    auto c = Subprocess::Spawn(o);
    QVERIFY2(c.ok(), c.status().ToString().c_str());
    cluster_ = std::move(*c);
    const Deadline up = Deadline::AfterMs(90'000);
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(*cluster_mu_);
        if (cluster_out_->find("Ctrl-C stops the cluster") != std::string::npos) break;
      }
      QVERIFY2(!up.expired() && !cluster_->Poll(), cluster_out_->c_str());
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    auto profile = LoadProfile("dtest", config_);
    QVERIFY2(profile.ok(), profile.status().ToString().c_str());
    auto s = ClusterSession::Open(*profile);
    QVERIFY2(s.ok(), s.status().ToString().c_str());
    session_ = std::move(*s);

    const std::string fx = test::FixturesDir();
    WriteFile(root_ + "/policy.yaml", R"(version: 1
pools:
  - name: large
    instance: large
    model: qwen3-tiny
    health_check: {interval_ms: 300, timeout_ms: 1000, unhealthy_threshold: 1}
    outlier_ejection: {consecutive_failures: 1}
    capacity: {nodes_per_replica: 2, requests_per_s: 0.25}
  - name: small
    instance: small
    model: minicpm-tiny
    health_check: {interval_ms: 300, timeout_ms: 1000}
    capacity: {nodes_per_replica: 1, requests_per_s: 1.5}
routes:
  - name: small
    match: {model: [small]}
    pool: small
  - name: rest
    pool: large
)");
    const std::string instances =
        "version: 1\nname: demo\ninstances:\n  - name: large\n    model: " + fx +
        "/qwen3-tiny\n    tp: 2\n    replicas: 3\n    slots: 2\n"
        "    context: 128\n    threads: 1\n  - name: small\n    model: " +
        fx +
        "/minicpm-tiny\n    tp: 1\n    replicas: SMALL\n    slots: 2\n"
        "    context: 128\n    threads: 1\nrouter:\n  policy: policy.yaml\n";
    deploy_yaml_ = QString::fromStdString(instances).replace("SMALL", "2").toStdString();
    WriteFile(root_ + "/deploy.yaml", deploy_yaml_);
    WriteFile(root_ + "/nine.yaml",
              QString::fromStdString(instances).replace("SMALL", "3").toStdString());
    WriteFile(root_ + "/split.yaml",
              "version: 1\nname: split\ninstances:\n  - name: big\n    model: " + fx +
                  "/qwen3-tiny\n    tp: 4\n    replicas: 2\n");

    // The agents find their ring links a few seconds after they answer
    // (beacons, then probes); placement checks the cabling, so wait for it.
    const Deadline cabled = Deadline::AfterMs(90'000);
    std::string cabling;
    for (;;) {
      Run r = Deploy({"check", root_ + "/deploy.yaml", "--json"});
      cabling = r.doc.is_object() && r.doc["cabling"].is_string()
                    ? r.doc["cabling"].get<std::string>()
                    : std::string();
      if (cabling == "ring") break;
      QVERIFY2(!cabled.expired(), ("cabling still '" + cabling + "': " + r.err).c_str());
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
  }

  void cleanupTestCase() {
    if (session_) Deploy({"down", "demo"});
    session_.reset();
    if (cluster_) cluster_->Terminate(std::chrono::milliseconds(5000));
  }

  void checkPlacesTheLayoutOnRingNeighbours() {
    Run r = Deploy({"check", root_ + "/deploy.yaml", "--json"});
    QVERIFY2(r.code == 0, (r.out + r.err).c_str());
    QVERIFY2(r.doc["valid"] == true, r.out.c_str());
    QCOMPARE(r.doc["cabling"].get<std::string>(), std::string("ring"));
    QCOMPARE(r.doc["replicas"].size(), size_t(5));
    std::set<std::string> nodes;
    for (const auto& rep : r.doc["replicas"]) {
      for (const auto& n : rep["nodes"]) nodes.insert(n.get<std::string>());
      if (rep["instance"] == "large") {
        // dtest-I and dtest-J neighbours on the ring of 8 (profile order).
        const int a = std::stoi(rep["nodes"][0].get<std::string>().substr(6));
        const int b = std::stoi(rep["nodes"][1].get<std::string>().substr(6));
        QVERIFY2((a + 1) % 8 == b || (b + 1) % 8 == a, rep.dump().c_str());
      }
      // Memory per node as the planner counts it, below the 4 GiB budget.
      for (const auto& m : rep["memory"]) {
        QVERIFY(m["memory_bytes"].get<int64_t>() > 0);
        QVERIFY(m["memory_bytes"].get<int64_t>() <= m["node_memory_bytes"].get<int64_t>());
      }
    }
    QCOMPARE(nodes.size(), size_t(8));
    // The capacity `octet route plan` predicts, with the policy's rates.
    QVERIFY2(r.doc["capacity"]["available"] == true, r.doc["capacity"].dump().c_str());
    QCOMPARE(r.doc["capacity"]["rates"]["large"]["requests_per_s"].get<double>(), 0.25);
  }

  void checkRefusesNineNodesAndARingSplit() {
    Run nine = Deploy({"check", root_ + "/nine.yaml"});
    QCOMPARE(nine.code, 1);
    QVERIFY2(nine.err.find("needs 9 nodes") != std::string::npos, nine.err.c_str());
    QVERIFY2(nine.err.find("the cluster has 8") != std::string::npos, nine.err.c_str());
    Run split = Deploy({"check", root_ + "/split.yaml"});
    QCOMPARE(split.code, 1);
    QVERIFY2(split.err.find("any-to-any") != std::string::npos, split.err.c_str());
    QVERIFY2(split.err.find("switch") != std::string::npos, split.err.c_str());
    // A malformed file: FILE:LINE:COL and the nearest key.
    WriteFile(root_ + "/typo.yaml",
              "version: 1\nname: t\ninstances:\n  - name: a\n    modle: /m\n");
    Run typo = Deploy({"check", root_ + "/typo.yaml"});
    QCOMPARE(typo.code, 1);
    QVERIFY2(typo.err.find(root_ + "/typo.yaml:5:5: unknown key 'modle'") != std::string::npos,
             typo.err.c_str());
    QVERIFY2(typo.err.find("did you mean 'model'?") != std::string::npos, typo.err.c_str());
  }

  void applyStartsEveryReplicaAndTheRouter() {
    Run r = Deploy({"apply", root_ + "/deploy.yaml", "--json", "--wait-ms", "240000"}, 300'000);
    QVERIFY2(r.code == 0, (r.out + r.err).c_str());
    QCOMPARE(r.doc["started"].size(), size_t(5));
    // Every replica reads ready (asked again while an agent is slow to list
    // its jobs: its ranks then read as missing for that one status).
    json st;
    for (int i = 0; i < 20; ++i) {
      st = Status();
      bool all_ready = st.is_object() && st["deployments"].size() == 1;
      if (all_ready) {
        for (const auto& rep : st["deployments"][0]["instances"]) {
          all_ready = all_ready && rep["state"] == "ready";
        }
      }
      if (all_ready) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
    QVERIFY(st.is_object());
    QCOMPARE(st["deployments"].size(), size_t(1));
    const json& d = st["deployments"][0];
    QCOMPARE(d["instances"].size(), size_t(5));
    std::set<std::string> nodes;
    for (const auto& rep : d["instances"]) {
      QVERIFY2(rep["state"] == "ready", rep.dump().c_str());
      for (const auto& n : rep["nodes"]) nodes.insert(n.get<std::string>());
    }
    QCOMPARE(nodes.size(), size_t(8));
    QVERIFY2(d["router"]["state"] == "ready", d["router"].dump().c_str());
    const std::string router = d["router"]["url"];
    // Each pool answers its own requests.
    int code = 0;
    QCOMPARE(Complete(router, "small", &code), std::string("small"));
    QCOMPARE(code, 200);
    QCOMPARE(Complete(router, "anything", &code), std::string("large"));
    QCOMPARE(code, 200);
    // The same file again changes nothing: the same jobs run.
    const auto ids = JobIds(st);
    QCOMPARE(ids.size(), size_t(6));
    Run again = Deploy({"apply", root_ + "/deploy.yaml", "--json"}, 120'000);
    QVERIFY2(again.code == 0, (again.out + again.err).c_str());
    QVERIFY2(again.doc["started"].empty(), again.err.c_str());
    QCOMPARE(again.doc["stopped"].size(), size_t(0));
    QCOMPARE(again.doc["kept"].size(), size_t(5));
    QVERIFY2(SameJobsSoon(ids), ids_text_.c_str());
  }

  // `deploy check --bench-db`: a stored `octet bench` run of small-0 (the
  // small model at TP 1) gives the small instance's per-replica rate; the
  // large one, without a run, keeps the policy's.
  void checkTakesRatesFromAStoredBenchRun() {
    const json st = Status();
    const json* small = Replica(st, "small-0");
    QVERIFY(small);
    const std::string db = root_ + "/runs.sqlite";
    const auto bench =
        test::RunProgram({test::BinDir() + "/octet", "bench", "--url",
                          (*small)["url"].get<std::string>(), "--pp", "16", "--tg", "4",
                          "--concurrency", "2", "--runs", "1", "--db", db, "--label", "small tp1"},
                         120'000);
    QVERIFY2(bench.exit_code == 0, bench.output.c_str());
    Run r = Deploy({"check", root_ + "/deploy.yaml", "--json", "--bench-db", db});
    QVERIFY2(r.code == 0, (r.out + r.err).c_str());
    const json& rates = r.doc["capacity"]["rates"];
    if (rates["small"]["source"].get<std::string>().find("stored") == std::string::npos) {
      const auto shown =
          test::RunProgram({test::BinDir() + "/octet", "bench", "show", "--db", db, "1", "--json"});
      qWarning("the stored run: %s", shown.output.c_str());
    }
    QVERIFY2(r.doc["capacity"]["available"] == true, r.doc["capacity"].dump().c_str());
    QVERIFY2(rates["small"]["source"].get<std::string>().find("stored `octet bench` run") !=
                 std::string::npos,
             rates.dump().c_str());
    QVERIFY(rates["small"]["bench_run"].get<int64_t>() > 0);
    QVERIFY(rates["small"]["requests_per_s"].get<double>() > 0);
    QCOMPARE(rates["large"]["requests_per_s"].get<double>(), 0.25);
    QVERIFY2(rates["large"]["source"].get<std::string>().find("policy") != std::string::npos,
             rates.dump().c_str());
  }

  // The router job's admin token: in its environment, derived from the
  // cluster token (HMAC-SHA256 of "octet-router-admin:" + job id, computed
  // here with Qt's own HMAC), never on its command line.
  void theRouterHoldsItsAdminTokenInItsEnvironment() {
    const json st = Status();
    QVERIFY(st.is_object() && !st["deployments"].empty());
    const std::string job = st["deployments"][0]["router"]["job_id"];
    pid_t pid = 0;
    for (const auto& j : AllJobs()) {
      if (j.spec.job_id == job && j.state == "running") pid = j.pid;
    }
    QVERIFY(pid > 0);
    auto profile = LoadProfile("dtest", config_);
    QVERIFY(profile.ok());
    std::ifstream tf(profile->token_file());
    std::string token;
    tf >> token;
    QVERIFY(!token.empty());
    const QByteArray expected = QMessageAuthenticationCode::hash(
                                    QByteArray::fromStdString("octet-router-admin:" + job),
                                    QByteArray::fromStdString(token), QCryptographicHash::Sha256)
                                    .toHex();
    const std::string env = ProcFile(pid, "environ");
    QVERIFY2(env.find("OCTET_ROUTER_ADMIN_TOKEN=" + expected.toStdString()) != std::string::npos,
             "the router's environment lacks its admin token");
    const std::string cmdline = ProcFile(pid, "cmdline");
    QVERIFY(!cmdline.empty());
    QVERIFY(cmdline.find(expected.toStdString()) == std::string::npos);
    QVERIFY(cmdline.find(token) == std::string::npos);
  }

  // A node whose agent does not answer for a few seconds (SIGSTOP): apply
  // waits for it and changes nothing; when it stays away past --node-wait-ms,
  // apply refuses naming it, and stops nothing.
  void applyWaitsForALateNode() {
    const auto ids = JobIds(Status());
    const pid_t agent = AgentPid(2);
    QVERIFY(agent > 0);
    QCOMPARE(::kill(agent, SIGSTOP), 0);
    std::thread resume([agent] {
      std::this_thread::sleep_for(std::chrono::seconds(7));
      ::kill(agent, SIGCONT);
    });
    Run waited =
        Deploy({"apply", root_ + "/deploy.yaml", "--json", "--node-wait-ms", "30000"}, 120'000);
    resume.join();
    QVERIFY2(waited.code == 0, (waited.out + waited.err).c_str());
    QVERIFY2(waited.doc["started"].empty(), waited.err.c_str());
    QCOMPARE(waited.doc["kept"].size(), size_t(5));
    QVERIFY2(SameJobsSoon(ids), ids_text_.c_str());

    QCOMPARE(::kill(agent, SIGSTOP), 0);
    Run refused = Deploy({"apply", root_ + "/deploy.yaml", "--node-wait-ms", "1000"}, 120'000);
    ::kill(agent, SIGCONT);
    QCOMPARE(refused.code, 1);
    QVERIFY2(refused.err.find("node dtest-2 is not up") != std::string::npos, refused.err.c_str());
    // Nothing was stopped or started.
    json st;
    for (int i = 0; i < 40; ++i) {
      st = Status();
      bool ready = !st["deployments"].empty();
      for (const auto& r : st.value("deployments", json::array()).empty()
                               ? json::array()
                               : st["deployments"][0]["instances"])
        ready = ready && r["state"] == "ready";
      if (ready) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
    QCOMPARE(JobIds(st), ids);
  }

  void aKilledReplicaFailsAndTheRouterKeepsServing() {
    const json before = Status();
    const json* victim = Replica(before, "large-0");
    QVERIFY(victim);
    const std::string job = (*victim)["job_id"];
    const std::string old_url = (*victim)["url"];
    const std::string router = before["deployments"][0]["router"]["url"];
    QVERIFY(KillRankZero(job));
    // Status reads it failed (from the agents).
    json st;
    const Deadline d = Deadline::AfterMs(60'000);
    while (!d.expired()) {
      st = Status();
      const json* r = Replica(st, "large-0");
      if (r && (*r)["state"] == "failed") break;
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
    const json* failed = Replica(st, "large-0");
    QVERIFY2(failed && (*failed)["state"] == "failed", st.dump().c_str());
    QVERIFY2((*failed)["error"].get<std::string>().find("signal 9") != std::string::npos,
             failed->dump().c_str());
    // The router ejects it and keeps answering from the other two.
    for (int i = 0; i < 6; ++i) {
      int code = 0;
      QCOMPARE(Complete(router, "anything", &code), std::string("large"));
      QCOMPARE(code, 200);
    }
    // Its health checks (every 300 ms, one failure ejects) take it out.
    httplib::Client cli(router);
    int healthy = -1;
    const Deadline ejected = Deadline::AfterMs(10'000);
    while (healthy != 2 && !ejected.expired()) {
      auto stats = cli.Get("/v1/router/stats");
      QVERIFY(stats && stats->status == 200);
      const json sj = json::parse(stats->body);
      for (const auto& p : sj["pools"]) {
        if (p["pool"] == "large") healthy = p["healthy_replicas"].get<int>();
      }
      if (healthy != 2) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    QCOMPARE(healthy, 2);
    int code = 0;
    QCOMPARE(Complete(router, "anything", &code), std::string("large"));
    QCOMPARE(code, 200);
    // Apply restarts it; the router follows it to its new endpoint.
    Run again = Deploy({"apply", root_ + "/deploy.yaml", "--json", "--wait-ms", "240000"}, 300'000);
    QVERIFY2(again.code == 0, (again.out + again.err).c_str());
    QVERIFY2(again.doc["started"] == json::array({"large-0"}), again.err.c_str());
    const json after = Status();
    const json* back = Replica(after, "large-0");
    QVERIFY(back);
    QCOMPARE((*back)["state"].get<std::string>(), std::string("ready"));
    QVERIFY((*back)["url"] != old_url);
    auto inst = cli.Get("/v1/router/instances");
    QVERIFY(inst && inst->status == 200);
    const json ij = json::parse(inst->body);
    QCOMPARE(ij["instances"]["large"].size(), size_t(3));
    bool has_new = false;
    for (const auto& u : ij["instances"]["large"]) {
      QVERIFY(u != old_url);
      has_new = has_new || u == (*back)["url"];
    }
    QVERIFY(has_new);
  }

  // `deploy watch` restarts a replica killed under it without being asked,
  // and the router follows it to its new endpoint; SIGTERM ends the watch
  // (exit 0) with the deployment still running.
  void watchRestartsAKilledReplica() {
    const json before = Status();
    const json* victim = Replica(before, "large-1");
    QVERIFY2(victim && (*victim)["state"] == "ready", before.dump().c_str());
    const std::string job = (*victim)["job_id"];
    const std::string old_url = (*victim)["url"];
    const std::string router = before["deployments"][0]["router"]["url"];
    // A copy of deploy.yaml, edited below while the watch runs.
    const std::string watched = root_ + "/watched.yaml";
    WriteFile(watched, deploy_yaml_);
    auto out = std::make_shared<std::string>();
    auto mu = std::make_shared<std::mutex>();
    SpawnOptions so;
    so.argv = {test::BinDir() + "/octet",
               "deploy",
               "watch",
               watched,
               "--cluster",
               "dtest",
               "--config-dir",
               config_,
               "--interval-ms",
               "500",
               "--wait-ms",
               "240000"};
    so.on_output = [out, mu](std::string_view chunk) {
      std::lock_guard<std::mutex> lock(*mu);
      out->append(chunk);
    };
    auto watch = Subprocess::Spawn(so);
    QVERIFY2(watch.ok(), watch.status().ToString().c_str());
    auto text = [&] {
      std::lock_guard<std::mutex> lock(*mu);
      return *out;
    };
    // It sees everything running first (and so applies nothing).
    const Deadline seen = Deadline::AfterMs(60'000);
    while (text().find("and the router running") == std::string::npos && !seen.expired())
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    QVERIFY2(text().find("and the router running") != std::string::npos, text().c_str());
    QVERIFY2(text().find("applying") == std::string::npos, text().c_str());
    QVERIFY(KillRankZero(job));
    // Restarted by the watch alone: a new job, ready, at a new endpoint.
    json st;
    const json* back = nullptr;
    const Deadline d = Deadline::AfterMs(240'000);
    while (!d.expired()) {
      st = Status();
      back = Replica(st, "large-1");
      if (back && (*back)["state"] == "ready" && (*back)["job_id"] != job) break;
      back = nullptr;
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
    QVERIFY2(back, (st.dump() + "\n" + text()).c_str());
    QVERIFY((*back)["url"] != old_url);
    QVERIFY2(text().find("large-1 failed") != std::string::npos, text().c_str());
    // The router was told (apply tells it last, before it returns).
    const Deadline told = Deadline::AfterMs(30'000);
    bool has_new = false, has_old = true;
    while (!told.expired() && !(has_new && !has_old)) {
      httplib::Client cli(router);
      auto inst = cli.Get("/v1/router/instances");
      QVERIFY(inst && inst->status == 200);
      const json ij = json::parse(inst->body);
      has_new = has_old = false;
      for (const auto& u : ij["instances"]["large"]) {
        has_new = has_new || u == (*back)["url"];
        has_old = has_old || u == old_url;
      }
      if (!(has_new && !has_old)) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    QVERIFY2(has_new && !has_old, text().c_str());
    int code = 0;
    QCOMPARE(Complete(router, "anything", &code), std::string("large"));
    QCOMPARE(code, 200);

    // The file is read again every round. An edit with an error is reported
    // and changes nothing ...
    auto wait_for_text = [&](const std::string& words, int ms) {
      const Deadline until = Deadline::AfterMs(ms);
      while (text().find(words) == std::string::npos && !until.expired())
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      return text().find(words) != std::string::npos;
    };
    const auto ids = JobIds(Status());
    std::string broken = deploy_yaml_;
    broken.replace(broken.find("replicas: 2"), 11, "replics: 1");
    WriteFile(watched, broken);
    QVERIFY2(wait_for_text("changed but has errors; keeping what it said before", 20'000),
             text().c_str());
    QVERIFY2(wait_for_text("unknown key 'replics' in instance 'small'", 1000), text().c_str());
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // three rounds
    QVERIFY2(SameJobsSoon(ids), (ids_text_ + "\n" + text()).c_str());
    // ... a valid one is applied at once: one small replica fewer ...
    std::string one_small = deploy_yaml_;
    one_small.replace(one_small.find("replicas: 2"), 11, "replicas: 1");
    WriteFile(watched, one_small);
    QVERIFY2(wait_for_text("watched.yaml changed: applying", 20'000), text().c_str());
    QVERIFY2(wait_for_text("stopped small-1", 120'000), text().c_str());
    {
      const json st = Status();
      const json* gone = Replica(st, "small-1");
      QVERIFY2(!gone || ((*gone)["state"] != "ready" && (*gone)["state"] != "starting"),
               st.dump().c_str());
      QCOMPARE(JobIds(st).at("small-0"), ids.at("small-0"));
      QCOMPARE(JobIds(st).at("large-0"), ids.at("large-0"));
    }
    // ... and written back, small-1 runs again (and nothing else restarts).
    WriteFile(watched, deploy_yaml_);
    json again;
    const Deadline restored = Deadline::AfterMs(240'000);
    while (!restored.expired()) {
      again = Status();
      const json* r = Replica(again, "small-1");
      if (r && (*r)["state"] == "ready") break;
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
    QVERIFY2(Replica(again, "small-1") && (*Replica(again, "small-1"))["state"] == "ready",
             (again.dump() + "\n" + text()).c_str());
    QCOMPARE(JobIds(again).at("small-0"), ids.at("small-0"));
    QCOMPARE(JobIds(again).at("large-1"), ids.at("large-1"));
    QCOMPARE(JobIds(again).at("router"), ids.at("router"));

    // SIGTERM: the watch ends, the deployment runs on.
    (*watch)->Kill(SIGTERM);
    auto ended = (*watch)->Wait(Deadline::AfterMs(20'000));
    QVERIFY2(
        ended.ok() && ended->success(),
        ((ended.ok() ? ended->ToString() : ended.status().ToString()) + "\n" + text()).c_str());
    QVERIFY2(text().find("stopped watching") != std::string::npos, text().c_str());
    // (Running: "ready" needs its /health to answer within a second, which a
    // loaded machine may miss once; "starting" is running too.)
    const std::string new_job = (*back)["job_id"];
    const json after = Status();
    const json* still = Replica(after, "large-1");
    QVERIFY2(still && (*still)["job_id"] == new_job &&
                 ((*still)["state"] == "ready" || (*still)["state"] == "starting"),
             (after.dump() + "\n" + text()).c_str());
  }

  // A changed file changes only what changed: 3 -> 2 large replicas stops
  // large-2; another model for the small instance restarts small-0 and
  // small-1; large-0, large-1 and the router run on as they were.
  void aChangedFileChangesOnlyWhatChanged() {
    const auto ids = JobIds(Status());
    const std::string fx = test::FixturesDir();
    WriteFile(root_ + "/changed.yaml",
              "version: 1\nname: demo\ninstances:\n  - name: large\n    model: " + fx +
                  "/qwen3-tiny\n    tp: 2\n    replicas: 2\n    slots: 2\n"
                  "    context: 128\n    threads: 1\n  - name: small\n    model: " +
                  fx +
                  "/qwen3-tiny\n    tp: 1\n    replicas: 2\n    slots: 2\n"
                  "    context: 128\n    threads: 1\nrouter:\n  policy: policy.yaml\n");
    Run r = Deploy({"apply", root_ + "/changed.yaml", "--json", "--wait-ms", "240000"}, 300'000);
    QVERIFY2(r.code == 0, (r.out + r.err).c_str());
    QVERIFY2(r.doc["started"] == json::array({"small-0", "small-1"}), r.err.c_str());
    QCOMPARE(r.doc["kept"], json::array({"large-0", "large-1"}));
    std::set<std::string> stopped(r.doc["stopped"].begin(), r.doc["stopped"].end());
    QCOMPARE(stopped, (std::set<std::string>{"large-2", "small-0", "small-1"}));
    // large-2 reads stopped once the agents have seen both its ranks end.
    json st;
    for (int i = 0; i < 40; ++i) {
      st = Status();
      const json* gone = Replica(st, "large-2");
      if (gone && (*gone)["state"] == "stopped") break;
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
    }
    const auto now = JobIds(st);
    // 2 large, 2 small, the router, and large-2 that reads stopped.
    QCOMPARE(now.size(), size_t(6));
    QVERIFY2(Replica(st, "large-2") && (*Replica(st, "large-2"))["state"] == "stopped",
             st.dump().c_str());
    QCOMPARE(now.at("large-0"), ids.at("large-0"));
    QCOMPARE(now.at("large-1"), ids.at("large-1"));
    QCOMPARE(now.at("router"), ids.at("router"));
    QVERIFY(now.at("small-0") != ids.at("small-0"));
    QVERIFY(now.at("small-1") != ids.at("small-1"));
    QVERIFY2(Replica(st, "small-0") && (*Replica(st, "small-0"))["model"].get<std::string>().find(
                                           "qwen3-tiny") != std::string::npos,
             st.dump().c_str());
    // The router follows: two large endpoints, the small pool's new ones.
    httplib::Client cli(st["deployments"][0]["router"]["url"].get<std::string>());
    auto inst = cli.Get("/v1/router/instances");
    QVERIFY(inst && inst->status == 200);
    const json ij = json::parse(inst->body);
    QCOMPARE(ij["instances"]["large"].size(), size_t(2));
    QCOMPARE(ij["instances"]["small"].size(), size_t(2));
    for (const auto& u : ij["instances"]["small"]) {
      QVERIFY(u == (*Replica(st, "small-0"))["url"] || u == (*Replica(st, "small-1"))["url"]);
    }
    // (Through the router the small pool now answers 404: its policy still
    // names model minicpm-tiny, which the new replicas do not serve.)
  }

  void downLeavesNothingRunning() {
    std::vector<pid_t> pids;
    for (const auto& j : AllJobs()) {
      if (j.spec.deployment == "demo" && j.state == "running") pids.push_back(j.pid);
    }
    QVERIFY(pids.size() >= 7);  // 2 x 2 + 2 ranks and the router
    // Every rank holds its weights and KV cache: the nodes running one account
    // for memory in use.
    const std::vector<uint64_t> before = UsedBytesPerNode();
    const auto busy = std::count_if(before.begin(), before.end(),
                                    [](uint64_t u) { return u > 0 && u != UINT64_MAX; });
    QVERIFY2(busy >= 6, ("bytes in use per node:" + BytesText(before)).c_str());
    Run r = Deploy({"down", "demo", "--json"});
    QVERIFY2(r.code == 0, (r.out + r.err).c_str());
    for (const auto& j : AllJobs()) {
      QVERIFY2(!(j.spec.deployment == "demo" && j.state == "running"), j.spec.job_id.c_str());
    }
    for (pid_t p : pids) QVERIFY2(::kill(p, 0) != 0, std::to_string(p).c_str());
    // ... and after down no node accounts for any: the memory is free again.
    std::vector<uint64_t> after;
    for (const Deadline d = Deadline::AfterMs(10'000); !d.expired();) {
      after = UsedBytesPerNode();
      if (std::all_of(after.begin(), after.end(), [](uint64_t u) { return u == 0; })) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    QVERIFY2(std::all_of(after.begin(), after.end(), [](uint64_t u) { return u == 0; }),
             ("bytes in use per node after down:" + BytesText(after)).c_str());
    const json st = Status();
    QCOMPARE(st["deployments"].size(), size_t(0));
  }

  // A replica stopped while apply waits for the deployment to be ready (by
  // hand, here as soon as the next one is being started) ends the apply at
  // once, naming it, where it used to wait out its whole deadline for a
  // replica that would never be ready; what the apply started is stopped.
  void applyEndsWhenAReplicaIsStoppedWhileItWaits() {
    const std::string yaml =
        "version: 1\nname: halt\ninstances:\n  - name: small\n    model: " + test::FixturesDir() +
        "/minicpm-tiny\n    tp: 1\n    replicas: 2\n    slots: 2\n"
        "    context: 128\n    threads: 1\n";
    const auto parsed = ParseDeployment(yaml, "halt.yaml");
    QVERIFY2(parsed.ok(), parsed.status().ToString().c_str());
    ApplyOptions o;
    o.deadline = Deadline::AfterMs(120'000);
    std::string stopped, log;
    o.progress = [&](const std::string& line) {
      log += line + "\n";
      if (line.rfind("starting small-1", 0) != 0) return;
      for (const auto& j : AllJobs()) {
        if (j.spec.deployment == "halt" && j.spec.instance == "small-0") stopped = j.spec.job_id;
      }
      if (!stopped.empty()) (void)session_->StopJob(stopped, Deadline::AfterMs(10'000));
    };
    const auto r =
        ApplyDeployment(*session_, *parsed.deployment, PlacementInputFrom(session_->Snapshot()), o);
    QVERIFY2(!stopped.empty(), log.c_str());
    QVERIFY(!r.ok());
    QVERIFY2(r.status().message().find("small-0 was stopped while this apply waited") !=
                 std::string::npos,
             r.status().ToString().c_str());
    // ... and small-1, which it started, is stopped again.
    for (const auto& j : AllJobs()) {
      QVERIFY2(!(j.spec.deployment == "halt" && j.state == "running"), j.spec.job_id.c_str());
    }
  }

  // Ctrl-C while `deploy apply` waits for a replica: the command ends at once
  // with 128+SIGINT, saying so, and the replica it started is stopped (not a
  // half-applied deployment left behind). Two nodes of their own whose jobs
  // run a wrapper of octet that holds a worker for five minutes before it
  // starts, so the replica stays "starting".
  void applyInterruptedStopsWhatItStarted() {
    const std::string wrapper = root_ + "/slow-octet.sh";
    QVERIFY(test::WriteHeldWorkerOctet(wrapper));
    LocalClusterOptions o;
    o.nodes = 2;
    o.cabling = "switch";
    o.name = "dheld";
    o.memory_per_node_bytes = 4ull << 30;
    o.agent_binary = test::BinDir() + "/octet-agent";
    o.octet_binary = wrapper;
    o.state_dir = root_ + "/held-state";
    o.model_roots = {test::FixturesDir()};
    o.stop_grace_ms = 1000;
    auto cluster = LocalCluster::Start(o, Deadline::AfterMs(30'000));
    QVERIFY2(cluster.ok(), cluster.status().ToString().c_str());
    ClusterProfile saved = (*cluster)->profile();
    saved.dir = ProfileDir("dheld", config_);
    auto token = ReadFileToString((*cluster)->profile().token_file());
    QVERIFY(token.ok());
    QVERIFY(SaveProfile(saved).ok());
    QVERIFY(WriteFileAtomic(saved.token_file(), *token, 0600).ok());
    auto session = ClusterSession::Open((*cluster)->profile());
    QVERIFY2(session.ok(), session.status().ToString().c_str());
    auto running = [&] {
      std::vector<std::string> ids;
      for (size_t i = 0; i < (*session)->size(); ++i) {
        auto jobs = (*session)->client(i).ListJobs(Deadline::AfterMs(5000));
        if (!jobs.ok()) continue;
        for (const JobStatus& j : *jobs) {
          if (j.spec.deployment == "held" && j.state == "running") ids.push_back(j.spec.job_id);
        }
      }
      return ids;
    };
    const std::string file = root_ + "/held.yaml";
    WriteFile(file, "version: 1\nname: held\ninstances:\n  - name: small\n    model: " +
                        test::FixturesDir() +
                        "/minicpm-tiny\n    tp: 1\n    replicas: 1\n    context: 128\n"
                        "    threads: 1\n");
    auto err = std::make_shared<std::string>();
    auto mu = std::make_shared<std::mutex>();
    SpawnOptions so;
    so.argv = {test::BinDir() + "/octet",
               "deploy",
               "apply",
               file,
               "--cluster",
               "dheld",
               "--config-dir",
               config_};
    so.on_output = [err, mu](std::string_view chunk) {
      std::lock_guard<std::mutex> lock(*mu);
      err->append(chunk);
    };
    auto apply = Subprocess::Spawn(so);
    QVERIFY2(apply.ok(), apply.status().ToString().c_str());
    // The replica's job runs (its worker held): the apply waits for it.
    const Deadline started = Deadline::AfterMs(60'000);
    while (running().empty() && !started.expired())
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    QVERIFY2(!running().empty(), err->c_str());
    QCOMPARE(::kill((*apply)->pid(), SIGINT), 0);
    auto st = (*apply)->Wait(Deadline::AfterMs(30'000));
    QVERIFY2(st.ok(), "octet deploy apply did not end within 30 s of SIGINT");
    std::lock_guard<std::mutex> lock(*mu);
    QVERIFY2(st->exited && st->code == 128 + SIGINT, err->c_str());
    QVERIFY2(err->find("interrupted: stopped while waiting for small-0") != std::string::npos,
             err->c_str());
    QVERIFY2(running().empty(), err->c_str());
  }
};

QTEST_GUILESS_MAIN(TestDeployCluster)
#include "test_deploy_cluster.moc"
