// An inference instance launched through the agents of a cluster (what the
// workbench's Launch panel does for a remote cluster), against three real
// octet-agent processes on loopback running this build's `octet worker`:
// a TP 2 job of the fixture Qwen3 model starts on two nodes, streams rank 0's
// log, becomes ready, answers a completion over HTTP and is stopped through
// the agents; a model folder that is not on the node is the agent's refusal
// naming the rank and node; a TP degree that does not divide the heads fails
// with the worker's own reason, reported through its agent. A router runs on
// one node through its agent and serves; one whose policy file is not on the
// node fails with the router's own words. A training run is data-parallel
// across two nodes' agents (rank 0's rendezvous joined by rank 1), reports
// its steps, finishes with the model in its folder; one whose data is broken
// fails with the trainer's line.
#include <httplib.h>

#include <QDir>
#include <QFile>
#include <QtTest>
#include <cmath>
#include <mutex>

#include "octet/app/cluster_session.h"
#include "octet/app/local_cluster.h"
#include "octet/app/remote_instance.h"
#include "octet/base/json.h"
#include "octet/base/net_util.h"
#include "octet_test.h"

using namespace octet;
using namespace octet::app;

namespace {

// What an instance reported, gathered from its threads.
struct Recorder {
  std::mutex mu;
  std::vector<std::string> lines;
  std::vector<RemoteInstanceStatus> statuses;

  RemoteInstance::LineFn OnLine() {
    return [this](const std::string& line) {
      std::lock_guard<std::mutex> lock(mu);
      lines.push_back(line);
    };
  }
  RemoteInstance::StatusFn OnStatus() {
    return [this](const RemoteInstanceStatus& s) {
      std::lock_guard<std::mutex> lock(mu);
      statuses.push_back(s);
    };
  }
  std::vector<TrainingFigures> figures;

  RemoteInstance::FiguresFn OnFigures() {
    return [this](const TrainingFigures& f) {
      std::lock_guard<std::mutex> lock(mu);
      figures.push_back(f);
    };
  }
  bool Saw(RemoteInstanceStatus::Phase phase) {
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& s : statuses) {
      if (s.phase == phase) return true;
    }
    return false;
  }
  std::string Log() {
    std::lock_guard<std::mutex> lock(mu);
    std::string all;
    for (const auto& l : lines) all += l + "\n";
    return all;
  }
};

const JobStatus* FindJob(const std::vector<JobStatus>& jobs, const std::string& id) {
  for (const auto& j : jobs) {
    if (j.spec.job_id == id) return &j;
  }
  return nullptr;
}

}  // namespace

class TestRemoteInstance : public QObject {
  Q_OBJECT
 private:
  QTemporaryDir dir_;
  std::unique_ptr<LocalCluster> cluster_;
  std::shared_ptr<ClusterSession> session_;
  std::string model_;
  std::string runs_;  // a model root for training runs' folders
  std::string data_;  // prepared training data

  RemoteInstanceSpec TrainingSpec(const std::string& id, std::vector<size_t> nodes,
                                  const std::string& data) {
    RemoteInstanceSpec spec;
    spec.kind = JobKind::kTraining;
    spec.job_id = id;
    spec.model_dir = runs_ + "/" + id;
    spec.nodes = std::move(nodes);
    spec.transport = "tcp";
    spec.threads = 1;
    spec.poll_interval_ms = 100;
    spec.train_data_dir = data;
    spec.train_config = "tiny";
    spec.train_steps = 4;
    spec.train_seq_len = 32;
    spec.train_batch_size = 2;
    spec.train_eval_every = 2;
    return spec;
  }

  RemoteInstanceSpec Spec(const std::string& id, std::vector<size_t> nodes) {
    RemoteInstanceSpec spec;
    spec.job_id = id;
    spec.model_dir = model_;
    spec.nodes = std::move(nodes);
    spec.transport = "tcp";
    spec.threads = 1;
    spec.num_slots = 2;
    spec.context = 256;
    spec.port = static_cast<uint32_t>(FreeLoopbackPort());
    spec.poll_interval_ms = 100;
    return spec;
  }

 private slots:
  void initTestCase() {
    OCTET_REQUIRE_FIXTURES();
    QVERIFY(dir_.isValid());
    model_ = test::FixturesDir() + "/qwen3-tiny";
    LocalClusterOptions o;
    o.nodes = 3;
    o.cabling = "switch";
    o.agent_binary = test::BinDir() + "/octet-agent";
    o.octet_binary = test::BinDir() + "/octet";
    o.state_dir = dir_.path().toStdString() + "/state";
    runs_ = dir_.path().toStdString() + "/runs";
    QVERIFY(QDir().mkpath(QString::fromStdString(runs_)));
    // The runs, the policies and the training data all lie inside the roots
    // (an agent refuses any of them outside).
    o.model_roots = {test::FixturesDir(), dir_.path().toStdString()};
    o.stop_grace_ms = 1000;
    auto c = LocalCluster::Start(o, Deadline::AfterMs(30'000));
    QVERIFY2(c.ok(), c.status().ToString().c_str());
    cluster_ = std::move(*c);
    // Training data: a small text corpus (four documents, one of them for
    // validation), prepared as a user would on the nodes.
    QVERIFY(QDir().mkpath(dir_.path() + "/text"));
    uint32_t x = 12345;
    for (int d = 0; d < 4; ++d) {
      QFile text(dir_.path() + QStringLiteral("/text/doc%1.txt").arg(d));
      QVERIFY(text.open(QIODevice::WriteOnly));
      const char* words[] = {"the", "node", "cable", "rank", "step", "loss", "ring", "model"};
      for (int i = 0; i < 2000; ++i) {
        x = x * 1664525u + 1013904223u;
        text.write(words[(x >> 16) % 8]);
        text.write(i % 12 == 11 ? ".\n" : " ");
      }
    }
    data_ = dir_.path().toStdString() + "/data";
    const auto prepared =
        test::RunProgram({"octet", "train", "prepare", "--out", data_, "--vocab-size", "300",
                          dir_.path().toStdString() + "/text"},
                         120'000);
    QVERIFY2(prepared.exit_code == 0, prepared.output.c_str());
    ClusterSessionOptions so;
    so.telemetry_interval_ms = 200;
    so.refresh_interval_ms = 300;
    auto s = ClusterSession::Open(cluster_->profile(), so);
    QVERIFY2(s.ok(), s.status().ToString().c_str());
    session_ = std::move(*s);
    QVERIFY(session_->WaitUntil(
        [](const ClusterSnapshot& snap) {
          for (const auto& n : snap.nodes) {
            if (n.state != NodeState::kUp) return false;
          }
          return !snap.nodes.empty();
        },
        Deadline::AfterMs(30'000)));
  }

  void cleanupTestCase() {
    session_.reset();
    cluster_.reset();
  }

  void tp2ServesAnswersAndStops() {
    Recorder rec;
    const RemoteInstanceSpec spec = Spec("tiny-tp2", {1, 2});
    auto inst = RemoteInstance::Launch(session_, spec, rec.OnLine(), rec.OnStatus(),
                                       Deadline::AfterMs(30'000));
    QVERIFY2(inst.ok(), inst.status().ToString().c_str());
    // Both ranks run on their nodes, as their agents say.
    for (size_t n : spec.nodes) {
      auto jobs = session_->client(n).ListJobs(Deadline::AfterMs(5000));
      QVERIFY2(jobs.ok(), jobs.status().ToString().c_str());
      const JobStatus* j = FindJob(*jobs, "tiny-tp2");
      QVERIFY(j);
      QCOMPARE(j->spec.world_size, 2u);
    }
    QVERIFY2(QTest::qWaitFor(
                 [&] {
                   const auto p = (*inst)->status().phase;
                   return p == RemoteInstanceStatus::Phase::kReady ||
                          p == RemoteInstanceStatus::Phase::kFailed;
                 },
                 60'000),
             rec.Log().c_str());
    const RemoteInstanceStatus ready = (*inst)->status();
    QVERIFY2(ready.phase == RemoteInstanceStatus::Phase::kReady,
             (ready.error + "\n" + rec.Log()).c_str());
    QCOMPARE(ready.url, "http://127.0.0.1:" + std::to_string(spec.port));
    // Rank 0's log came through its agent (it says where it serves).
    QVERIFY2(rec.Log().find("serving") != std::string::npos, rec.Log().c_str());

    // It answers: a completion of four tokens from prompt ids.
    httplib::Client http("127.0.0.1", static_cast<int>(spec.port));
    http.set_read_timeout(60, 0);
    auto res = http.Post("/v1/completions", R"({"prompt": [1, 2, 3], "max_tokens": 4})",
                         "application/json");
    QVERIFY(res);
    QVERIFY2(res->status == 200, res->body.c_str());
    const auto body = nlohmann::json::parse(res->body, nullptr, false);
    QVERIFY2(body.is_object() && body.contains("choices"), res->body.c_str());
    const int tokens = body["usage"]["completion_tokens"].get<int>();
    QVERIFY2(tokens >= 1 && tokens <= 4, res->body.c_str());
    qInfo("answered through %s: %s", ready.url.c_str(), res->body.c_str());

    // Stopped through the agents: every rank ends, none failed.
    const Status stopped = (*inst)->Stop(Deadline::AfterMs(30'000));
    QVERIFY2(stopped.ok(), stopped.ToString().c_str());
    QVERIFY(QTest::qWaitFor(
        [&] { return (*inst)->status().phase == RemoteInstanceStatus::Phase::kStopped; }, 30'000));
    QVERIFY(rec.Saw(RemoteInstanceStatus::Phase::kStopping));
    QVERIFY(!rec.Saw(RemoteInstanceStatus::Phase::kFailed));
    for (size_t n : spec.nodes) {
      auto jobs = session_->client(n).ListJobs(Deadline::AfterMs(5000));
      QVERIFY(jobs.ok());
      const JobStatus* j = FindJob(*jobs, "tiny-tp2");
      QVERIFY(j);
      QVERIFY2(j->state != "running", j->state.c_str());
    }
  }

  void missingModelIsTheAgentsRefusal() {
    Recorder rec;
    RemoteInstanceSpec spec = Spec("no-model", {0, 1});
    spec.model_dir = test::FixturesDir() + "/no-such-model";
    auto inst = RemoteInstance::Launch(session_, spec, rec.OnLine(), rec.OnStatus(),
                                       Deadline::AfterMs(30'000));
    QVERIFY(!inst.ok());
    const std::string why = inst.status().message();
    qInfo("refused: %s", why.c_str());
    // The agent's own words, with the rank and node they came from.
    QVERIFY2(why.find("not found on this node") != std::string::npos, why.c_str());
    QVERIFY2(why.find("rank 0") != std::string::npos, why.c_str());
    QVERIFY2(why.find(session_->Snapshot().nodes[0].name) != std::string::npos, why.c_str());
    QVERIFY(rec.statuses.empty());
  }

  void tpThatDoesNotDivideTheHeadsFails() {
    // The fixture model has 4 query heads: 3 ranks cannot split them.
    Recorder rec;
    const RemoteInstanceSpec spec = Spec("tiny-tp3", {0, 1, 2});
    auto inst = RemoteInstance::Launch(session_, spec, rec.OnLine(), rec.OnStatus(),
                                       Deadline::AfterMs(30'000));
    QVERIFY2(inst.ok(), inst.status().ToString().c_str());
    QVERIFY2(QTest::qWaitFor(
                 [&] { return (*inst)->status().phase == RemoteInstanceStatus::Phase::kFailed; },
                 60'000),
             rec.Log().c_str());
    const std::string error = (*inst)->status().error;
    qInfo("failed: %s", error.c_str());
    QVERIFY2(error.find("not divisible by 3") != std::string::npos, error.c_str());
    QVERIFY2(
        error.find("rank ") != std::string::npos && error.find(" on node ") != std::string::npos,
        error.c_str());
    QVERIFY(!rec.Saw(RemoteInstanceStatus::Phase::kReady));
    // The other ranks are stopped, not left waiting for their peers.
    QVERIFY(QTest::qWaitFor(
        [&] {
          for (size_t n : spec.nodes) {
            auto jobs = session_->client(n).ListJobs(Deadline::AfterMs(5000));
            if (!jobs.ok()) return false;
            const JobStatus* j = FindJob(*jobs, "tiny-tp3");
            if (j && j->state == "running") return false;
          }
          return true;
        },
        30'000));
  }

  void routerServesThroughItsAgentAndStops() {
    const std::string policy = dir_.path().toStdString() + "/policy.yaml";
    {
      QFile f(QString::fromStdString(policy));
      QVERIFY(f.open(QIODevice::WriteOnly));
      f.write(
          "version: 1\ngateway:\n  host: 127.0.0.1\n  port: 8080\n  threads: 4\n"
          "  watch: false\n  model_name: remote-router\npools:\n  - name: small\n"
          "    replicas:\n      - http://127.0.0.1:1\nroutes:\n  - name: all\n"
          "    pool: small\n");
    }
    Recorder rec;
    RemoteInstanceSpec spec;
    spec.kind = JobKind::kRouter;
    spec.job_id = "router-1";
    spec.policy_file = policy;
    spec.nodes = {2};
    spec.poll_interval_ms = 100;
    auto inst = RemoteInstance::Launch(session_, spec, rec.OnLine(), rec.OnStatus(),
                                       Deadline::AfterMs(30'000));
    QVERIFY2(inst.ok(), inst.status().ToString().c_str());
    QVERIFY2(
        QTest::qWaitFor(
            [&] { return (*inst)->status().phase == RemoteInstanceStatus::Phase::kReady; }, 30'000),
        rec.Log().c_str());
    // Any free port (not the policy's 8080), where this machine reaches node 2's agent.
    const std::string url = (*inst)->status().url;
    QVERIFY2(url.rfind("http://127.0.0.1:", 0) == 0 && url != "http://127.0.0.1:8080", url.c_str());
    QVERIFY2(rec.Log().find("octet route: serving") != std::string::npos, rec.Log().c_str());
    httplib::Client http(url);
    http.set_read_timeout(10, 0);
    auto models = http.Get("/v1/models");
    QVERIFY(models);
    QCOMPARE(models->status, 200);
    QVERIFY2(models->body.find("remote-router") != std::string::npos, models->body.c_str());
    // The job runs on node 2 only.
    auto jobs = session_->client(2).ListJobs(Deadline::AfterMs(5000));
    QVERIFY(jobs.ok());
    const JobStatus* job = FindJob(*jobs, "router-1");
    QVERIFY(job && job->state == "running" && job->spec.kind == JobKind::kRouter);

    QVERIFY2((*inst)->Stop(Deadline::AfterMs(30'000)).ok(), "stop");
    QVERIFY(QTest::qWaitFor(
        [&] { return (*inst)->status().phase == RemoteInstanceStatus::Phase::kStopped; }, 30'000));
    QVERIFY(!rec.Saw(RemoteInstanceStatus::Phase::kFailed));
  }

  // A missing policy is refused by the agent before anything runs, naming the
  // file and the node.
  void routerWithoutItsPolicyIsRefusedNamingIt() {
    Recorder rec;
    RemoteInstanceSpec spec;
    spec.kind = JobKind::kRouter;
    spec.job_id = "router-missing";
    spec.policy_file = dir_.path().toStdString() + "/no-such-policy.yaml";
    spec.nodes = {0};
    spec.poll_interval_ms = 100;
    auto inst = RemoteInstance::Launch(session_, spec, rec.OnLine(), rec.OnStatus(),
                                       Deadline::AfterMs(30'000));
    QVERIFY(!inst.ok());
    QCOMPARE(inst.status().code(), StatusCode::kNotFound);
    const std::string error = inst.status().ToString();
    qInfo("failed: %s", error.c_str());
    QVERIFY2(error.find("no-such-policy.yaml") != std::string::npos, error.c_str());
    QVERIFY2(
        error.find("rank 0 on node " + session_->Snapshot().nodes[0].name) != std::string::npos,
        error.c_str());
  }

  void trainingIsDataParallelAcrossTwoNodes() {
    Recorder rec;
    const RemoteInstanceSpec spec = TrainingSpec("train-dp2", {0, 1}, data_);
    QVERIFY(QDir().mkpath(QString::fromStdString(spec.model_dir)));
    auto inst = RemoteInstance::Launch(session_, spec, rec.OnLine(), rec.OnStatus(),
                                       Deadline::AfterMs(30'000), rec.OnFigures());
    QVERIFY2(inst.ok(), inst.status().ToString().c_str());
    // Both ranks run, each on its node.
    for (size_t n : {size_t{0}, size_t{1}}) {
      auto jobs = session_->client(n).ListJobs(Deadline::AfterMs(5000));
      QVERIFY(jobs.ok());
      const JobStatus* job = FindJob(*jobs, "train-dp2");
      QVERIFY2(job, std::to_string(n).c_str());
      QVERIFY(job->spec.kind == JobKind::kTraining);
      QCOMPARE(job->spec.world_size, uint32_t{2});
      QCOMPARE(job->spec.rank, uint32_t(n));
    }
    QVERIFY2(QTest::qWaitFor(
                 [&] {
                   const auto p = (*inst)->status().phase;
                   return p == RemoteInstanceStatus::Phase::kFinished ||
                          p == RemoteInstanceStatus::Phase::kFailed;
                 },
                 120'000),
             rec.Log().c_str());
    QVERIFY2((*inst)->status().phase == RemoteInstanceStatus::Phase::kFinished,
             ((*inst)->status().error + "\n" + rec.Log()).c_str());
    QVERIFY(rec.Saw(RemoteInstanceStatus::Phase::kRunning));
    const std::string log = rec.Log();
    // Rank 0 reports the data-parallel group of two ranks and every step.
    QVERIFY2(log.find("2 rank(s)") != std::string::npos, log.c_str());
    QVERIFY2(log.find("step 4/4") != std::string::npos, log.c_str());
    {
      std::lock_guard<std::mutex> lock(rec.mu);
      TrainingCurves curves;
      for (const auto& f : rec.figures) curves.Add(f);
      QCOMPARE(curves.train_loss().size(), size_t{4});
      QCOMPARE(curves.total_steps(), int64_t{4});
      QVERIFY(!curves.val_loss().empty());
      for (const auto& p : curves.train_loss()) QVERIFY(std::isfinite(p.value) && p.value > 0);
    }
    // Rank 0 exported the model into the run's folder.
    QVERIFY(QFile::exists(QString::fromStdString(spec.model_dir + "/config.json")));
    QVERIFY(QFile::exists(QString::fromStdString(spec.model_dir + "/model.safetensors")));
  }

  void brokenTrainingDataFailsWithTheTrainersLine() {
    const std::string broken = dir_.path().toStdString() + "/broken-data";
    QVERIFY(QDir().mkpath(QString::fromStdString(broken)));
    {
      QFile meta(QString::fromStdString(broken + "/meta.json"));
      QVERIFY(meta.open(QIODevice::WriteOnly));
      meta.write("{ this is not json");
    }
    Recorder rec;
    const RemoteInstanceSpec spec = TrainingSpec("train-broken", {1, 2}, broken);
    QVERIFY(QDir().mkpath(QString::fromStdString(spec.model_dir)));
    auto inst = RemoteInstance::Launch(session_, spec, rec.OnLine(), rec.OnStatus(),
                                       Deadline::AfterMs(30'000), rec.OnFigures());
    QVERIFY2(inst.ok(), inst.status().ToString().c_str());
    QVERIFY2(QTest::qWaitFor(
                 [&] { return (*inst)->status().phase == RemoteInstanceStatus::Phase::kFailed; },
                 60'000),
             rec.Log().c_str());
    const std::string error = (*inst)->status().error;
    qInfo("failed: %s", error.c_str());
    QVERIFY2(error.find("meta.json") != std::string::npos, error.c_str());
    QVERIFY2(error.find(" on node ") != std::string::npos, error.c_str());
    QVERIFY(!rec.Saw(RemoteInstanceStatus::Phase::kFinished));
  }
};

QTEST_GUILESS_MAIN(TestRemoteInstance)
#include "test_remote_instance.moc"
