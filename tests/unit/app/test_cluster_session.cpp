// The cluster session against a local embedded cluster of real octet-agent
// processes: nodes come up with their budgets and distinct ids, the declared
// cabling is classified, a killed agent is reported lost and then recovered
// when it returns (same node id), jobs are launched across nodes with the
// rendezvous wired (with a stand-in worker), and TLS works end to end.
#include <signal.h>

#include <QtTest>
#include <atomic>
#include <mutex>
#include <set>

#include "octet/agent/agent_server.h"
#include "octet/agent/cluster_token.h"
#include "octet/app/cluster_session.h"
#include "octet/app/local_cluster.h"
#include "octet/app/tls_material.h"
#include "octet/base/file_util.h"
#include "octet_test.h"
#include "recorded_sysfs.h"

using namespace octet;
using namespace octet::app;

namespace {

std::string FakeWorker() { return JoinPath(DirName(*SelfExecutablePath()), "octet_fake_worker"); }

struct EventLog {
  std::mutex mu;
  std::vector<ClusterEvent> events;
  void Add(const ClusterEvent& e) {
    std::lock_guard<std::mutex> lock(mu);
    events.push_back(e);
  }
  // Events are delivered just after the snapshot changes: wait for them.
  bool WaitFor(ClusterEvent::Kind kind, int node, int count, int ms = 5000) {
    const Deadline d = Deadline::AfterMs(ms);
    while (Count(kind, node) < count) {
      if (d.expired()) return false;
      QThread::msleep(10);
    }
    return true;
  }
  int Count(ClusterEvent::Kind kind, int node) {
    std::lock_guard<std::mutex> lock(mu);
    int n = 0;
    for (const auto& e : events) n += (e.kind == kind && e.node == node) ? 1 : 0;
    return n;
  }
};

bool AllUp(const ClusterSnapshot& s) {
  for (const auto& n : s.nodes) {
    if (n.state != NodeState::kUp || !n.has_links || !n.has_telemetry) return false;
  }
  return true;
}

}  // namespace

class TestClusterSession : public QObject {
  Q_OBJECT
 private:
  QTemporaryDir dir_;
  std::string models_;
  std::unique_ptr<LocalCluster> cluster_;
  std::unique_ptr<ClusterSession> session_;
  EventLog events_;

 private slots:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    models_ = dir_.path().toStdString() + "/models";
    QVERIFY(MakeDirs(models_ + "/tiny").ok());
    LocalClusterOptions o;
    o.nodes = 3;
    o.memory_per_node_bytes = 2ull << 30;
    o.cabling = "ring";
    o.name = "test";
    o.state_dir = dir_.path().toStdString() + "/state";
    o.agent_binary = test::BinDir() + "/octet-agent";
    o.octet_binary = FakeWorker();
    o.octet_binary_flags = test::FakeWorkerFlags();
    o.model_roots = {models_};
    o.stop_grace_ms = 1000;
    auto c = LocalCluster::Start(o, Deadline::AfterMs(30'000));
    QVERIFY2(c.ok(), c.status().ToString().c_str());
    cluster_ = std::move(*c);
    ClusterSessionOptions so;
    so.telemetry_interval_ms = 100;
    so.retry_interval_ms = 200;
    so.refresh_interval_ms = 300;
    auto s = ClusterSession::Open(cluster_->profile(), so);
    QVERIFY2(s.ok(), s.status().ToString().c_str());
    session_ = std::move(*s);
    session_->SetListener([this](const ClusterEvent& e) { events_.Add(e); });
    QVERIFY(session_->WaitUntil(AllUp, Deadline::AfterMs(20'000)));
  }
  void cleanupTestCase() {
    session_.reset();
    cluster_.reset();
  }

  void nodesComeUpWithBudgetsAndDistinctIds() {
    const ClusterSnapshot s = session_->Snapshot();
    QCOMPARE(s.nodes.size(), size_t{3});
    std::set<std::string> ids;
    for (size_t i = 0; i < s.nodes.size(); ++i) {
      const NodeView& n = s.nodes[i];
      QCOMPARE(n.name, "test-" + std::to_string(i));
      QVERIFY(n.facts.simulated);
      QCOMPARE(n.facts.memory.budget_bytes, 2ull << 30);
      QCOMPARE(n.telemetry.mem_total_bytes, 2ull << 30);
      QCOMPARE(n.facts.declared_cabling, std::string("ring"));
      QCOMPARE(n.facts.address, cluster_->address(i));
      ids.insert(n.facts.node_id);
    }
    QCOMPARE(ids.size(), size_t{3});
    QCOMPARE(s.cabling.kind, CablingKind::kRing);
    QVERIFY(s.cabling.declared);
    QCOMPARE(s.cabling.ring_order, (std::vector<std::string>{"test-0", "test-1", "test-2"}));
    QVERIFY(events_.WaitFor(ClusterEvent::Kind::kNodeUp, 0, 1));
    QCOMPARE(events_.Count(ClusterEvent::Kind::kNodeUp, 0), 1);
  }

  void killedAgentIsLostThenRecovers() {
    const std::string id_before = session_->Snapshot().nodes[1].facts.node_id;
    QVERIFY(cluster_->KillNode(1).ok());
    QVERIFY(session_->WaitUntil(
        [](const ClusterSnapshot& s) { return s.nodes[1].state == NodeState::kLost; },
        Deadline::AfterMs(10'000)));
    ClusterSnapshot s = session_->Snapshot();
    QVERIFY(events_.WaitFor(ClusterEvent::Kind::kNodeLost, 1, 1));
    QCOMPARE(events_.Count(ClusterEvent::Kind::kNodeLost, 1), 1);
    QVERIFY(!s.nodes[1].last_error.empty());
    QCOMPARE(s.nodes[1].times_lost, 1u);
    QVERIFY2(s.nodes[0].state == NodeState::kUp, s.nodes[0].last_error.c_str());
    QVERIFY(session_->WaitUntil(
        [](const ClusterSnapshot& s) { return s.cabling.kind == CablingKind::kPartial; },
        Deadline::AfterMs(5'000)));
    s = session_->Snapshot();
    bool unreachable = false;
    for (const auto& p : s.cabling.problems)
      unreachable = unreachable || (p.kind == "unreachable" && p.nodes[0] == "test-1");
    QVERIFY(unreachable);

    QVERIFY(cluster_->RestartNode(1, Deadline::AfterMs(20'000)).ok());
    QVERIFY(session_->WaitUntil(AllUp, Deadline::AfterMs(20'000)));
    QVERIFY(session_->WaitUntil(
        [](const ClusterSnapshot& s) { return s.cabling.kind == CablingKind::kRing; },
        Deadline::AfterMs(5'000)));
    QVERIFY(events_.WaitFor(ClusterEvent::Kind::kNodeRecovered, 1, 1));
    QCOMPARE(events_.Count(ClusterEvent::Kind::kNodeRecovered, 1), 1);
    QCOMPARE(session_->Snapshot().nodes[1].facts.node_id, id_before);  // same node, same id
  }

  void jobAcrossNodesGetsOneRendezvous() {
    JobRequest req;
    req.job_id = "tp3";
    req.model = models_ + "/tiny";
    req.nodes = {2, 0, 1};  // rank 0 on test-2
    req.transport = "shm";
    req.algorithm = "oneshot";
    req.port = 18080;
    req.extra_args = {"--fake-lines=3", "--fake-sleep"};
    auto launch = session_->LaunchJob(req, Deadline::AfterMs(20'000));
    QVERIFY2(launch.ok(), launch.status().ToString().c_str());
    QCOMPARE(launch->ranks.size(), size_t{3});
    QVERIFY(launch->rendezvous.rfind("127.0.0.1:", 0) == 0);
    QVERIFY(launch->rendezvous != "127.0.0.1:0");
    for (uint32_t r = 0; r < 3; ++r) {
      const size_t node = req.nodes[r];
      QVERIFY(launch->ranks[r].pid > 0);
      std::string logs;
      const Deadline d = Deadline::AfterMs(5000);
      while (!d.expired() && logs.find("line 3") == std::string::npos) {
        logs = session_->client(node).ReadLogs("tp3", Deadline::AfterMs(5000)).value_or("");
        QThread::msleep(20);
      }
      const std::string wiring = "--world-size 3 --rank " + std::to_string(r) + " --rendezvous " +
                                 launch->rendezvous + " --transport shm --algo oneshot";
      QVERIFY2(logs.find(wiring) != std::string::npos, logs.c_str());
      QCOMPARE(logs.find("--port 18080") != std::string::npos, r == 0);  // only rank 0 serves
    }
    QVERIFY(session_->WaitUntil(
        [](const ClusterSnapshot& s) {
          for (const auto& n : s.nodes) {
            if (n.jobs.empty() || n.jobs[0].state != "running") return false;
          }
          return true;
        },
        Deadline::AfterMs(10'000)));
    // The job's processes show in telemetry with their memory.
    QVERIFY(session_->WaitUntil(
        [](const ClusterSnapshot& s) { return s.nodes[0].telemetry.workers.size() == 1; },
        Deadline::AfterMs(5'000)));
    QVERIFY(session_->StopJob("tp3", Deadline::AfterMs(20'000)).ok());
    for (size_t n = 0; n < 3; ++n) {
      auto jobs = session_->client(n).ListJobs(Deadline::AfterMs(5000));
      QVERIFY(jobs.ok());
      QCOMPARE(jobs->size(), size_t{1});
      QCOMPARE((*jobs)[0].state, std::string("stopped"));
    }
    QCOMPARE(session_->StopJob("never-started", Deadline::AfterMs(5000)).code(),
             StatusCode::kNotFound);
  }

  void failedRankRollsBackTheOthers() {
    // Occupy the id on test-1 so rank 1 fails after rank 0 has started.
    JobSpec blocker;
    blocker.job_id = "clash";
    blocker.model = models_ + "/tiny";
    blocker.extra_args = {"--fake-sleep"};
    QVERIFY(session_->client(1).StartJob(blocker, Deadline::AfterMs(5000)).ok());
    JobRequest req;
    req.job_id = "clash";
    req.model = models_ + "/tiny";
    req.nodes = {0, 1};
    req.extra_args = {"--fake-sleep"};
    auto launch = session_->LaunchJob(req, Deadline::AfterMs(20'000));
    QCOMPARE(launch.status().code(), StatusCode::kAlreadyExists);
    QVERIFY2(launch.status().message().find("rank 1 on node test-1") != std::string::npos,
             launch.status().message().c_str());
    auto on0 = session_->client(0).ListJobs(Deadline::AfterMs(5000));
    QVERIFY(on0.ok());
    bool stopped = false;
    for (const auto& j : *on0)
      stopped = stopped || (j.spec.job_id == "clash" && j.state == "stopped");
    QVERIFY(stopped);
    QVERIFY(session_->client(1).StopJob("clash", Deadline::AfterMs(10'000)).ok());
  }

  void launchChecksItsRequest() {
    JobRequest req;
    req.job_id = "bad";
    req.model = models_ + "/tiny";
    QCOMPARE(session_->LaunchJob(req, Deadline::AfterMs(1000)).status().code(),
             StatusCode::kInvalidArgument);
    req.nodes = {0, 0};
    QCOMPARE(session_->LaunchJob(req, Deadline::AfterMs(1000)).status().code(),
             StatusCode::kInvalidArgument);
    req.nodes = {0, 7};
    QCOMPARE(session_->LaunchJob(req, Deadline::AfterMs(1000)).status().code(),
             StatusCode::kInvalidArgument);
    req.nodes = {0};
    req.model = "/etc";
    QCOMPARE(session_->LaunchJob(req, Deadline::AfterMs(5000)).status().code(),
             StatusCode::kPermissionDenied);
  }

  void logsStreamUntilTheJobEnds() {
    JobSpec spec;
    spec.job_id = "stream";
    spec.model = models_ + "/tiny";
    spec.extra_args = {"--fake-lines=500", "--fake-exit=4"};
    std::mutex mu;
    std::string text;
    std::atomic<bool> ended{false};
    Status end_status = InternalError("not ended");
    QVERIFY(session_->client(0).StartJob(spec, Deadline::AfterMs(5000)).ok());
    auto stream = session_->client(0).StreamLogs(
        "stream", true,
        [&](const std::string& t) {
          std::lock_guard<std::mutex> lock(mu);
          text += t;
        },
        [&](const Status& s) {
          std::lock_guard<std::mutex> lock(mu);
          end_status = s;
          ended = true;
        });
    const Deadline d = Deadline::AfterMs(10'000);
    while (!ended && !d.expired()) QThread::msleep(10);
    QVERIFY(ended);
    std::lock_guard<std::mutex> lock(mu);
    QVERIFY2(end_status.ok(), end_status.ToString().c_str());
    QVERIFY(text.find("line 500\n") != std::string::npos);
    auto jobs = session_->client(0).ListJobs(Deadline::AfterMs(5000));
    for (const auto& j : *jobs) {
      if (j.spec.job_id != "stream") continue;
      QCOMPARE(j.state, std::string("failed"));
      QCOMPARE(j.exit_code, 4);
      QVERIFY(j.exit_reason.rfind("exit code 4", 0) == 0);
    }
  }

  void probesMeasureEveryDeclaredLink() {
    const auto reports = session_->ProbeLinks(1 << 20, 10, Deadline::AfterMs(20'000));
    QCOMPARE(reports.size(), size_t{3});
    for (const auto& r : reports) {
      QVERIFY2(r.ok, r.error.c_str());
      QVERIFY(r.result.rtt_us_p50 > 0);
      QVERIFY(r.result.throughput_gbps > 0);
    }
  }

  // RoCE facts reach the session's snapshot as plain values: an agent (a real
  // node) reading the recorded Spark tree with a 1500 MTU on one half and the
  // other half down, and the summary the cabling view draws from them.
  void roceFactsReachTheSnapshot() {
    const std::string tree =
        test::SparkWithMtu1500AndDownHalf(dir_.path().toStdString() + "/roce-sys");
    QVERIFY(!tree.empty());
    agent::AgentConfig cfg;
    cfg.listen = "127.0.0.1:0";
    cfg.token = "roce-token-0123456789";
    cfg.identity.state_dir = dir_.path().toStdString() + "/roce-state";
    cfg.discovery = false;
    cfg.rdma_sys_root = tree;
    auto server = agent::AgentServer::Start(cfg);
    QVERIFY2(server.ok(), server.status().ToString().c_str());
    ClusterSessionOptions so;
    so.telemetry_interval_ms = 100;
    auto session =
        ClusterSession::Open("roce", {{"spark-1", {(*server)->address(), cfg.token, "", ""}}}, so);
    QVERIFY2(session.ok(), session.status().ToString().c_str());
    QVERIFY((*session)->WaitUntil([](const ClusterSnapshot& s) { return s.nodes[0].has_facts; },
                                  Deadline::AfterMs(10'000)));
    const NodeFacts f = (*session)->Snapshot().nodes[0].facts;
    QCOMPARE(f.rdma_devices.size(), size_t{4});
    const RdmaDeviceFacts& d = f.rdma_devices[3];
    QCOMPARE(d.name, std::string("rocep1s0f1"));
    QCOMPARE(d.pci_address, std::string("0000:01:00.1"));
    QCOMPARE(d.ports.at(0).netdev_mtu, 1500u);
    QCOMPARE(d.ports[0].active_mtu, 1024u);
    QCOMPARE(d.ports[0].phys_state, std::string("LinkUp"));
    QCOMPARE(d.ports[0].gid_table.size(), size_t{4});
    QCOMPARE(d.ports[0].gid_table[3].type, std::string("RoCE v2"));
    QCOMPARE(f.nccl.ib_hca, std::string("=rocep1s0f1:1"));
    QCOMPARE(f.nccl.ib_gid_index, std::string("3"));
    QCOMPARE(f.nccl.socket_ifname, std::string("=enp1s0f1np1"));
    QVERIFY(f.nccl.applied);
    QCOMPARE(f.roce_warnings.size(), size_t{2});
    QCOMPARE(f.roce_warnings[1].kind, std::string("port-half-unused"));

    // The view's summary: halves of one physical port side by side, each
    // warning on its port.
    const RoceSummary r = SummarizeRoce(f);
    std::vector<std::string> order;
    for (const auto& p : r.ports) order.push_back(p.device);
    QCOMPARE(order, (std::vector<std::string>{"roceP2p1s0f0", "rocep1s0f0", "roceP2p1s0f1",
                                              "rocep1s0f1"}));
    QCOMPARE(r.warning_count, size_t{2});
    QVERIFY(r.node_warnings.empty());
    QCOMPARE(r.ports[2].warnings.size(), size_t{1});
    QCOMPARE(RoceWarningShortText(r.ports[2].warnings[0], &r.ports[2]), std::string("half down"));
    QCOMPARE(r.ports[3].warnings.size(), size_t{1});
    QCOMPARE(RoceWarningShortText(r.ports[3].warnings[0], &r.ports[3]), std::string("MTU 1500"));
    QCOMPARE(r.ports[3].v2_gid_index, 3);
    QCOMPARE(r.ports[2].v2_gid_index, -1);  // down: its IPv4 GIDs are gone
    QVERIFY(r.ports[0].warnings.empty());   // an uncabled port is not a fault
  }

  void oneShotQueryReportsUnreachableMembers() {
    std::vector<ClusterSession::Member> members;
    for (size_t i = 0; i < cluster_->size(); ++i) {
      members.push_back({"m" + std::to_string(i),
                         {cluster_->address(i),
                          *agent::ReadTokenFile(cluster_->profile().token_file()), "", ""}});
    }
    members.push_back({"ghost", {"127.0.0.1:1", members[0].endpoint.token, "", ""}});
    const ClusterSnapshot s = QueryCluster("q", members, "", Deadline::AfterMs(5000));
    QCOMPARE(s.nodes.size(), size_t{4});
    QVERIFY2(s.nodes[0].state == NodeState::kUp, s.nodes[0].last_error.c_str());
    QCOMPARE(s.nodes[3].state, NodeState::kLost);
    QVERIFY(!s.nodes[3].last_error.empty());
    QCOMPARE(s.cabling.kind, CablingKind::kPartial);
    // A wrong token is an authentication error, named with the agent.
    members[0].endpoint.token = "wrong";
    auto client = AgentClient::Create(members[0].endpoint);
    QVERIFY(client.ok());
    auto facts = (*client)->GetFacts(Deadline::AfterMs(5000));
    QCOMPARE(facts.status().code(), StatusCode::kUnauthenticated);
    QVERIFY(facts.status().message().find(cluster_->address(0)) != std::string::npos);
  }

  void tlsEndToEnd() {
    auto ca = MakeCertificateAuthority("test CA");
    QVERIFY(ca.ok());
    auto cert = MakeNodeCertificate(*ca, "tls-node", {"tls-node", "localhost"}, {"127.0.0.1"});
    QVERIFY(cert.ok());
    agent::AgentConfig cfg;
    cfg.listen = "127.0.0.1:0";
    cfg.token = "tls-token";
    cfg.tls_cert_pem = cert->cert_pem;
    cfg.tls_key_pem = cert->key_pem;
    cfg.identity.state_dir = dir_.path().toStdString() + "/tls-state";
    cfg.discovery = false;
    auto server = agent::AgentServer::Start(cfg);
    QVERIFY2(server.ok(), server.status().ToString().c_str());
    auto good = AgentClient::Create({(*server)->address(), "tls-token", ca->cert_pem, "tls-node"});
    QVERIFY(good.ok());
    auto facts = (*good)->GetFacts(Deadline::AfterMs(10'000));
    QVERIFY2(facts.ok(), facts.status().ToString().c_str());
    QCOMPARE(facts->node_id, (*server)->node_id());
    // A client trusting another CA cannot connect; a plaintext client neither.
    auto other = MakeCertificateAuthority("other CA");
    auto wrong_ca =
        AgentClient::Create({(*server)->address(), "tls-token", other->cert_pem, "tls-node"});
    QCOMPARE((*wrong_ca)->GetFacts(Deadline::AfterMs(5000)).status().code(),
             StatusCode::kUnavailable);
    auto plain = AgentClient::Create({(*server)->address(), "tls-token", "", ""});
    QVERIFY(!(*plain)->GetFacts(Deadline::AfterMs(5000)).ok());
    // TLS does not replace the token.
    auto no_token = AgentClient::Create({(*server)->address(), "wrong", ca->cert_pem, "tls-node"});
    QCOMPARE((*no_token)->GetFacts(Deadline::AfterMs(5000)).status().code(),
             StatusCode::kUnauthenticated);
  }
};

QTEST_GUILESS_MAIN(TestClusterSession)
#include "test_cluster_session.moc"
