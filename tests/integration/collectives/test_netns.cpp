// TCP across network namespaces: three rank processes, each in its own
// network namespace with its own address, joined by veth pairs to a bridge
// in a fourth ("hub") namespace, the way the project's test hosts are
// cabled. The ranks can reach each other only through the veths, so the
// rendezvous, control mesh and TCP transport all cross namespaces. Needs
// root and `ip netns`; skips with the reason otherwise. Everything created
// is deleted again, also when a check fails.
#include <QtTest>

#include <unistd.h>

#include "octet/base/file_util.h"
#include "octet_test.h"
#include "rank_group.h"
#include "rank_worker.h"

using namespace octet;
using namespace octet::collectives::test;

namespace {

constexpr int kRanks = 3;

std::string Ip(int r) { return "10.213.0." + std::to_string(r + 1); }

// The iproute2 `ip` program by absolute path (RunProgram resolves bare names
// in the build's bin directory); empty when it is not installed.
std::string IpTool() {
  std::string path = octet::test::Env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin");
  path += ":/usr/sbin:/sbin";
  size_t start = 0;
  while (start <= path.size()) {
    const size_t end = std::min(path.find(':', start), path.size());
    const std::string candidate = path.substr(start, end - start) + "/ip";
    if (end > start && ::access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return {};
}

// The namespaces of one test run; deleted on destruction.
class Namespaces {
 public:
  Namespaces() {
    const std::string base = "octet-coll-" + std::to_string(::getpid());
    hub_ = base + "-hub";
    for (int r = 0; r < kRanks; ++r) ranks_.push_back(base + "-r" + std::to_string(r));
  }
  ~Namespaces() {
    for (const std::string& ns : created_) octet::test::RunProgram({IpTool(), "netns", "del", ns});
  }
  const std::string& rank_ns(int r) const { return ranks_[r]; }

  // Returns an empty string on success, else what failed.
  std::string Create() {
    if (std::string e = Run({IpTool(), "netns", "add", hub_}); !e.empty()) return e;
    created_.push_back(hub_);
    for (const auto& cmd : std::vector<std::vector<std::string>>{
             {IpTool(), "-n", hub_, "link", "add", "br0", "type", "bridge"},
             {IpTool(), "-n", hub_, "link", "set", "br0", "up"}}) {
      if (std::string e = Run(cmd); !e.empty()) return e;
    }
    for (int r = 0; r < kRanks; ++r) {
      const std::string& ns = ranks_[r];
      if (std::string e = Run({IpTool(), "netns", "add", ns}); !e.empty()) return e;
      created_.push_back(ns);
      const std::string in = "veth" + std::to_string(r), out = "port" + std::to_string(r);
      for (const auto& cmd : std::vector<std::vector<std::string>>{
               {IpTool(), "link", "add", in, "netns", ns, "type", "veth", "peer", "name", out,
                "netns", hub_},
               {IpTool(), "-n", hub_, "link", "set", out, "master", "br0", "up"},
               {IpTool(), "-n", ns, "addr", "add", Ip(r) + "/24", "dev", in},
               {IpTool(), "-n", ns, "link", "set", in, "up"},
               {IpTool(), "-n", ns, "link", "set", "lo", "up"}}) {
        if (std::string e = Run(cmd); !e.empty()) return e;
      }
    }
    return {};
  }

 private:
  static std::string Run(const std::vector<std::string>& argv) {
    auto r = octet::test::RunProgram(argv, 20'000);
    if (r.exit_code == 0) return {};
    std::string cmd;
    for (const auto& a : argv) cmd += a + " ";
    return cmd + "-> " + r.output;
  }
  std::string hub_;
  std::vector<std::string> ranks_;
  std::vector<std::string> created_;
};

}  // namespace

class TestNetns : public QObject {
  Q_OBJECT
 private slots:
  void tcpAcrossNetworkNamespaces() {
    if (::geteuid() != 0) OCTET_SKIP_PREMISE("network namespaces need root");
    if (IpTool().empty() || octet::test::RunProgram({IpTool(), "netns", "list"}).exit_code != 0) {
      OCTET_SKIP_PREMISE("`ip netns` is not available");
    }
    Namespaces ns;
    if (std::string e = ns.Create(); !e.empty()) {
      OCTET_SKIP_PREMISE(("cannot build the namespaces: " + e).c_str());
    }
    auto exe = SelfExecutablePath();
    QVERIFY(exe.ok());
    // Rank 0 listens on its own namespace's address.
    const std::string rendezvous = Ip(0) + ":29500";
    std::vector<std::vector<std::string>> argvs;
    for (int r = 0; r < kRanks; ++r) {
      std::vector<std::string> argv = {IpTool(), "netns", "exec", ns.rank_ns(r)};
      for (const std::string& a :
           RankWorkerArgv(*exe, "conformance", rendezvous, kRanks, r, {"--transports", "tcp"})) {
        argv.push_back(a);
      }
      argvs.push_back(argv);
    }
    RankGroup g;
    QVERIFY(g.Start(argvs).ok());
    const Deadline deadline = Deadline::AfterMs(200'000);
    for (int r = 0; r < kRanks; ++r) {
      bool timed_out = false;
      const ExitStatus e = g.Wait(r, deadline, &timed_out);
      QVERIFY2(!timed_out && e.success(), (e.ToString() + "\n" + g.AllOutput()).c_str());
    }
    for (const char* a : {"oneshot", "ring", "auto"}) {
      QVERIFY2(g.Output(0).find(std::string("OK tcp ") + a) != std::string::npos,
               g.AllOutput().c_str());
    }
    // The other ranks reached rank 0 only at its namespace address.
    QVERIFY(octet::test::RunProgram({IpTool(), "netns", "exec", ns.rank_ns(1), "ip", "route"})
                .output.find("10.213.0.0/24") != std::string::npos);
  }
};

OCTET_QTEST_MAIN_WITH_RANK_WORKER(TestNetns)
#include "test_netns.moc"
