// The job supervisor's mechanics with a stand-in worker (octet_fake_worker):
// the command line and rendezvous it wires, output capture, exit codes and
// signals with their reasons, stop and SIGKILL escalation, figures for
// telemetry, the model-root refusal, and cleanup when the supervisor goes.
#include <signal.h>
#include <unistd.h>

#include <QtTest>
#include <atomic>

#include "octet/agent/job_supervisor.h"
#include "octet/base/deadline.h"
#include "octet/base/file_util.h"
#include "octet_test.h"

using namespace octet;
using namespace octet::agent;

namespace {

std::string FakeWorker() { return JoinPath(DirName(*SelfExecutablePath()), "octet_fake_worker"); }

JobInfo WaitEnded(JobSupervisor& s, const std::string& id, int ms = 10'000) {
  const Deadline d = Deadline::AfterMs(ms);
  for (;;) {
    auto j = s.Get(id);
    if (j.ok() && j->state != JobState::kRunning) return *j;
    if (d.expired()) return j.ok() ? *j : JobInfo{};
    QThread::msleep(10);
  }
}

std::string AllLogs(JobSupervisor& s, const std::string& id) {
  auto r = s.ReadLogs(id, 0, 1 << 20);
  return r.ok() ? r->text : "";
}

bool ProcessGone(pid_t pid) { return ::kill(pid, 0) != 0 && errno == ESRCH; }

}  // namespace

class TestJobSupervisor : public QObject {
  Q_OBJECT
 private:
  QTemporaryDir dir_;
  std::string models_;
  JobSupervisorOptions Options() {
    JobSupervisorOptions o;
    o.octet_binary = FakeWorker();
    o.model_roots = {models_};
    o.owner_flags = test::FakeWorkerFlags();
    o.stop_grace_ms = 2000;
    return o;
  }
  JobSpec Spec(const std::string& id, std::vector<std::string> extra) {
    JobSpec s;
    s.job_id = id;
    s.model = models_ + "/tiny";
    s.world_size = 2;
    s.rank = 0;
    s.rendezvous = "127.0.0.1:0";
    s.transport = "tcp";
    s.algorithm = "ring";
    s.extra_args = std::move(extra);
    return s;
  }

 private slots:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    models_ = dir_.path().toStdString() + "/models";
    QVERIFY(MakeDirs(models_ + "/tiny").ok());
    QVERIFY(QFileInfo::exists(QString::fromStdString(FakeWorker())));
  }

  void rankZeroGetsAResolvedRendezvousAndTheWiredFlags() {
    JobSupervisor s(Options());
    auto started = s.Start(Spec("wired", {"--fake-exit=0"}));
    QVERIFY2(started.ok(), started.status().ToString().c_str());
    QVERIFY(started->rendezvous.rfind("127.0.0.1:", 0) == 0);
    QVERIFY(started->rendezvous != "127.0.0.1:0");
    const JobInfo j = WaitEnded(s, "wired");
    QCOMPARE(j.state, JobState::kExited);
    const std::string logs = AllLogs(s, "wired");
    const std::string want = "fake-worker argv: worker --job inference --model " + models_ +
                             "/tiny --world-size 2 --rank 0 --rendezvous " + started->rendezvous +
                             " --transport tcp --algo ring --fake-exit=0";
    QVERIFY2(logs.find(want) != std::string::npos, logs.c_str());
    QVERIFY(logs.find("OCTET_JOB_ID=wired") != std::string::npos);
    // The port was bound before the worker started, and the worker holds the
    // listening socket (its Communicator::Create takes it; local_rendezvous.h).
    const std::string port = started->rendezvous.substr(std::string("127.0.0.1:").size());
    QVERIFY2(logs.find("fake-worker rendezvous " + port + " listening=1") != std::string::npos,
             logs.c_str());
  }

  void failureReportsExitCodeAndLastErrorLine() {
    JobSupervisor s(Options());
    QVERIFY(s.Start(Spec("fails",
                         {"--fake-lines=3", "--fake-error=peer rank 1 (10.0.0.2:29500) unreachable",
                          "--fake-lines=2", "--fake-exit=3"}))
                .ok());
    const JobInfo j = WaitEnded(s, "fails");
    QCOMPARE(j.state, JobState::kFailed);
    QCOMPARE(j.exit_code, 3);
    QCOMPARE(j.signal, 0);
    QCOMPARE(j.last_error_line, std::string("error: peer rank 1 (10.0.0.2:29500) unreachable"));
    QCOMPARE(j.exit_reason,
             std::string("exit code 3: error: peer rank 1 (10.0.0.2:29500) unreachable"));
    QVERIFY(j.ended_unix_ms >= j.started_unix_ms);
  }

  void stopEndsTheJobWithSigterm() {
    JobSupervisor s(Options());
    auto started = s.Start(Spec("sleeper", {"--fake-sleep"}));
    QVERIFY(started.ok());
    QCOMPARE(s.Get("sleeper")->state, JobState::kRunning);
    auto stopped = s.Stop("sleeper");
    QVERIFY(stopped.ok());
    QVERIFY(*stopped);
    const JobInfo j = *s.Get("sleeper");
    QCOMPARE(j.state, JobState::kStopped);
    QCOMPARE(j.signal, SIGTERM);
    QVERIFY(ProcessGone(started->pid));
    // Stopping again: it had already ended.
    auto again = s.Stop("sleeper");
    QVERIFY(again.ok());
    QVERIFY(!*again);
    QCOMPARE(s.Stop("nope").status().code(), StatusCode::kNotFound);
  }

  void stopEscalatesToSigkill() {
    JobSupervisorOptions o = Options();
    o.stop_grace_ms = 200;
    JobSupervisor s(o);
    QVERIFY(s.Start(Spec("stubborn", {"--fake-ignore-term", "--fake-sleep"})).ok());
    QThread::msleep(100);  // let it install its handler
    auto stopped = s.Stop("stubborn");
    QVERIFY(stopped.ok() && *stopped);
    const JobInfo j = *s.Get("stubborn");
    QCOMPARE(j.state, JobState::kStopped);
    QCOMPARE(j.signal, SIGKILL);
  }

  void killedFromOutsideIsAFailureNamingTheSignal() {
    JobSupervisor s(Options());
    auto started = s.Start(Spec("victim", {"--fake-sleep"}));
    QVERIFY(started.ok());
    QThread::msleep(50);
    ::kill(started->pid, SIGKILL);
    const JobInfo j = WaitEnded(s, "victim");
    QCOMPARE(j.state, JobState::kFailed);
    QCOMPARE(j.signal, SIGKILL);
    QVERIFY2(j.exit_reason.find("killed by signal 9") == 0, j.exit_reason.c_str());
  }

  void modelOutsideTheRootsIsRefusedAndNothingRuns() {
    JobSupervisor s(Options());
    const std::string outside = dir_.path().toStdString() + "/elsewhere";
    QVERIFY(MakeDirs(outside).ok());
    JobSpec spec = Spec("escape", {});
    spec.model = outside;
    auto r = s.Start(spec);
    QCOMPARE(r.status().code(), StatusCode::kPermissionDenied);
    QVERIFY(r.status().message().find("outside") != std::string::npos);
    QVERIFY(s.List().empty());
  }

  void duplicateRunningJobIsRefused() {
    JobSupervisor s(Options());
    QVERIFY(s.Start(Spec("dup", {"--fake-sleep"})).ok());
    QCOMPARE(s.Start(Spec("dup", {"--fake-sleep"})).status().code(), StatusCode::kAlreadyExists);
    QVERIFY(s.Stop("dup").ok());
    // Once it has ended, the id may be reused.
    QVERIFY(s.Start(Spec("dup", {"--fake-exit=0"})).ok());
    QCOMPARE(WaitEnded(s, "dup").state, JobState::kExited);
  }

  void figuresFeedTelemetryNotTheLog() {
    JobSupervisor s(Options());
    QVERIFY(
        s
            .Start(Spec(
                "fig",
                {R"(--fake-figures={"state":"running","decode_tps":12.5,"kv_used_fraction":0.25})",
                 "--fake-sleep"}))
            .ok());
    std::vector<WorkerFigures> f;
    const Deadline d = Deadline::AfterMs(5000);
    while (!d.expired()) {
      f = s.Figures();
      if (!f.empty() && f[0].state == "running") break;
      QThread::msleep(10);
    }
    QCOMPARE(f.size(), size_t{1});
    QCOMPARE(f[0].job_id, std::string("fig"));
    QCOMPARE(f[0].state, std::string("running"));
    QCOMPARE(f[0].decode_tps, 12.5);
    QCOMPARE(f[0].kv_used_fraction, 0.25);
    QCOMPARE(f[0].kind, std::string("inference"));
    QVERIFY(f[0].memory_bytes > 0);
    QVERIFY(AllLogs(s, "fig").find("@octet-figures") == std::string::npos);
    QVERIFY(s.Stop("fig").ok());
    QVERIFY(s.Figures().empty());
  }

  void logsAreReadByOffsetAndSubscribersAreTold() {
    JobSupervisor s(Options());
    std::atomic<int> notes{0};
    // The lines come half a second after the start, so they reach the
    // subscriber (a job that writes and exits at once may finish before
    // Subscribe returns: then there is nothing new to be told of).
    QVERIFY(
        s.Start(Spec("chatty", {"--fake-wait-ms=500", "--fake-lines=2000", "--fake-exit=0"})).ok());
    const uint64_t sub = s.Subscribe("chatty", [&] { ++notes; });
    WaitEnded(s, "chatty");
    s.Unsubscribe(sub);
    std::string all;
    uint64_t offset = 0;
    for (;;) {
      auto r = s.ReadLogs("chatty", offset, 1000);
      QVERIFY(r.ok());
      all += r->text;
      offset = r->next_offset;
      if (r->ended) break;
      QVERIFY(!r->text.empty());
    }
    QVERIFY(all.find("line 1\n") != std::string::npos);
    QVERIFY(all.find("line 2000\n") != std::string::npos);
    QVERIFY(notes.load() >= 1);
    QCOMPARE(s.ReadLogs("nope", 0, 10).status().code(), StatusCode::kNotFound);
  }

  void logKeepsOnlyTheTail() {
    JobSupervisorOptions o = Options();
    o.log_capacity_bytes = 4096;
    JobSupervisor s(o);
    QVERIFY(s.Start(Spec("long", {"--fake-lines=5000", "--fake-exit=0"})).ok());
    WaitEnded(s, "long");
    auto r = s.ReadLogs("long", 0, 1 << 20);
    QVERIFY(r.ok());
    QVERIFY(r->text.size() <= 4096);
    QVERIFY(r->text.find("line 5000\n") != std::string::npos);
    QVERIFY(r->next_offset > 4096);  // offsets count the dropped bytes too
  }

  // Jobs that use NCCL get the node's RoCE settings; others do not.
  void ncclJobsGetTheRoceSettings() {
    JobSupervisorOptions o = Options();
    o.nccl_env = {"NCCL_IB_HCA==rocep1s0f0:1,roceP2p1s0f0:1"};
    JobSupervisor s(o);
    JobSpec nccl = Spec("with-nccl", {"--fake-exit=0"});
    nccl.world_size = 1;
    nccl.algorithm = "nccl";
    JobSpec ring = Spec("with-ring", {"--fake-exit=0"});
    ring.world_size = 1;
    QVERIFY(s.Start(nccl).ok());
    QVERIFY(s.Start(ring).ok());
    WaitEnded(s, "with-nccl");
    WaitEnded(s, "with-ring");
    QVERIFY2(AllLogs(s, "with-nccl").find("env NCCL_IB_HCA==rocep1s0f0:1,roceP2p1s0f0:1") !=
                 std::string::npos,
             AllLogs(s, "with-nccl").c_str());
    QVERIFY(AllLogs(s, "with-ring").find("NCCL_IB_HCA") == std::string::npos);
  }

  // With a source (the agent's RoCE facts), the settings are taken at each
  // launch: a fault fixed while the agent runs no longer shapes the next job.
  void ncclSettingsAreTakenAtEachLaunch() {
    auto current = std::make_shared<std::string>("NCCL_IB_HCA==rocep1s0f1:1");
    JobSupervisorOptions o = Options();
    o.nccl_env = {"NCCL_IB_HCA==stale:1"};  // not used while a source is set
    o.nccl_env_source = [current] { return std::vector<std::string>{*current}; };
    JobSupervisor s(o);
    JobSpec first = Spec("nccl-first", {"--fake-exit=0"});
    first.world_size = 1;
    first.algorithm = "nccl";
    QVERIFY(s.Start(first).ok());
    WaitEnded(s, "nccl-first");
    *current = "NCCL_IB_HCA==roceP2p1s0f1:1,rocep1s0f1:1";
    JobSpec second = first;
    second.job_id = "nccl-second";
    QVERIFY(s.Start(second).ok());
    WaitEnded(s, "nccl-second");
    QVERIFY2(AllLogs(s, "nccl-first").find("env NCCL_IB_HCA==rocep1s0f1:1\n") != std::string::npos,
             AllLogs(s, "nccl-first").c_str());
    QVERIFY2(AllLogs(s, "nccl-second").find("env NCCL_IB_HCA==roceP2p1s0f1:1,rocep1s0f1:1") !=
                 std::string::npos,
             AllLogs(s, "nccl-second").c_str());
  }

  void routerJobsRunOctetRoute() {
    JobSupervisor s(Options());
    JobSpec r;
    r.job_id = "gateway";
    r.kind = JobKind::kRouter;
    r.policy = models_ + "/policy.yaml";
    QVERIFY(WriteFileAtomic(r.policy, "version: 1\n").ok());
    r.port = 8080;
    r.extra_args = {"--fake-exit=0"};
    auto started = s.Start(r);
    QVERIFY2(started.ok(), started.status().ToString().c_str());
    WaitEnded(s, "gateway");
    // The policy is passed as the real path that was checked against the roots.
    char* real = ::realpath(r.policy.c_str(), nullptr);
    QVERIFY(real);
    const std::string want = std::string("argv: route --policy ") + real + " --port 8080";
    std::free(real);
    QVERIFY2(AllLogs(s, "gateway").find(want) != std::string::npos, AllLogs(s, "gateway").c_str());
  }

  void destroyingTheSupervisorStopsItsJobs() {
    pid_t pid = 0;
    {
      JobSupervisorOptions o = Options();
      o.stop_grace_ms = 500;
      JobSupervisor s(o);
      auto a = s.Start(Spec("left-running", {"--fake-sleep"}));
      QVERIFY(a.ok());
      pid = a->pid;
      QVERIFY(!ProcessGone(pid));
    }
    QVERIFY(ProcessGone(pid));
  }

  void missingProgramIsAClearError() {
    JobSupervisorOptions o = Options();
    o.octet_binary = "/nonexistent/octet";
    JobSupervisor s(o);
    auto r = s.Start(Spec("ghost", {}));
    QVERIFY(!r.ok());
    QVERIFY(r.status().message().find("/nonexistent/octet") != std::string::npos);
  }
};

QTEST_GUILESS_MAIN(TestJobSupervisor)
#include "test_job_supervisor.moc"
