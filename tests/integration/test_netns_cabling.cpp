// Multi-host cabling discovery in network namespaces (needs root; skips with
// the reason otherwise). Each "node" is a namespace running its own
// octet-agent; the session reaches the agents over unix sockets (the file
// system is shared), while beacons and link probes travel only over the
// namespaces' own cables:
//
//   ring:    n0 -r1--r0- n1 -r1--r0- n2 -r1--r0- n3 -r1--r0- n0   (veth pairs, 10.77.i.0/24)
//   switch:  n0..n3 each with eth0 on bridge br0 in a fifth namespace (10.78.0.0/24)
//
// Checked: discovery classifies ring vs switch and draws the right edges with
// the right addresses; every link can be probed; pulling one veth down is
// reported as a ring missing exactly that link while every agent stays up.
//
// The verbs transport's choice of RDMA port per peer, with the kernel's
// prefixes and routes of the ring (the cables stand in for the ports).
//
// Jobs across the ring (ip_forward and static routes so every node reaches
// every other, two hops at most): a TP=4 generate job launched through the
// agents over TCP gives the TP=1 ids; a TP=4 serving job fails with an error
// naming the peer when one cable is pulled, and every agent stays up.
#include <signal.h>
#include <unistd.h>

#include <QTemporaryFile>
#include <QtTest>
#include <map>
#include <regex>

#include "netns_lab.h"
#include "octet/agent/cluster_token.h"
#include "octet/app/cluster_session.h"
#include "octet/base/file_util.h"
#include "octet/base/json.h"
#include "octet/base/subprocess.h"
#include "octet_test.h"
#include "trainer_test_util.h"

using namespace octet;
using namespace octet::app;
using namespace octet::app::netns_test;

class TestNetnsCabling : public QObject {
  Q_OBJECT
 private:
  QTemporaryDir dir_;
  std::string token_file_;

 private slots:
  void initTestCase() {
    if (::geteuid() != 0)
      OCTET_SKIP_PREMISE("network namespaces need root (run as root to test multi-host cabling)");
    if (IpPath().empty()) OCTET_SKIP_PREMISE("iproute2 (ip) not installed");
    RemoveStaleNamespaces();
    const std::string probe = Prefix() + "probe";
    if (std::string e = Ip({"netns", "add", probe}); !e.empty()) {
      OCTET_SKIP_PREMISE(("cannot create network namespaces here: " + e).c_str());
    }
    Ip({"netns", "del", probe});
    QVERIFY(dir_.isValid());
    token_file_ = dir_.path().toStdString() + "/token";
    QVERIFY(agent::WriteTokenFile(token_file_, *agent::GenerateClusterToken()).ok());
  }

  void ringOfFourIsFoundAndABrokenLinkIsNamed() {
    NetnsLab lab("r");
    for (int i = 0; i < 4; ++i) QVERIFY(lab.AddNamespace(lab.Ns(i)).ok());
    for (int i = 0; i < 4; ++i) {
      const int j = (i + 1) % 4;
      const std::string net = "10.77." + std::to_string(i) + ".";
      const Status s = lab.Cable(lab.Ns(i), "r1", net + "1/24", lab.Ns(j), "r0", net + "2/24");
      QVERIFY2(s.ok(), s.ToString().c_str());
    }
    const Status started = lab.StartAgents(4, dir_.path().toStdString(), token_file_);
    QVERIFY2(started.ok(), started.ToString().c_str());
    ClusterSession& session = lab.session();
    const bool ring = session.WaitUntil(
        [](const ClusterSnapshot& s) {
          if (s.cabling.kind != CablingKind::kRing) return false;
          for (const auto& e : s.cabling.edges) {
            if (!e.bidirectional || e.a_address.rfind("10.77.", 0) != 0 ||
                e.b_address.rfind("10.77.", 0) != 0) {
              return false;  // wait for the IPv4 beacons of every link
            }
          }
          return true;
        },
        Deadline::AfterMs(30'000));
    ClusterSnapshot s = session.Snapshot();
    QVERIFY2(ring, Describe(s).c_str());
    QCOMPARE(s.cabling.edges.size(), size_t{4});
    QVERIFY(s.cabling.problems.empty());
    for (int i = 0; i < 4; ++i) {
      const std::string a = "n" + std::to_string(i), b = "n" + std::to_string((i + 1) % 4);
      QVERIFY2(HasEdge(s.cabling, a, "r1", b, "r0"), Describe(s).c_str());
    }
    for (const auto& e : s.cabling.edges) {
      // The a side of every edge heard at the address of its own cable's subnet.
      QCOMPARE(e.a_address.substr(0, 8), e.b_address.substr(0, 8));
    }
    // Facts see each namespace's own interfaces, with discovery on them.
    for (size_t i = 0; i < 4; ++i) {
      auto facts = session.client(i).GetFacts(Deadline::AfterMs(5000));
      QVERIFY(facts.ok());
      NodeView n;
      n.name = s.nodes[i].name;
      n.facts = *facts;
      int cables = 0;
      std::string seen;
      for (const auto& nic : n.facts.interfaces) {
        cables += (nic.discovery && nic.kind == "veth") ? 1 : 0;
        seen += " " + nic.name + "(" + nic.kind + (nic.up ? ",up" : ",down") + "," +
                nic.discovery_note + ")";
      }
      QVERIFY2(cables == 2, (n.name + ":" + seen).c_str());
    }
    // Every link can be measured.
    for (const auto& p : session.ProbeLinks(1 << 20, 20, Deadline::AfterMs(30'000))) {
      QVERIFY2(p.ok, (p.edge.a_node + "->" + p.edge.b_node + ": " + p.error).c_str());
      QVERIFY(p.result.rtt_us_p50 > 0);
      QVERIFY(p.result.throughput_gbps > 0);
    }

    // Pull the n0-n1 cable (n1's end down): the ring is reported broken there.
    QVERIFY(lab.Run({"-n", lab.Ns(1), "link", "set", "r0", "down"}).ok());
    const bool broken = session.WaitUntil(
        [](const ClusterSnapshot& s) {
          for (const auto& p : s.cabling.problems) {
            if (p.kind == "missing-ring-link" &&
                p.message.find("between n0 and n1") != std::string::npos) {
              return true;
            }
          }
          return false;
        },
        Deadline::AfterMs(20'000));
    s = session.Snapshot();
    QVERIFY2(broken, Describe(s).c_str());
    QCOMPARE(s.cabling.kind, CablingKind::kPartial);
    QCOMPARE(s.cabling.edges.size(), size_t{3});
    // The agents stay up and keep answering.
    QVERIFY(lab.AgentsRunning());
    for (size_t i = 0; i < 4; ++i) {
      QCOMPARE(s.nodes[i].state, NodeState::kUp);
      QVERIFY(session.client(i).GetFacts(Deadline::AfterMs(5000)).ok());
    }
    // Plug it back in: the ring returns.
    QVERIFY(lab.Run({"-n", lab.Ns(1), "link", "set", "r0", "up"}).ok());
    QVERIFY2(session.WaitUntil(
                 [](const ClusterSnapshot& s) { return s.cabling.kind == CablingKind::kRing; },
                 Deadline::AfterMs(20'000)),
             Describe(session.Snapshot()).c_str());
  }

  void switchOfFourIsFound() {
    NetnsLab lab("s");
    const std::string sw = lab.Ns(9);
    QVERIFY(lab.AddNamespace(sw).ok());
    QVERIFY(lab.Run({"-n", sw, "link", "add", "br0", "type", "bridge"}).ok());
    QVERIFY(lab.Run({"-n", sw, "link", "set", "br0", "up"}).ok());
    for (int i = 0; i < 4; ++i) {
      QVERIFY(lab.AddNamespace(lab.Ns(i)).ok());
      const std::string port = "p" + std::to_string(i);
      const Status s =
          lab.Cable(lab.Ns(i), "eth0", "10.78.0." + std::to_string(i + 1) + "/24", sw, port, "");
      QVERIFY2(s.ok(), s.ToString().c_str());
      QVERIFY(lab.Run({"-n", sw, "link", "set", port, "master", "br0"}).ok());
    }
    const Status started = lab.StartAgents(4, dir_.path().toStdString(), token_file_);
    QVERIFY2(started.ok(), started.ToString().c_str());
    ClusterSession& session = lab.session();
    const bool found = session.WaitUntil(
        [](const ClusterSnapshot& s) {
          if (s.cabling.kind != CablingKind::kSwitch || s.cabling.edges.size() != 6) return false;
          for (const auto& e : s.cabling.edges) {
            if (!e.bidirectional || e.b_address.rfind("10.78.0.", 0) != 0) return false;
          }
          return true;
        },
        Deadline::AfterMs(30'000));
    ClusterSnapshot s = session.Snapshot();
    QVERIFY2(found, Describe(s).c_str());
    QCOMPARE(s.cabling.segments.size(), size_t{1});
    QVERIFY(s.cabling.segments[0].shared);
    QCOMPARE(s.cabling.segments[0].endpoints,
             (std::vector<std::string>{"n0:eth0", "n1:eth0", "n2:eth0", "n3:eth0"}));
    QVERIFY(s.cabling.problems.empty());

    // n3's switch port goes dark: n3 is cut off, the others stay on the switch.
    QVERIFY(lab.Run({"-n", sw, "link", "set", "p3", "down"}).ok());
    const bool cut = session.WaitUntil(
        [](const ClusterSnapshot& s) {
          for (const auto& p : s.cabling.problems) {
            if (p.kind == "no-links" && p.nodes[0] == "n3") return true;
          }
          return false;
        },
        Deadline::AfterMs(20'000));
    s = session.Snapshot();
    QVERIFY2(cut, Describe(s).c_str());
    QCOMPARE(s.cabling.kind, CablingKind::kPartial);
    QVERIFY(lab.AgentsRunning());
  }

  // A network partition of one node: the session reaches each agent over a
  // management cable from this (the root) namespace, 10.81.i.1 <-> 10.81.i.2.
  // n1's cable goes down: the cluster view marks n1 lost (telemetry stopped)
  // and `octet cluster status` names it unreachable, both within their
  // deadlines, while n0 stays up; the cable comes back and so does n1.
  void partitionedNodeIsLostThenComesBack() {
    NetnsLab lab("p");
    const std::string host_prefix = "oct" + std::to_string(::getpid() % 100000) + "m";
    std::string agents;
    for (int i = 0; i < 2; ++i) {
      QVERIFY(lab.AddNamespace(lab.Ns(i)).ok());
      const std::string host_if = host_prefix + std::to_string(i);
      const std::string net = "10.81." + std::to_string(i) + ".";
      // Deleting the namespace (NetnsLab's destructor) deletes both ends.
      Status s = lab.Run(
          {"link", "add", host_if, "type", "veth", "peer", "name", "mgmt", "netns", lab.Ns(i)});
      QVERIFY2(s.ok(), s.ToString().c_str());
      for (const auto& args : std::vector<std::vector<std::string>>{
               {"addr", "add", net + "1/24", "dev", host_if},
               {"link", "set", host_if, "up"},
               {"-n", lab.Ns(i), "addr", "add", net + "2/24", "dev", "mgmt"},
               {"-n", lab.Ns(i), "link", "set", "mgmt", "up"}}) {
        s = lab.Run(args);
        QVERIFY2(s.ok(), s.ToString().c_str());
      }
      lab.ListenTcp(i, net + "2:47100");
      agents += (i ? "," : "") + net + "2:47100";
    }
    const Status started = lab.StartAgents(2, dir_.path().toStdString(), token_file_);
    QVERIFY2(started.ok(), started.ToString().c_str());
    ClusterSession& session = lab.session();
    auto states = [](const ClusterSnapshot& s, NodeState a, NodeState b) {
      return s.nodes.size() == 2 && s.nodes[0].state == a && s.nodes[1].state == b;
    };
    QVERIFY2(session.WaitUntil(
                 [&](const ClusterSnapshot& s) {
                   return states(s, NodeState::kUp, NodeState::kUp) &&
                          !s.nodes[1].telemetry.interfaces.empty();
                 },
                 Deadline::AfterMs(20'000)),
             Describe(session.Snapshot()).c_str());
    auto status = [&]() {
      return test::RunProgram({"octet", "cluster", "status", "--agents", agents, "--token-file",
                               token_file_, "--timeout-ms", "2000", "--json"},
                              30'000,
                              {"OCTET_CONFIG_DIR=" + dir_.path().toStdString() + "/config",
                               "HOME=" + dir_.path().toStdString()});
    };
    QCOMPARE(status().exit_code, 0);

    // The partition: packets to n1 are dropped, nothing says so.
    QVERIFY(lab.Run({"-n", lab.Ns(1), "link", "set", "mgmt", "down"}).ok());
    const auto t0 = std::chrono::steady_clock::now();
    const bool lost = session.WaitUntil(
        [&](const ClusterSnapshot& s) { return states(s, NodeState::kUp, NodeState::kLost); },
        Deadline::AfterMs(20'000));
    const auto lost_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
            .count();
    ClusterSnapshot snap = session.Snapshot();
    QVERIFY2(lost, Describe(snap).c_str());
    QCOMPARE(snap.nodes[1].name, std::string("n1"));
    QVERIFY2(!snap.nodes[1].last_error.empty(), Describe(snap).c_str());
    qInfo("n1 lost after %lld ms: %s", static_cast<long long>(lost_ms),
          snap.nodes[1].last_error.c_str());
    const auto t1 = std::chrono::steady_clock::now();
    auto r = status();
    const auto status_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t1)
            .count();
    QCOMPARE(r.exit_code, 1);
    QVERIFY2(status_ms < 15'000, std::to_string(status_ms).c_str());
    const auto j = nlohmann::json::parse(r.output.substr(r.output.find('{')), nullptr, false);
    QVERIFY2(j.is_object() && j["nodes"].size() == 2, r.output.c_str());
    QVERIFY(j["nodes"][0]["reachable"].get<bool>());
    QVERIFY(!j["nodes"][1]["reachable"].get<bool>());
    QCOMPARE(j["nodes"][1]["address"].get<std::string>(), std::string("10.81.1.2:47100"));
    QVERIFY(lab.AgentsRunning());  // the node itself is fine, only cut off

    // The cable is back: so is n1, in the view and for the CLI.
    QVERIFY(lab.Run({"-n", lab.Ns(1), "link", "set", "mgmt", "up"}).ok());
    QVERIFY2(
        session.WaitUntil(
            [&](const ClusterSnapshot& s) { return states(s, NodeState::kUp, NodeState::kUp); },
            Deadline::AfterMs(30'000)),
        Describe(session.Snapshot()).c_str());
    QCOMPARE(status().exit_code, 0);
  }

  // Data-parallel training over a cable between two namespaces, through the
  // agents: the cable goes down mid-run; both ranks' jobs end (failed) within
  // the peer timeout, at least one naming the other rank, the agents stay up,
  // and once the cable is back the run resumes from its last checkpoint.
  void trainingAcrossACableThatGoesDown() {
    NetnsLab lab("t");
    for (int i = 0; i < 2; ++i) QVERIFY(lab.AddNamespace(lab.Ns(i)).ok());
    Status s = lab.Cable(lab.Ns(0), "r1", "10.78.0.1/24", lab.Ns(1), "r0", "10.78.0.2/24");
    QVERIFY2(s.ok(), s.ToString().c_str());
    const std::string root = dir_.path().toStdString() + "/train";
    const std::string run = root + "/models/run";
    QVERIFY(MakeDirs(run).ok());
    QVERIFY(WriteFileAtomic(run + "/config.json",
                            R"({"model_type":"nanochat","n_layer":2,"n_head":2,"n_embd":32,)"
                            R"("vocab_size":48,"sequence_len":16})")
                .ok());
    trainer::testing::WriteSyntheticData(root + "/data", 48, 30, 80);
    lab.AddAgentArgs({"--model-roots", root + "/models," + root + "/data"});
    const Status started = lab.StartAgents(2, dir_.path().toStdString(), token_file_);
    QVERIFY2(started.ok(), started.ToString().c_str());
    ClusterSession& session = lab.session();
    QVERIFY2(session.WaitUntil(
                 [](const ClusterSnapshot& s) {
                   return s.nodes.size() == 2 && s.nodes[0].state == NodeState::kUp &&
                          s.nodes[1].state == NodeState::kUp;
                 },
                 Deadline::AfterMs(20'000)),
             Describe(session.Snapshot()).c_str());

    const int64_t peer_timeout_ms = 3000;
    auto start_ranks = [&](const std::string& id, bool resume) -> Status {
      std::string rendezvous = "10.78.0.1:0";
      for (uint32_t r = 0; r < 2; ++r) {
        JobSpec spec;
        spec.job_id = id;
        spec.kind = JobKind::kTraining;
        spec.model = run;
        spec.world_size = 2;
        spec.rank = r;
        spec.rendezvous = rendezvous;
        spec.transport = "tcp";
        spec.algorithm = "auto";
        spec.threads = 1;
        spec.extra_args = {"--data",
                           root + "/data",
                           "--seq-len",
                           "16",
                           "--batch-size",
                           "2",
                           "--eval-batches",
                           "0",
                           "--steps",
                           "1000000",
                           "--checkpoint-every",
                           "5",
                           "--peer-timeout-ms",
                           std::to_string(peer_timeout_ms)};
        if (resume) spec.extra_args.push_back("--resume");
        auto st = session.client(r).StartJob(spec, Deadline::AfterMs(20'000));
        if (!st.ok()) return st.status().WithContext("rank " + std::to_string(r));
        if (r == 0) rendezvous = st->rendezvous;
      }
      session.RefreshNow();
      return Status::Ok();
    };
    // Both ranks past step `step` in the agents' telemetry.
    auto both_past = [](const std::string& id, uint64_t step) {
      return [id, step](const ClusterSnapshot& s) {
        for (const auto& n : s.nodes) {
          bool past = false;
          for (const auto& w : n.telemetry.workers) {
            if (w.job_id == id && w.train_step > step) past = true;
          }
          if (!past) return false;
        }
        return true;
      };
    };
    s = start_ranks("dp-train", false);
    QVERIFY2(s.ok(), s.ToString().c_str());
    QVERIFY2(session.WaitUntil(both_past("dp-train", 10), Deadline::AfterMs(90'000)),
             JobsText(session.Snapshot(), "dp-train").c_str());
    QVERIFY(PathExists(run + "/checkpoints"));

    // The partition: the only cable between the ranks goes down.
    QVERIFY(lab.Run({"-n", lab.Ns(1), "link", "set", "r0", "down"}).ok());
    const auto t0 = std::chrono::steady_clock::now();
    const bool ended = session.WaitUntil(
        [](const ClusterSnapshot& s) { return JobEndedEverywhere(s, "dp-train"); },
        Deadline::AfterMs(peer_timeout_ms + 60'000));
    const auto ended_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
            .count();
    ClusterSnapshot snap = session.Snapshot();
    QVERIFY2(ended, JobsText(snap, "dp-train").c_str());
    std::string all;
    bool named = false;
    for (size_t n = 0; n < 2; ++n) {
      const JobStatus* j = FindJob(snap, n, "dp-train");
      QVERIFY2(j && j->state == "failed" && j->exit_code != 0, JobsText(snap, "dp-train").c_str());
      all += j->exit_reason + " | " + j->last_error_line + "\n";
      const std::string other = "rank " + std::to_string(1 - n);
      named = named || (j->exit_reason + j->last_error_line).find(other) != std::string::npos;
    }
    QVERIFY2(named, all.c_str());
    qInfo("training ended %lld ms after the cable went down: %s", static_cast<long long>(ended_ms),
          all.c_str());
    QVERIFY(lab.AgentsRunning());

    // The cable is back: the run resumes from its last checkpoint.
    QVERIFY(lab.Run({"-n", lab.Ns(1), "link", "set", "r0", "up"}).ok());
    s = start_ranks("dp-train-resumed", true);
    QVERIFY2(s.ok(), s.ToString().c_str());
    QVERIFY2(session.WaitUntil(both_past("dp-train-resumed", 10), Deadline::AfterMs(90'000)),
             JobsText(session.Snapshot(), "dp-train-resumed").c_str());
    auto logs = session.client(0).ReadLogs("dp-train-resumed", Deadline::AfterMs(10'000));
    QVERIFY(logs.ok());
    QVERIFY2(logs->find("resuming from") != std::string::npos, logs->c_str());
    session.StopJob("dp-train-resumed", Deadline::AfterMs(15'000)).IgnoreError();
  }

  // The verbs transport's port for each peer (collectives/src/rdma_links.h)
  // against this kernel's routing in a ring: each node's two cables stand in
  // for a Spark's two RDMA ports, in device order r0, r1. Neighbours share a
  // cable's subnet; the node across the ring is reached through the port its
  // static route leaves by (the prefixes and routes are the kernel's).
  void rdmaPortsFollowTheRingsRoutes() {
    NetnsLab lab("v");
    const Status ring = lab.RoutedRing4("10.81");
    QVERIFY2(ring.ok(), ring.ToString().c_str());
    std::vector<std::string> ports;
    for (int i = 0; i < 4; ++i) {
      // A rank takes its own ports' prefixes from its interfaces (the
      // "prefix" line), the peers' from what they sent (given here).
      ports.push_back("r0=10.81." + std::to_string((i + 3) % 4) + ".2/24,r1=10.81." +
                      std::to_string(i) + ".1/24");
    }
    // Per deciding rank: "link PEER LOCAL PEER_PORT ROUTED" for each higher
    // rank. The next node: our r1, its r0. The one across: its first port
    // (r0, on the cable beyond our next node) through our r1, routed. Node
    // 3, the previous node of 0: our r0, its r1.
    const std::vector<std::string> want = {
        "prefix 24 24\nlink 1 1 0 0\nlink 2 1 0 1\nlink 3 0 1 0\n",
        "prefix 24 24\nlink 2 1 0 0\nlink 3 1 0 1\n",
        "prefix 24 24\nlink 3 1 0 0\n",
        "prefix 24 24\n",
    };
    for (int i = 0; i < 4; ++i) {
      std::vector<std::string> argv = {
          IpPath(),  "netns",          "exec", lab.Ns(i), OCTET_RDMA_LINKS_PROBE,
          "--probe", std::to_string(i)};
      argv.insert(argv.end(), ports.begin(), ports.end());
      const auto r = test::RunProgram(argv, 20'000);
      QVERIFY2(r.exit_code == 0, r.output.c_str());
      QCOMPARE(QString::fromStdString(r.output), QString::fromStdString(want[i]));
    }
  }

  // TP = 4 through the agents, one rank per namespace, over TCP.
  void tpJobsAcrossTheRing() {
    OCTET_REQUIRE_FIXTURES();
    const std::string model = test::FixturesDir() + "/qwen3-tiny";
    const std::string prompt = "3,141,59,26,53,58,97,93,23,84";
    NetnsLab lab("j");
    const Status ring = lab.RoutedRing4("10.79");
    QVERIFY2(ring.ok(), ring.ToString().c_str());
    lab.AddAgentArgs({"--model-roots", test::FixturesDir()});
    const Status started = lab.StartAgents(4, dir_.path().toStdString(), token_file_);
    QVERIFY2(started.ok(), started.ToString().c_str());
    ClusterSession& session = lab.session();
    QVERIFY2(session.WaitUntil(
                 [](const ClusterSnapshot& s) {
                   for (const auto& n : s.nodes) {
                     if (n.state != NodeState::kUp) return false;
                   }
                   return true;
                 },
                 Deadline::AfterMs(20'000)),
             Describe(session.Snapshot()).c_str());

    auto one = test::RunProgram({"octet", "generate", "--model", model, "--prompt-ids", prompt,
                                 "--max-tokens", "6", "--ignore-eos", "--json"},
                                60'000);
    QVERIFY2(one.exit_code == 0, one.output.c_str());
    const nlohmann::json want = LastJson(one.output)["ids"];
    QVERIFY(want.is_array() && want.size() == 6);

    // One generation: rank 0 takes the prompt, so the ranks are started one by
    // one as ClusterSession::LaunchJob does (it gives every rank the same args).
    auto start_ranks = [&](const std::string& id, std::vector<std::string> leader_args,
                           uint32_t port) -> Status {
      std::string rendezvous = "10.79.0.1:0";
      for (uint32_t r = 0; r < 4; ++r) {
        JobSpec spec;
        spec.job_id = id;
        spec.kind = JobKind::kInference;
        spec.model = model;
        spec.world_size = 4;
        spec.rank = r;
        spec.rendezvous = rendezvous;
        spec.transport = "tcp";
        spec.algorithm = "ring";
        spec.threads = 1;
        spec.port = r == 0 ? port : 0;
        spec.extra_args = {"--peer-timeout-ms", "1500", "--connect-timeout-ms", "30000"};
        if (r == 0)
          spec.extra_args.insert(spec.extra_args.end(), leader_args.begin(), leader_args.end());
        auto s = session.client(r).StartJob(spec, Deadline::AfterMs(20'000));
        if (!s.ok()) return s.status().WithContext("rank " + std::to_string(r));
        if (r == 0) rendezvous = s->rendezvous;
      }
      session.RefreshNow();
      return Status::Ok();
    };
    Status s = start_ranks(
        "tp4-generate", {"--prompt-ids", prompt, "--max-tokens", "6", "--ignore-eos", "--json"}, 0);
    QVERIFY2(s.ok(), s.ToString().c_str());
    const bool ended = session.WaitUntil(
        [](const ClusterSnapshot& s) { return JobEndedEverywhere(s, "tp4-generate"); },
        Deadline::AfterMs(90'000));
    ClusterSnapshot snap = session.Snapshot();
    QVERIFY2(ended, JobsText(snap, "tp4-generate").c_str());
    for (size_t n = 0; n < 4; ++n) {
      const JobStatus* j = FindJob(snap, n, "tp4-generate");
      QVERIFY2(j->state == "exited" && j->exit_code == 0, JobsText(snap, "tp4-generate").c_str());
    }
    auto logs = session.client(0).ReadLogs("tp4-generate", Deadline::AfterMs(10'000));
    QVERIFY(logs.ok());
    QCOMPARE(LastJson(*logs)["ids"], want);

    // A serving job; then the n0-n1 cable goes down under it.
    s = start_ranks("tp4-serve", {"--host", "127.0.0.1"}, 8000);
    QVERIFY2(s.ok(), s.ToString().c_str());
    // Every rank reports its state in the agents' telemetry (its figures lines).
    const bool up = session.WaitUntil(
        [](const ClusterSnapshot& s) {
          for (size_t n = 0; n < s.nodes.size(); ++n) {
            bool ready = false;
            for (const auto& w : s.nodes[n].telemetry.workers) {
              if (w.job_id == "tp4-serve") {
                ready = w.state == (n == 0 ? "serving" : "following");
              }
            }
            if (!ready) return false;
          }
          return true;
        },
        Deadline::AfterMs(60'000));
    QVERIFY2(up, JobsText(session.Snapshot(), "tp4-serve").c_str());
    QVERIFY(lab.Run({"-n", lab.Ns(1), "link", "set", "r0", "down"}).ok());
    // A request makes every rank step (and meet the dead link) even if the
    // runtime would only notice an idle peer later; its outcome does not matter.
    test::RunProgram(
        {IpPath(), "netns", "exec", lab.Ns(0), "/usr/bin/curl", "-sS", "-m", "20", "-H",
         "Content-Type: application/json", "--data-binary",
         R"({"prompt": [1, 2, 3], "max_tokens": 4})", "http://127.0.0.1:8000/v1/completions"},
        25'000);
    const bool failed = session.WaitUntil(
        [](const ClusterSnapshot& s) {
          // Rank 0 or rank 1 (the two ends of the pulled cable) has failed.
          for (size_t n : {size_t{0}, size_t{1}}) {
            const JobStatus* j = FindJob(s, n, "tp4-serve");
            if (j && j->state != "running") return true;
          }
          return false;
        },
        Deadline::AfterMs(40'000));
    snap = session.Snapshot();
    QVERIFY2(failed, JobsText(snap, "tp4-serve").c_str());
    // The failure names a peer rank (which one depends on who noticed first).
    const std::regex names_peer("rank [0-3]");
    bool named = false;
    std::string all;
    for (size_t n = 0; n < 4; ++n) {
      const JobStatus* j = FindJob(snap, n, "tp4-serve");
      if (!j || j->state == "running") continue;
      QVERIFY2(j->state == "failed" || j->exit_code != 0, JobsText(snap, "tp4-serve").c_str());
      all += j->exit_reason + " | " + j->last_error_line + "\n";
      named = named || std::regex_search(j->exit_reason + j->last_error_line, names_peer);
    }
    QVERIFY2(named, all.c_str());
    qInfo("job failure as reported: %s", all.c_str());
    // Agents stay up and answer.
    QVERIFY(lab.AgentsRunning());
    for (size_t i = 0; i < 4; ++i) {
      QVERIFY(session.client(i).GetFacts(Deadline::AfterMs(5000)).ok());
    }
    session.StopJob("tp4-serve", Deadline::AfterMs(15'000)).IgnoreError();
  }
  // A router on one machine, its admin endpoints called from another (as
  // `octet deploy` on a workbench tells a node's router where its instances'
  // replicas are): off loopback only the admin token opens them (none or a
  // wrong one: 403, and nothing changes); on the router's own machine
  // loopback suffices.
  void routerAdminNeedsTheTokenOffLoopback() {
    NetnsLab lab("ra");
    QVERIFY(lab.AddNamespace(lab.Ns(0)).ok());
    QVERIFY(lab.AddNamespace(lab.Ns(1)).ok());
    QVERIFY(lab.Cable(lab.Ns(0), "r1", "10.79.0.1/24", lab.Ns(1), "r0", "10.79.0.2/24").ok());
    const std::string dir = dir_.path().toStdString() + "/router-admin";
    QVERIFY(MakeDirs(dir).ok());
    QVERIFY(WriteFileAtomic(dir + "/policy.yaml", R"(version: 1
pools:
  - name: big
    instance: big
    model: big-model
routes:
  - name: rest
    pool: big
)")
                .ok());
    const std::string token = *agent::GenerateClusterToken();
    SpawnOptions so;
    so.argv = {IpPath(),
               "netns",
               "exec",
               lab.Ns(0),
               test::BinDir() + "/octet",
               "route",
               "--policy",
               dir + "/policy.yaml",
               "--host",
               "0.0.0.0",
               "--port",
               "18480"};
    so.env = {"OCTET_ROUTER_ADMIN_TOKEN=" + token};
    so.output_file = dir + "/router.log";
    auto router = Subprocess::Spawn(so);
    QVERIFY2(router.ok(), router.status().ToString().c_str());
    const std::string base = "http://10.79.0.1:18480";
    bool up = false;
    for (const Deadline d = Deadline::AfterMs(20'000); !d.expired() && !up;) {
      up = CurlFrom(lab.Ns(1), "GET", base + "/health").code != "000";
      if (!up) QThread::msleep(100);
    }
    QVERIFY2(up, ReadFileToString(dir + "/router.log").value_or("").c_str());

    const std::string body = R"({"instances": {"big": ["http://10.79.0.2:9000"]}})";
    for (const std::string& bearer :
         {std::string(), std::string("not-the-token"),
          token.substr(0, token.size() - 1) + (token.back() == 'x' ? "y" : "x")}) {
      const CurlReply r = CurlFrom(lab.Ns(1), "POST", base + "/v1/router/instances", bearer, body);
      QVERIFY2(r.code == "403", (r.code + " " + r.body).c_str());
      QVERIFY2(CurlFrom(lab.Ns(1), "GET", base + "/v1/router/instances", bearer).code == "403",
               bearer.c_str());
      QVERIFY2(CurlFrom(lab.Ns(1), "GET", base + "/v1/router/policy", bearer).code == "403",
               bearer.c_str());
    }
    // Nothing changed (asked on the router's machine, over loopback).
    CurlReply r = CurlFrom(lab.Ns(0), "GET", "http://127.0.0.1:18480/v1/router/instances");
    QVERIFY2(r.code == "200", (r.code + " " + r.body).c_str());
    QCOMPARE(nlohmann::json::parse(r.body)["instances"]["big"].size(), size_t(0));
    // With the token, from the other machine.
    r = CurlFrom(lab.Ns(1), "POST", base + "/v1/router/instances", token, body);
    QVERIFY2(r.code == "200", (r.code + " " + r.body).c_str());
    r = CurlFrom(lab.Ns(0), "GET", "http://127.0.0.1:18480/v1/router/instances");
    QCOMPARE(nlohmann::json::parse(r.body)["instances"]["big"][0].get<std::string>(),
             std::string("http://10.79.0.2:9000"));
    (*router)->Terminate(std::chrono::milliseconds(3000));
  }
};

QTEST_GUILESS_MAIN(TestNetnsCabling)
#include "test_netns_cabling.moc"
