// kill -9 of the workbench while a model instance runs on its local embedded
// cluster (issue 24, faults where users meet them). The local cluster's agents
// are the workbench's children and the instance's ranks are the agents'
// children: when the workbench dies without a chance to clean up, every one
// of them must end too, within seconds, so that no orphaned server keeps a
// model's memory or a port. Started again on the same state folder, the
// workbench brings the cluster back with the same node ids.
#include <signal.h>
#include <sys/types.h>

#include <QDir>
#include <QTest>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "octet/base/deadline.h"
#include "octet/base/file_util.h"
#include "octet/base/subprocess.h"
#include "octet_test.h"

using namespace octet;

namespace {

// Parent pid and state of a process from /proc/PID/stat; false when it is gone.
bool ReadStat(pid_t pid, pid_t* ppid, char* state) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const size_t close = text.rfind(')');
  if (close == std::string::npos || close + 4 > text.size()) return false;
  std::istringstream rest(text.substr(close + 2));
  long parent = 0;
  if (!(rest >> *state >> parent)) return false;
  *ppid = static_cast<pid_t>(parent);
  return true;
}

// A running (not zombie) process.
bool Alive(pid_t pid) {
  pid_t ppid = 0;
  char state = 0;
  return ReadStat(pid, &ppid, &state) && state != 'Z' && state != 'X';
}

std::string Cmdline(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/cmdline");
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  for (char& c : s) {
    if (c == '\0') c = ' ';
  }
  return s;
}

// Every live descendant of `root`, with its command line.
std::map<pid_t, std::string> Descendants(pid_t root) {
  std::map<pid_t, pid_t> parent;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(name));
    pid_t ppid = 0;
    char state = 0;
    if (ReadStat(pid, &ppid, &state) && state != 'Z') parent[pid] = ppid;
  }
  std::map<pid_t, std::string> out;
  std::set<pid_t> frontier = {root};
  while (!frontier.empty()) {
    std::set<pid_t> next;
    for (const auto& [pid, ppid] : parent) {
      if (frontier.count(ppid) && !out.count(pid)) {
        out[pid] = Cmdline(pid);
        next.insert(pid);
      }
    }
    frontier = std::move(next);
  }
  return out;
}

std::string Describe(const std::map<pid_t, std::string>& procs) {
  std::string s;
  for (const auto& [pid, cmd] : procs) s += "\n  " + std::to_string(pid) + ": " + cmd;
  return s;
}

}  // namespace

class TestFaultWorkbench : public QObject {
  Q_OBJECT
 private:
  QTemporaryDir dir_;

  std::vector<std::string> Env() const {
    const std::string root = dir_.path().toStdString();
    // TMPDIR too: the killed workbench cannot remove its scratch folders.
    return {"HOME=" + root + "/home",
            "XDG_STATE_HOME=" + root + "/state",
            "XDG_CONFIG_HOME=" + root + "/config",
            "XDG_DATA_HOME=" + root + "/data",
            "TMPDIR=" + root + "/tmp",
            "QT_QPA_PLATFORM=offscreen"};
  }

  // The node ids the local cluster's agents keep, by node folder.
  std::map<std::string, std::string> NodeIds() const {
    std::map<std::string, std::string> ids;
    // The workbench's local cluster keeps its state under $XDG_STATE_HOME/octet.
    const std::string local = dir_.path().toStdString() + "/state/octet";
    std::error_code ec;
    for (std::filesystem::recursive_directory_iterator it(local, ec), end; !ec && it != end;
         it.increment(ec)) {
      if (it->path().filename() == "node_id") {
        ids[std::filesystem::relative(it->path(), local).string()] =
            ReadFileToString(it->path().string()).value_or("");
      }
    }
    return ids;
  }

 private slots:
  void initTestCase() {
    OCTET_REQUIRE_FIXTURES();
    QVERIFY(dir_.isValid());
    QVERIFY(QDir(dir_.path()).mkpath(QStringLiteral("tmp")));
  }

  void killedWorkbenchTakesItsClusterAndInstanceWithIt() {
    const std::string model = test::FixturesDir() + "/qwen3-tiny";
    const std::string workbench = test::BinDir() + "/octet-workbench";
    QVERIFY2(PathExists(workbench), workbench.c_str());
    auto output = std::make_shared<std::string>();
    auto mu = std::make_shared<std::mutex>();
    SpawnOptions so;
    // The demo walk launches the model on the Launch panel, then chats and
    // benchmarks with it: the instance is up for a while.
    so.argv = {workbench,          "--local",       "--nodes",
               "2",                "--model-roots", test::FixturesDir(),
               "--demo-model",     model,           "--screenshots",
               dir_.path().toStdString() + "/shots"};
    so.env = Env();
    so.on_output = [output, mu](std::string_view chunk) {
      std::lock_guard<std::mutex> lock(*mu);
      output->append(chunk);
    };
    auto proc = Subprocess::Spawn(so);
    QVERIFY2(proc.ok(), proc.status().ToString().c_str());
    const pid_t wb = (*proc)->pid();
    auto text = [&] {
      std::lock_guard<std::mutex> lock(*mu);
      return *output;
    };

    // Wait for both agents and a rank of the instance (`octet worker` or
    // `octet serve` under an agent).
    std::map<pid_t, std::string> procs;
    bool instance = false;
    for (const Deadline d = Deadline::AfterMs(90'000); !d.expired();) {
      QVERIFY2(!(*proc)->Poll(), ("the workbench ended early:\n" + text()).c_str());
      procs = Descendants(wb);
      int agents = 0;
      instance = false;
      for (const auto& [pid, cmd] : procs) {
        if (cmd.find("octet-agent") != std::string::npos) ++agents;
        // The instance's ranks: `.../octet worker ...` (or `.../octet serve ...`).
        std::istringstream words(cmd);
        std::string program, command;
        words >> program >> command;
        if (program.size() >= 6 && program.compare(program.size() - 6, 6, "/octet") == 0 &&
            (command == "worker" || command == "serve")) {
          instance = true;
        }
      }
      if (agents == 2 && instance) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    QVERIFY2(instance, ("no instance started:" + Describe(procs) + "\n" + text()).c_str());
    const auto ids_before = NodeIds();
    QVERIFY2(ids_before.size() == 2, ("node ids: " + std::to_string(ids_before.size()) +
                                      Describe(procs) + "\n" + text())
                                         .c_str());

    QCOMPARE(::kill(wb, SIGKILL), 0);
    QVERIFY((*proc)->Wait(Deadline::AfterMs(10'000)).ok());
    const auto t0 = std::chrono::steady_clock::now();
    std::map<pid_t, std::string> left = procs;
    for (const Deadline d = Deadline::AfterMs(15'000); !d.expired() && !left.empty();) {
      for (auto it = left.begin(); it != left.end();) {
        it = Alive(it->first) && Cmdline(it->first) == it->second ? std::next(it) : left.erase(it);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    const auto gone_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::steady_clock::now() - t0)
                             .count();
    QVERIFY2(left.empty(), ("still running 15 s after the workbench was killed:" +
                            Describe(left))
                               .c_str());
    qInfo("%zu agent and instance processes ended %lld ms after the workbench was killed:%s",
          procs.size(), static_cast<long long>(gone_ms), Describe(procs).c_str());

    // Started again on the same state folder: the same nodes come back.
    auto again =
        test::RunProgram({workbench, "--local", "--nodes", "2", "--screenshots",
                          dir_.path().toStdString() + "/shots-again"},
                         90'000, Env());
    QVERIFY2(again.exit_code == 0, again.output.c_str());
    QVERIFY2(PathExists(dir_.path().toStdString() + "/shots-again/cluster.png"),
             again.output.c_str());
    QCOMPARE(NodeIds(), ids_before);
  }
};

QTEST_GUILESS_MAIN(TestFaultWorkbench)
#include "test_fault_workbench.moc"
