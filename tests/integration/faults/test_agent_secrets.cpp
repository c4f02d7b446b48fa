// The agent's secrets (issue 24, security of the agent):
//
// - Tokens and API keys are compared in constant time: the time a comparison
//   takes does not depend on where the presented value first differs (an
//   early exit would let a caller find the token byte by byte). Measured on
//   4 MiB values, where an early exit differs by four orders of magnitude.
// - The cluster token never appears where other users can see it: not in the
//   command line (/proc/PID/cmdline is world-readable) of the agent or of any
//   job it starts, not in a job's environment, not in the agent's log or a
//   job's log, not in what the agent says about a job (its argv), and not when
//   a caller presents a near-miss token (that is not echoed either).
//
// (TLS keys and token files are created 0600: test_cluster_profile,
// test_cli_cluster and test_agent_installer check the modes.)
#include <signal.h>
#include <unistd.h>

#include <QTemporaryDir>
#include <QtTest>
#include <chrono>
#include <functional>
#include <mutex>
#include <sstream>
#include <thread>

#include "child_process.h"
#include "octet/agent/cluster_token.h"
#include "octet/app/agent_client.h"
#include "octet/base/api_key.h"
#include "octet/base/file_util.h"
#include "octet/base/net_util.h"
#include "octet/base/subprocess.h"
#include "octet_test.h"
#include "random_checkpoint.h"

using namespace octet;
using namespace octet::test;

namespace {

// The fastest of `reps` timings of `early` and of `late`, interleaved so
// that a burst of load hits both; returns early / late.
template <typename F>
double TimeRatio(F early, F late, int reps = 21) {
  using Clock = std::chrono::steady_clock;
  double best_early = 1e30, best_late = 1e30;
  volatile bool sink = false;
  for (int i = 0; i < reps; ++i) {
    auto t0 = Clock::now();
    sink = sink ^ early();
    auto t1 = Clock::now();
    sink = sink ^ late();
    auto t2 = Clock::now();
    best_early = std::min(best_early, std::chrono::duration<double>(t1 - t0).count());
    best_late = std::min(best_late, std::chrono::duration<double>(t2 - t1).count());
  }
  return best_early / best_late;
}

int FreePort() {
  const int port = FreeLoopbackPort();
  if (port < 0) qFatal("no free port");
  return port;
}

std::string ProcFile(pid_t pid, const char* what) {
  auto t = ReadFileToString("/proc/" + std::to_string(pid) + "/" + what);
  return t.ok() ? *t : "";
}

}  // namespace

class TestAgentSecrets : public QObject {
  Q_OBJECT

  QTemporaryDir tmp_;

 private slots:
  void comparisonsTakeTheSameTimeWhereverTheyDiffer() {
    const std::string secret(4 << 20, 'k');
    std::string first = secret, last = secret;
    first.front() = 'x';  // an early exit stops here at once
    last.back() = 'x';    // ... and here only after 4 MiB
    struct Case {
      const char* what;
      std::function<bool(const std::string&)> compare;
    };
    const agent::TokenVerifier verifier(secret);
    const std::vector<Case> cases = {
        {"agent TokenVerifier::Matches", [&](const std::string& p) { return verifier.Matches(p); }},
        {"agent ConstantTimeEquals",
         [&](const std::string& p) { return agent::ConstantTimeEquals(p, secret); }},
        {"ConstantTimeEqual (serve/route API keys)",
         [&](const std::string& p) { return ConstantTimeEqual(p, secret); }},
        {"BearerMatches (serve/route Authorization)",
         [&](const std::string& p) { return BearerMatches("Bearer " + p, secret); }},
    };
    for (const Case& c : cases) {
      QVERIFY(c.compare(secret));
      QVERIFY(!c.compare(first) && !c.compare(last));
      const double ratio = TimeRatio(std::function<bool()>([&] { return c.compare(first); }),
                                     std::function<bool()>([&] { return c.compare(last); }));
      // An early exit gives about 1e-4 here; a constant-time compare about 1,
      // within a factor of a few on a loaded machine (2.3 was seen with both
      // cores busy). The bounds sit a factor of 20 either side: far from
      // what an early exit gives, and clear of the noise.
      const std::string why = std::string(c.what) + ": differing at the first byte takes " +
                              std::to_string(ratio) + "x the time of differing at the last";
      QVERIFY2(ratio > 0.05 && ratio < 20.0, why.c_str());
    }
  }

  void tokenNeverInCommandLinesOrLogs() {
    const std::string d = tmp_.path().toStdString();
    QVERIFY(MakeDirs(d + "/models", 0755).ok());
    const std::string token = *agent::GenerateClusterToken();
    QVERIFY(agent::WriteTokenFile(d + "/token", token).ok());
    QVERIFY(WriteFileAtomic(d + "/machine-id", "secrets-machine\n").ok());
    engine::RandomModelShape shape;
    shape.vocab_size = 256;
    shape.max_position_embeddings = 512;
    const std::string model = d + "/models/tiny";
    QVERIFY(engine::WriteRandomCheckpoint(shape, model).ok());

    CapturedProcess agent_process;
    QVERIFY(agent_process
                .Start(AgentArgv(BinDir(), d, "127.0.0.1:0",
                                 {"--model-roots", d + "/models", "--log-level", "debug"}))
                .ok());
    Subprocess* agent = agent_process.proc();
    auto agent_log = [&] { return agent_process.output(); };
    const std::string address = WaitForAgentAddress(d + "/address", 20'000);
    QVERIFY2(!address.empty(), agent_log().c_str());
    auto client = app::AgentClient::Create({address, token, "", ""});
    QVERIFY(client.ok());

    // A serving job, and one that fails (its error lines are logged).
    app::JobSpec spec;
    spec.job_id = "secret-1";
    spec.kind = app::JobKind::kInference;
    spec.model = model;
    spec.port = FreePort();
    spec.threads = 1;
    auto started = (*client)->StartJob(spec, Deadline::AfterMs(20'000));
    QVERIFY2(started.ok(), started.status().ToString().c_str());
    const pid_t job = static_cast<pid_t>(started->pid);
    app::JobSpec bad = spec;
    bad.job_id = "secret-2";
    bad.model = d + "/models/empty";  // no model in it: the worker fails at load
    bad.port = FreePort();
    QVERIFY(MakeDirs(bad.model, 0755).ok());
    auto bad_started = (*client)->StartJob(bad, Deadline::AfterMs(20'000));
    QVERIFY2(bad_started.ok(), bad_started.status().ToString().c_str());

    // A caller with a near-miss token is refused, and its token is not echoed.
    std::string near = token;
    near.back() = near.back() == '0' ? '1' : '0';
    auto intruder = app::AgentClient::Create({address, near, "", ""});
    QVERIFY(intruder.ok());
    auto refused = (*intruder)->ListJobs(Deadline::AfterMs(10'000));
    QVERIFY(!refused.ok());
    QVERIFY(refused.status().message().find(near) == std::string::npos);

    // While the job runs: nothing anyone on the machine can read holds the token.
    const std::string job_cmdline = ProcFile(job, "cmdline");
    QVERIFY2(!job_cmdline.empty(), "the job ended before it could be looked at");
    QVERIFY(job_cmdline.find("octet") != std::string::npos);
    QVERIFY(job_cmdline.find(token) == std::string::npos);
    QVERIFY(ProcFile(job, "environ").find(token) == std::string::npos);
    QVERIFY(ProcFile(agent->pid(), "cmdline").find(token) == std::string::npos);
    // Nor do the job's own children, if it has any.
    auto children = ReadFileToString("/proc/" + std::to_string(job) + "/task/" +
                                     std::to_string(job) + "/children");
    if (children.ok()) {
      std::istringstream in(*children);
      for (pid_t c; in >> c;) {
        QVERIFY(ProcFile(c, "cmdline").find(token) == std::string::npos);
        QVERIFY(ProcFile(c, "environ").find(token) == std::string::npos);
      }
    }
    auto jobs = (*client)->ListJobs(Deadline::AfterMs(10'000));
    QVERIFY(jobs.ok() && !jobs->empty());
    for (const auto& j : *jobs) {
      for (const auto& a : j.argv) QVERIFY2(a.find(token) == std::string::npos, a.c_str());
    }
    QVERIFY(QTest::qWaitFor(
        [&] {
          auto l = (*client)->ReadLogs("secret-2", Deadline::AfterMs(5000));
          return l.ok() && !l->empty();
        },
        30'000));
    for (const char* id : {"secret-1", "secret-2"}) {
      auto l = (*client)->ReadLogs(id, Deadline::AfterMs(10'000));
      QVERIFY(l.ok());
      QVERIFY2(l->find(token) == std::string::npos, id);
    }
    (void)(*client)->StopJob("secret-1", Deadline::AfterMs(20'000));
    agent->Kill(SIGTERM);
    QVERIFY(agent->Wait(Deadline::AfterMs(15'000)).ok());
    const std::string all = agent_log();
    QVERIFY2(all.find("rejected") != std::string::npos, all.c_str());  // the intruder is logged
    QVERIFY2(all.find(token) == std::string::npos, all.c_str());
    QVERIFY2(all.find(near) == std::string::npos, all.c_str());
  }
};

QTEST_GUILESS_MAIN(TestAgentSecrets)
#include "test_agent_secrets.moc"
