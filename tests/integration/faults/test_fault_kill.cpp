// Fault: kill -9 of a long-lived process in the middle of its work, on
// loopback, checked where the user meets it.
//
// The router (`octet route`) with streams running through it: every client
// gets an error at once (a cut connection, never a hang until its own
// timeout), the upstreams see their streams cancelled (no work left running
// for nobody), and a router restarted on the same port serves again.
//
// An agent (`octet-agent`) with a serving job: `octet cluster status` answers
// within its deadline, exits 1 and names the node unreachable; the orphaned
// job does not outlive its agent (it is cleaned up: its process is gone and
// its port is free); the agent restarted on the same address has the same
// node id, lists no ghost of the old job, and runs the same job again.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <QTemporaryDir>
#include <QtTest>
#include <atomic>
#include <mutex>
#include <thread>

#include "child_process.h"
#include "octet/agent/cluster_token.h"
#include "octet/app/agent_client.h"
#include "octet/base/file_util.h"
#include "octet/base/json.h"
#include "octet/base/net_util.h"
#include "octet/base/subprocess.h"
#include "octet_test.h"
#include "openai_upstream.h"
#include "random_checkpoint.h"
#include "router_client.h"

using namespace octet;
using namespace octet::test;
using nlohmann::json;

namespace {

int64_t MsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t)
      .count();
}

bool ProcessGone(pid_t pid) {
  // A zombie still answers kill(0); its state in /proc says it is dead.
  if (::kill(pid, 0) != 0) return true;
  auto stat = ReadFileToString("/proc/" + std::to_string(pid) + "/stat");
  if (!stat.ok()) return true;
  const size_t close = stat->rfind(')');
  return close != std::string::npos && close + 2 < stat->size() &&
         ((*stat)[close + 2] == 'Z' || (*stat)[close + 2] == 'X');
}

int FreePort() {
  const int port = FreeLoopbackPort();
  if (port < 0) qFatal("no free port");
  return port;
}

bool PortAccepts(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

// The programs this test starts and reads (octet route, octet-agent).
using Program = CapturedProcess;

}  // namespace

class TestFaultKill : public QObject {
  Q_OBJECT

  QTemporaryDir tmp_;

  std::string D() const { return tmp_.path().toStdString(); }

  Status StartRouter(Program* p, const std::string& policy, int port, int* bound) {
    OCTET_RETURN_IF_ERROR(p->Start(
        {BinDir() + "/octet", "route", "--policy", policy, "--port", std::to_string(port)}));
    const std::string at = p->WaitFor(" on http://127.0.0.1:", 20'000);
    if (at.empty()) return UnavailableError("octet route did not start: " + p->output());
    *bound = std::atoi(at.c_str());
    return Status::Ok();
  }

  Status StartAgent(Program* p, const std::string& listen) {
    ::unlink((D() + "/agent/address").c_str());
    return p->Start(
        AgentArgv(BinDir(), D() + "/agent", listen, {"--model-roots", D() + "/models"}));
  }
  std::string AgentAddress() { return WaitForAgentAddress(D() + "/agent/address", 20'000); }

 private slots:
  void initTestCase() { QVERIFY(tmp_.isValid()); }

  void routerKilledInTheMiddleOfStreams() {
    UpstreamOptions uo;
    uo.name = "U";
    uo.tokens = 600;
    uo.token_interval_ms = 50;  // 30 s per stream, unless cut
    auto up = OpenAiUpstream::Start(uo);
    QVERIFY2(up.ok(), up.status().ToString().c_str());
    const std::string policy = D() + "/policy.yaml";
    QVERIFY(WriteFileAtomic(policy, "version: 1\npools:\n  - name: p\n    replicas: [" +
                                        (*up)->url() + "]\nroutes:\n  - name: r\n    pool: p\n")
                .ok());
    Program router;
    int port = 0;
    Status st = StartRouter(&router, policy, 0, &port);
    QVERIFY2(st.ok(), st.ToString().c_str());

    constexpr int kStreams = 6;
    std::vector<ClientResult> results(kStreams);
    std::vector<int64_t> ended_at_ms(kStreams, -1);
    const auto t_start = std::chrono::steady_clock::now();
    std::vector<std::thread> clients;
    for (int i = 0; i < kStreams; ++i) {
      clients.emplace_back([&, i] {
        // The client's own read timeout (60 s) is far past what the test allows.
        results[i] =
            PostJson(port, "/v1/chat/completions", ChatRequest("hi", true).dump(), {}, -1, 60);
        ended_at_ms[i] = MsSince(t_start);
      });
    }
    // Every stream is under way at the upstream and has sent tokens.
    const Deadline busy = Deadline::AfterMs(20'000);
    while ((*up)->in_flight() < kStreams && !busy.expired())
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    QCOMPARE((*up)->in_flight(), kStreams);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));

    const int64_t killed_at_ms = MsSince(t_start);
    QCOMPARE(::kill(router.proc()->pid(), SIGKILL), 0);
    for (auto& t : clients) t.join();
    auto exit = router.proc()->Wait(Deadline::AfterMs(5000));
    QVERIFY(exit.ok() && !exit->exited && exit->signal == SIGKILL);

    int64_t slowest = 0;
    for (int i = 0; i < kStreams; ++i) slowest = std::max(slowest, ended_at_ms[i] - killed_at_ms);
    qInfo("every stream ended within %lld ms of the kill", static_cast<long long>(slowest));
    for (int i = 0; i < kStreams; ++i) {
      const ClientResult& r = results[i];
      const std::string what = "stream " + std::to_string(i) + ": status " +
                               std::to_string(r.status) + " error '" + r.error + "' after " +
                               std::to_string(ended_at_ms[i] - killed_at_ms) + " ms";
      // It had begun (200, tokens) and ends at once, not at its own timeout.
      QVERIFY2(r.status == 200 && r.chunks > 0, what.c_str());
      QVERIFY2(ended_at_ms[i] - killed_at_ms < 5000, what.c_str());
      // ... as a failure the client can see: a cut transfer, no [DONE].
      QVERIFY2(!r.transport_ok || r.body.find("[DONE]") == std::string::npos, what.c_str());
      QVERIFY2(ParseSse(r.body).text.size() < 600 * 3, what.c_str());
    }
    // The upstream is not left generating for nobody: its streams are cancelled.
    const Deadline drained = Deadline::AfterMs(10'000);
    while ((*up)->in_flight() > 0 && !drained.expired())
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    QCOMPARE((*up)->in_flight(), 0);
    QVERIFY((*up)->cancelled() >= kStreams);
    QCOMPARE((*up)->completed(), 0);

    // Restarted on the same port (connections of the killed process linger in
    // the kernel), it serves again.
    Program again;
    int port2 = 0;
    st = StartRouter(&again, policy, port, &port2);
    QVERIFY2(st.ok(), st.ToString().c_str());
    QCOMPARE(port2, port);
    ClientResult r = PostJson(port, "/v1/chat/completions", ChatRequest("hi", true, 5).dump());
    QVERIFY2(r.status == 200, (r.error + r.body).c_str());
    QCOMPARE(ParseSse(r.body).text, ExpectedTokens("U", 5));
    QVERIFY(r.body.find("[DONE]") != std::string::npos);
    again.proc()->Kill(SIGTERM);
    auto stopped = again.proc()->Wait(Deadline::AfterMs(10'000));
    QVERIFY(stopped.ok() && stopped->success());
  }

  void agentKilledWithAJobRunning() {
    QVERIFY(MakeDirs(D() + "/agent", 0700).ok());
    QVERIFY(MakeDirs(D() + "/models", 0755).ok());
    const std::string token = *agent::GenerateClusterToken();
    QVERIFY(agent::WriteTokenFile(D() + "/agent/token", token).ok());
    QVERIFY(WriteFileAtomic(D() + "/agent/machine-id", "fault-kill-machine\n").ok());
    engine::RandomModelShape shape;
    shape.vocab_size = 256;
    shape.hidden_size = 64;
    shape.intermediate_size = 128;
    shape.num_layers = 2;
    shape.num_heads = 4;
    shape.num_kv_heads = 2;
    shape.head_dim = 16;
    shape.max_position_embeddings = 512;
    const std::string model = D() + "/models/tiny";
    QVERIFY(engine::WriteRandomCheckpoint(shape, model).ok());

    Program agent;
    Status st = StartAgent(&agent, "127.0.0.1:0");
    QVERIFY2(st.ok(), st.ToString().c_str());
    const std::string address = AgentAddress();
    QVERIFY2(!address.empty(), agent.output().c_str());
    auto client = app::AgentClient::Create({address, token, "", ""});
    QVERIFY(client.ok());
    auto facts = (*client)->GetFacts(Deadline::AfterMs(10'000));
    QVERIFY2(facts.ok(), facts.status().ToString().c_str());
    const std::string node_id = facts->node_id;

    const int serving_port = FreePort();
    app::JobSpec spec;
    spec.job_id = "orphan-1";
    spec.kind = app::JobKind::kInference;
    spec.model = model;
    spec.port = serving_port;
    spec.threads = 1;
    auto started = (*client)->StartJob(spec, Deadline::AfterMs(20'000));
    QVERIFY2(started.ok(), started.status().ToString().c_str());
    const pid_t job_pid = static_cast<pid_t>(started->pid);
    const std::string health = "/health";
    QVERIFY2(WaitFor([&] { return Get(serving_port, health).status == 200; }, 60'000),
             agent.output().c_str());

    // The agent dies; its job was serving.
    QCOMPARE(::kill(agent.proc()->pid(), SIGKILL), 0);
    QVERIFY(agent.proc()->Wait(Deadline::AfterMs(5000)).ok());

    // `octet cluster status` answers within its deadline and names the node down.
    const auto t0 = std::chrono::steady_clock::now();
    auto r = RunProgram({"octet", "cluster", "status", "--agents", address, "--token-file",
                         D() + "/agent/token", "--timeout-ms", "3000", "--json"},
                        30'000, {"OCTET_CONFIG_DIR=" + D() + "/config", "HOME=" + D()});
    const int64_t took = MsSince(t0);
    qInfo("octet cluster status answered in %lld ms", static_cast<long long>(took));
    QCOMPARE(r.exit_code, 1);
    QVERIFY2(took < 15'000, std::to_string(took).c_str());
    const json j = json::parse(r.output.substr(r.output.find('{')), nullptr, false);
    QVERIFY2(j.is_object() && j["nodes"].size() == 1, r.output.c_str());
    QVERIFY(!j["nodes"][0]["reachable"].get<bool>());
    QCOMPARE(j["nodes"][0]["address"].get<std::string>(), address);
    QVERIFY2(!j["nodes"][0]["error"].get<std::string>().empty(), r.output.c_str());
    r = RunProgram({"octet", "cluster", "status", "--agents", address, "--token-file",
                    D() + "/agent/token", "--timeout-ms", "3000"},
                   30'000, {"OCTET_CONFIG_DIR=" + D() + "/config", "HOME=" + D()});
    QCOMPARE(r.exit_code, 1);
    QVERIFY2(r.output.find(address + "  UNREACHABLE") != std::string::npos, r.output.c_str());

    // The orphaned job does not outlive its agent: gone, its port free.
    QVERIFY2(WaitFor([&] { return ProcessGone(job_pid); }, 5000), std::to_string(job_pid).c_str());
    QVERIFY(!PortAccepts(serving_port));

    // Restarted on the same address: the same node, no ghost of the old job,
    // and the same job (same id, same port) runs again.
    Program again;
    st = StartAgent(&again, address);
    QVERIFY2(st.ok(), st.ToString().c_str());
    QCOMPARE(AgentAddress(), address);
    // The client's channel to the dead agent fails its next call at most; it
    // reconnects within about a second (AgentClient's contract).
    QVERIFY(WaitFor(
        [&] {
          facts = (*client)->GetFacts(Deadline::AfterMs(5000));
          return facts.ok();
        },
        10'000));
    QVERIFY2(facts.ok(), (facts.status().ToString() + "\n" + again.output()).c_str());
    QCOMPARE(facts->node_id, node_id);
    auto jobs = (*client)->ListJobs(Deadline::AfterMs(10'000));
    QVERIFY(jobs.ok());
    QCOMPARE(jobs->size(), size_t(0));
    r = RunProgram({"octet", "cluster", "status", "--agents", address, "--token-file",
                    D() + "/agent/token", "--timeout-ms", "3000", "--json"},
                   30'000, {"OCTET_CONFIG_DIR=" + D() + "/config", "HOME=" + D()});
    QCOMPARE(r.exit_code, 0);
    started = (*client)->StartJob(spec, Deadline::AfterMs(20'000));
    QVERIFY2(started.ok(), started.status().ToString().c_str());
    QVERIFY(WaitFor([&] { return Get(serving_port, health).status == 200; }, 60'000));
    auto stopped = (*client)->StopJob(spec.job_id, Deadline::AfterMs(20'000));
    QVERIFY2(stopped.ok(), stopped.status().ToString().c_str());
    again.proc()->Kill(SIGTERM);
    QVERIFY(again.proc()->Wait(Deadline::AfterMs(15'000)).ok());
  }
};

QTEST_GUILESS_MAIN(TestFaultKill)
#include "test_fault_kill.moc"
