// Pure parts of the agent: /proc parsers, node identity, tokens, beacons,
// interface policy, CPU naming, job specs and the model-root rule.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <QtTest>

#include "octet/agent/cluster_token.h"
#include "octet/agent/job_arguments.h"
#include "octet/agent/job_supervisor.h"
#include "octet/agent/link_discovery.h"
#include "octet/agent/link_probe.h"
#include "octet/agent/node_facts.h"
#include "octet/agent/node_identity.h"
#include "octet/agent/roce.h"
#include "octet/agent/system_stats.h"
#include "octet/base/file_util.h"
#include "recorded_sysfs.h"

using namespace octet;
using namespace octet::agent;

namespace {

std::string RealPathOf(const std::string& path) {
  char* r = ::realpath(path.c_str(), nullptr);
  if (!r) return "";
  std::string out(r);
  std::free(r);
  return out;
}
// A fresh folder, removed when the test program exits.
std::string TempDir() {
  static std::vector<std::unique_ptr<QTemporaryDir>> dirs;
  dirs.push_back(std::make_unique<QTemporaryDir>());
  return dirs.back()->path().toStdString();
}
unsigned Mode(const std::string& path) {
  struct stat st {};
  ::stat(path.c_str(), &st);
  return st.st_mode & 0777;
}
}  // namespace

class TestAgentUnits : public QObject {
  Q_OBJECT
 private slots:
  // ---- /proc parsers --------------------------------------------------------
  void memInfoParsesKibibytes() {
    auto m = ParseMemInfo(
        "MemTotal:       16318284 kB\nMemFree:  100 kB\nMemAvailable:   12000000 kB\n");
    QVERIFY(m.ok());
    QCOMPARE(m->total_bytes, 16318284ull * 1024);
    QCOMPARE(m->available_bytes, 12000000ull * 1024);
    QVERIFY(!ParseMemInfo("MemTotal: 5 kB\n").ok());  // no MemAvailable: refuse, do not guess
  }
  void procStatBusyFraction() {
    auto a = ParseProcStat("cpu  100 0 100 800 0 0 0 0 0 0\ncpu0 1 2 3 4\n");
    auto b = ParseProcStat("cpu  150 0 150 900 0 0 0 0 0 0\n");
    QVERIFY(a.ok() && b.ok());
    QCOMPARE(a->busy, 200ull);
    QCOMPARE(a->total, 1000ull);
    QCOMPARE(CpuBusyFraction(*a, *b), 0.5);  // 100 busy of 200 elapsed
    QCOMPARE(CpuBusyFraction(*b, *a), 0.0);  // time going backwards is not a load
    QVERIFY(!ParseProcStat("intr 1 2 3\n").ok());
  }
  void netDevCounters() {
    const char* text =
        "Inter-|   Receive                                                |  Transmit\n"
        " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs "
        "drop fifo colls carrier compressed\n"
        "    lo: 1000 10 0 0 0 0 0 0 1000 10 0 0 0 0 0 0\n"
        "  eth0: 123456789 1000 0 0 0 0 0 0 987654 900 0 0 0 0 0 0\n";
    auto r = ParseNetDev(text);
    QVERIFY(r.ok());
    QCOMPARE(r->size(), size_t{2});
    QCOMPARE((*r)[1].name, std::string("eth0"));
    QCOMPARE((*r)[1].rx_bytes, 123456789ull);
    QCOMPARE((*r)[1].tx_bytes, 987654ull);
  }
  void ownProcessFigures() {
    auto rss = ReadProcessRssBytes(::getpid());
    QVERIFY(rss.ok());
    QVERIFY(*rss > 1024 * 1024);
    auto cpu = ReadProcessCpuSeconds(::getpid());
    QVERIFY(cpu.ok());
    QVERIFY(*cpu >= 0);
  }
  void realMachineFacts() {
    auto m = ReadMemInfo();
    QVERIFY(m.ok());
    QVERIFY(m->total_bytes > 0 && m->available_bytes <= m->total_bytes);
    const CpuFacts cpu = ReadCpuFacts();
    QVERIFY(cpu.cores > 0);
    QVERIFY(!cpu.arch.empty());
    QVERIFY(!ReadOsDescription().empty());
  }

  // ---- node identity ----------------------------------------------------------
  void nodeIdIsStableAndStored() {
    const std::string dir = TempDir();
    WriteFileAtomic(dir + "/machine-id", "0123456789abcdef0123456789abcdef\n").IgnoreError();
    NodeIdentityPaths p{dir + "/state", dir + "/machine-id", dir + "/no-uuid"};
    auto a = LoadOrCreateNodeIdentity(p);
    QVERIFY2(a.ok(), a.status().ToString().c_str());
    QVERIFY(a->created);
    QVERIFY(a->node_id.rfind("n-", 0) == 0);
    auto b = LoadOrCreateNodeIdentity(p);
    QVERIFY(b.ok());
    QVERIFY(!b->created);
    QCOMPARE(b->node_id, a->node_id);
  }
  void copiedImageGetsANewIdWhenMachineIdChanges() {
    const std::string dir = TempDir();
    WriteFileAtomic(dir + "/machine-id", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n").IgnoreError();
    NodeIdentityPaths p{dir + "/state", dir + "/machine-id", dir + "/no-uuid"};
    auto original = LoadOrCreateNodeIdentity(p);
    QVERIFY(original.ok());
    // The disk image is copied to a second node, whose first boot makes a new machine id.
    WriteFileAtomic(dir + "/machine-id", "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\n").IgnoreError();
    auto copy = LoadOrCreateNodeIdentity(p);
    QVERIFY(copy.ok());
    QVERIFY(copy->regenerated);
    QVERIFY(copy->node_id != original->node_id);
  }
  void twoStateDirsOnOneMachineDiffer() {
    // Same machine id (a copied image that kept it, or local simulated nodes): the random part
    // differs.
    const std::string dir = TempDir();
    WriteFileAtomic(dir + "/machine-id", "cccccccccccccccccccccccccccccccc\n").IgnoreError();
    auto a = LoadOrCreateNodeIdentity({dir + "/s1", dir + "/machine-id", dir + "/none"});
    auto b = LoadOrCreateNodeIdentity({dir + "/s2", dir + "/machine-id", dir + "/none"});
    QVERIFY(a.ok() && b.ok());
    QVERIFY(a->node_id != b->node_id);
    QCOMPARE(a->node_id.substr(0, 7), b->node_id.substr(0, 7));  // same machine prefix
  }
  void malformedIdFileIsReplaced() {
    const std::string dir = TempDir();
    MakeDirs(dir + "/state").IgnoreError();
    WriteFileAtomic(dir + "/state/node_id", "garbage{").IgnoreError();
    auto a = LoadOrCreateNodeIdentity({dir + "/state", dir + "/none", dir + "/none"});
    QVERIFY(a.ok());
    QVERIFY(a->created);
  }

  // ---- tokens -----------------------------------------------------------------
  void tokenFileIsPrivateAndChecked() {
    const std::string dir = TempDir();
    auto t = GenerateClusterToken();
    QVERIFY(t.ok());
    QCOMPARE(t->size(), size_t{64});
    QVERIFY(*t != *GenerateClusterToken());
    QVERIFY(WriteTokenFile(dir + "/token", *t).ok());
    QCOMPARE(Mode(dir + "/token"), 0600u);
    auto back = ReadTokenFile(dir + "/token");
    QVERIFY(back.ok());
    QCOMPARE(*back, *t);
    ::chmod((dir + "/token").c_str(), 0644);
    auto refused = ReadTokenFile(dir + "/token");
    QCOMPARE(refused.status().code(), StatusCode::kPermissionDenied);
    QVERIFY(refused.status().message().find("chmod 600") != std::string::npos);
    QCOMPARE(ReadTokenFile(dir + "/missing").status().code(), StatusCode::kNotFound);
  }
  void verifierComparesWholeTokens() {
    TokenVerifier v("s3cret-token");
    QVERIFY(v.Matches("s3cret-token"));
    QVERIFY(!v.Matches("s3cret-toke"));
    QVERIFY(!v.Matches("s3cret-token "));
    QVERIFY(!v.Matches(""));
    QVERIFY(ConstantTimeEquals("abc", "abc"));
    QVERIFY(!ConstantTimeEquals("abc", "abd"));
    QVERIFY(!ConstantTimeEquals("abc", "abcd"));
  }

  // ---- beacons ----------------------------------------------------------------
  void beaconRoundTripAndForgery() {
    const std::string d = EncodeBeacon({"n-1234-abcdef", "enp1s0f0np0", 40123}, "tok");
    auto b = DecodeBeacon(d, "tok");
    QVERIFY2(b.ok(), b.status().ToString().c_str());
    QCOMPARE(b->node_id, std::string("n-1234-abcdef"));
    QCOMPARE(b->interface, std::string("enp1s0f0np0"));
    QCOMPARE(b->probe_port, uint16_t{40123});
    // Another cluster's token, a tampered field, junk: all dropped.
    QCOMPARE(DecodeBeacon(d, "other").status().code(), StatusCode::kUnauthenticated);
    std::string tampered = d;
    tampered.replace(tampered.find("enp1s0f0np0"), 11, "enp1s0f1np1");
    QVERIFY(!DecodeBeacon(tampered, "tok").ok());
    QVERIFY(!DecodeBeacon("hello", "tok").ok());
    QVERIFY(!DecodeBeacon(std::string(2000, 'x'), "tok").ok());
  }
  void linkTableExpiresAndPrefersIpv4() {
    LinkTable t;
    t.Record("eth1", {"n-a", "eth0", 1}, "fe80::1%eth1", false);
    t.Record("eth1", {"n-a", "eth0", 1}, "10.0.0.2", true);
    t.Record("eth1", {"n-a", "eth0", 1}, "fe80::1%eth1", false);
    auto now = t.Current(5000);
    QCOMPARE(now.size(), size_t{1});
    QCOMPARE(now[0].peer_address, std::string("10.0.0.2"));
    QThread::msleep(30);
    QCOMPARE(t.Current(10).size(), size_t{0});  // not heard in the last 10 ms
  }
  void beaconsAreHeardOverUdp() {
    // The receive path end to end: a datagram to the discovery port is recorded
    // with the interface it arrived on (here: lo, since the test sends there).
    auto d = LinkDiscovery::Start({"n-self-000000", "tok", 0, 60'000, 7, {}});
    QVERIFY2(d.ok(), d.status().ToString().c_str());
    int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons((*d)->port());
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const std::string good = EncodeBeacon({"n-peer-111111", "ring0", 4242}, "tok");
    const std::string bad = EncodeBeacon({"n-evil-222222", "ring0", 4242}, "wrong");
    const std::string self = EncodeBeacon({"n-self-000000", "ring1", 1}, "tok");
    for (const auto& m : {good, bad, self}) {
      ::sendto(fd, m.data(), m.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof to);
    }
    ::close(fd);
    std::vector<LinkObservationRecord> seen;
    for (int i = 0; i < 200 && seen.empty(); ++i) {
      QThread::msleep(10);
      seen = (*d)->Observations(5000);
    }
    QCOMPARE(seen.size(), size_t{1});
    QCOMPARE(seen[0].peer_node_id, std::string("n-peer-111111"));
    QCOMPARE(seen[0].peer_interface, std::string("ring0"));
    QCOMPARE(seen[0].local_interface, std::string("lo"));
    QCOMPARE(seen[0].peer_address, std::string("127.0.0.1"));
    QCOMPARE(seen[0].peer_probe_port, uint16_t{4242});
  }

  // ---- interfaces ---------------------------------------------------------------
  void discoveryPolicy_data() {
    QTest::addColumn<QString>("name");
    QTest::addColumn<QString>("kind");
    QTest::addColumn<QString>("master");
    QTest::addColumn<bool>("up");
    QTest::addColumn<bool>("beacons");
    QTest::newRow("cx7 port") << "enp1s0f0np0"
                              << "ethernet"
                              << "" << true << true;
    QTest::newRow("our netns veth") << "ring0"
                                    << "veth"
                                    << "" << true << true;
    QTest::newRow("down link") << "enp1s0f1np1"
                               << "ethernet"
                               << "" << false << false;
    QTest::newRow("docker bridge") << "docker0"
                                   << "bridge"
                                   << "" << true << false;
    QTest::newRow("docker user net") << "br-3f2a9c"
                                     << "bridge"
                                     << "" << true << false;
    QTest::newRow("container veth") << "veth1a2b3c"
                                    << "veth"
                                    << "docker0" << true << false;
    QTest::newRow("libvirt") << "virbr0"
                             << "bridge"
                             << "" << true << false;
    QTest::newRow("tailscale") << "tailscale0"
                               << "tunnel"
                               << "" << true << false;
    QTest::newRow("bond member") << "enp2s0"
                                 << "ethernet"
                                 << "bond0" << true << false;
    QTest::newRow("user bridge") << "br0"
                                 << "bridge"
                                 << "" << true << true;
  }
  void discoveryPolicy() {
    QFETCH(QString, name);
    QFETCH(QString, kind);
    QFETCH(QString, master);
    QFETCH(bool, up);
    QFETCH(bool, beacons);
    InterfaceInfo nic;
    nic.name = name.toStdString();
    nic.kind = kind.toStdString();
    nic.master = master.toStdString();
    nic.up = up;
    const std::string why = DiscoveryExclusionReason(nic, {});
    QVERIFY2(why.empty() == beacons, why.c_str());
  }
  void discoveryFilterLists() {
    InterfaceInfo nic;
    nic.name = "enp1s0f0np0";
    nic.kind = "ethernet";
    nic.up = true;
    QVERIFY(!DiscoveryExclusionReason(nic, {{}, {"enp1s0f0*"}}).empty());
    QVERIFY(DiscoveryExclusionReason(nic, {{"enp1s0f0*"}, {}}).empty());
    QVERIFY(!DiscoveryExclusionReason(nic, {{"ring*"}, {}}).empty());
    nic.loopback = true;
    QCOMPARE(DiscoveryExclusionReason(nic, {{"*"}, {}}), std::string("loopback"));
  }
  void listsThisMachinesInterfaces() {
    auto nics = ListInterfaces();
    QVERIFY(nics.ok());
    bool lo = false;
    for (const auto& n : *nics) {
      if (n.loopback) {
        lo = true;
        QVERIFY(!n.discovery);
        QVERIFY(!n.ipv4.empty());
      }
    }
    QVERIFY(lo);
  }
  void cpuModelNames() {
    QCOMPARE(CpuModelFromCpuinfo("processor : 0\nmodel name : AMD EPYC 7763\n"),
             std::string("AMD EPYC 7763"));
    std::string gb10;
    for (int i = 0; i < 10; ++i)
      gb10 += "processor : x\nCPU implementer : 0x41\nCPU part : 0xd85\n\n";
    for (int i = 0; i < 10; ++i)
      gb10 += "processor : y\nCPU implementer : 0x41\nCPU part : 0xd87\n\n";
    QCOMPARE(CpuModelFromCpuinfo(gb10), std::string("10x Cortex-X925 + 10x Cortex-A725"));
  }
  void probesFailCleanlyWithoutHardware() {
    const GpuProbe g = ProbeGpus();
    if (g.gpus.empty()) QVERIFY(!g.note.empty());
    const RdmaProbe r = ProbeRdma();
    if (r.devices.empty()) QVERIFY(!r.note.empty());
  }

  // ---- jobs ---------------------------------------------------------------------
  void workerCommandLineCarriesTheWiring() {
    JobSpec s;
    s.job_id = "qwen-tp4";
    s.model = "/models/qwen";
    s.world_size = 4;
    s.rank = 2;
    s.rendezvous = "10.0.0.1:29500";
    s.transport = "tcp";
    s.algorithm = "ring";
    s.threads = 8;
    s.extra_args = {"--max-batch", "8"};
    const auto argv = JobCommandLine(s, "/opt/octet/bin/octet");
    const std::vector<std::string> want = {
        "/opt/octet/bin/octet", "worker", "--job",  "inference", "--model",      "/models/qwen",
        "--world-size",         "4",      "--rank", "2",         "--rendezvous", "10.0.0.1:29500",
        "--transport",          "tcp",    "--algo", "ring",      "--threads",    "8",
        "--max-batch",          "8"};
    QCOMPARE(argv, want);
    JobSpec r;
    r.job_id = "gw";
    r.kind = JobKind::kRouter;
    r.policy = "/etc/octet/policy.yaml";
    r.port = 8080;
    QCOMPARE(JobCommandLine(r, "octet"),
             (std::vector<std::string>{"octet", "route", "--policy", "/etc/octet/policy.yaml",
                                       "--port", "8080"}));
  }
  void specValidation_data() {
    QTest::addColumn<QString>("field");
    QTest::addColumn<QString>("value");
    QTest::addColumn<QString>("complaint");
    QTest::newRow("job id") << "job_id"
                            << "a b"
                            << "job id";
    QTest::newRow("transport") << "transport"
                               << "carrier-pigeon"
                               << "transport";
    QTest::newRow("algorithm") << "algorithm"
                               << "magic"
                               << "algorithm";
    QTest::newRow("rank") << "rank"
                          << "4"
                          << "rank 4";
    QTest::newRow("rendezvous") << "rendezvous"
                                << "nohostport"
                                << "rendezvous";
    QTest::newRow("port 0 off rank 0") << "rendezvous_rank1"
                                       << "10.0.0.1:0"
                                       << "only rank 0";
    QTest::newRow("wiring override") << "extra"
                                     << "--rank=3"
                                     << "not allowed";
  }
  void specValidation() {
    QFETCH(QString, field);
    QFETCH(QString, value);
    QFETCH(QString, complaint);
    const std::string dir = TempDir();
    MakeDirs(dir + "/m").IgnoreError();
    JobSpec s;
    s.job_id = "j1";
    s.model = dir + "/m";
    s.world_size = 4;
    s.rendezvous = "127.0.0.1:0";
    const std::string v = value.toStdString();
    if (field == "job_id") s.job_id = v;
    if (field == "transport") s.transport = v;
    if (field == "algorithm") s.algorithm = v;
    if (field == "rank") s.rank = static_cast<uint32_t>(std::stoi(v));
    if (field == "rendezvous") s.rendezvous = v;
    if (field == "rendezvous_rank1") {
      s.rendezvous = v;
      s.rank = 1;
    }
    if (field == "extra") s.extra_args = {v};
    QVERIFY(
        ValidateJobSpec(JobSpec{"ok", JobKind::kInference, dir + "/m", 4, 0, "127.0.0.1:0"}, {dir})
            .ok());
    Status st = ValidateJobSpec(s, {dir});
    QCOMPARE(st.code(), StatusCode::kInvalidArgument);
    QVERIFY2(st.message().find(complaint.toStdString()) != std::string::npos, st.message().c_str());
  }
  void modelRootsAreEnforcedThroughSymlinks() {
    const std::string dir = TempDir();
    MakeDirs(dir + "/models/qwen").IgnoreError();
    MakeDirs(dir + "/models-evil").IgnoreError();
    MakeDirs(dir + "/elsewhere/secret").IgnoreError();
    ::symlink((dir + "/elsewhere/secret").c_str(), (dir + "/models/link").c_str());
    std::string resolved;
    QVERIFY(CheckModelPath(dir + "/models/qwen", {dir + "/models"}, &resolved).ok());
    QVERIFY(resolved.find("/models/qwen") != std::string::npos);
    QVERIFY(CheckModelPath(dir + "/models", {dir + "/models"}, nullptr).ok());
    // A sibling that shares the prefix, a symlink out of the root, a path with "..": refused.
    QCOMPARE(CheckModelPath(dir + "/models-evil", {dir + "/models"}, nullptr).code(),
             StatusCode::kPermissionDenied);
    QCOMPARE(CheckModelPath(dir + "/models/link", {dir + "/models"}, nullptr).code(),
             StatusCode::kPermissionDenied);
    QCOMPARE(CheckModelPath(dir + "/models/../elsewhere/secret", {dir + "/models"}, nullptr).code(),
             StatusCode::kPermissionDenied);
    QCOMPARE(CheckModelPath(dir + "/models/missing", {dir + "/models"}, nullptr).code(),
             StatusCode::kNotFound);
    QCOMPARE(CheckModelPath(dir + "/models/qwen", {}, nullptr).code(),
             StatusCode::kPermissionDenied);
  }
  // An authenticated caller must not read files outside the model roots
  // through a router job's policy (its parse errors would stream the lines
  // back), nor through training data or a trainer config.
  void policiesAndDataMustBeInsideTheRoots() {
    const std::string dir = TempDir();
    MakeDirs(dir + "/models/qwen").IgnoreError();
    MakeDirs(dir + "/models/data").IgnoreError();
    MakeDirs(dir + "/outside").IgnoreError();
    QVERIFY(
        WriteFileAtomic(dir + "/outside/secret", "root:$6$salt$hash:19000:0:99999:7:::\n").ok());
    QVERIFY(WriteFileAtomic(dir + "/models/policy.yaml", "version: 1\n").ok());
    ::symlink((dir + "/outside/secret").c_str(), (dir + "/models/link.yaml").c_str());
    ::symlink((dir + "/outside").c_str(), (dir + "/models/data-link").c_str());
    const std::vector<std::string> roots = {dir + "/models"};

    JobSpec r;
    r.job_id = "gw";
    r.kind = JobKind::kRouter;
    for (const std::string& bad : {std::string("/etc/shadow"), dir + "/outside/secret",
                                   dir + "/models/link.yaml", dir + "/models/../outside/secret"}) {
      r.policy = bad;
      const Status st = ValidateJobSpec(r, roots);
      QVERIFY2(st.code() == StatusCode::kPermissionDenied || st.code() == StatusCode::kNotFound,
               (bad + ": " + st.ToString()).c_str());
      QVERIFY2(st.message().find("root:") == std::string::npos, st.message().c_str());
    }
    r.policy = dir + "/models/policy.yaml";
    JobSpec launched;
    QVERIFY(ValidateJobSpec(r, roots, &launched).ok());
    QCOMPARE(launched.policy, RealPathOf(r.policy));
    // A router job on an agent with no roots is refused as well.
    QCOMPARE(ValidateJobSpec(r, {}).code(), StatusCode::kPermissionDenied);
    // A missing file outside the roots is not told apart from an existing one
    // (no probing which files exist elsewhere); one inside them is NotFound.
    r.policy = dir + "/outside/no-such-file";
    QCOMPARE(ValidateJobSpec(r, roots).code(), StatusCode::kPermissionDenied);
    r.policy = dir + "/models/no-such-file";
    QCOMPARE(ValidateJobSpec(r, roots).code(), StatusCode::kNotFound);

    JobSpec t;
    t.job_id = "train";
    t.kind = JobKind::kTraining;
    t.model = dir + "/models/qwen";
    t.extra_args = {"--data", dir + "/outside"};
    QCOMPARE(ValidateJobSpec(t, roots).code(), StatusCode::kPermissionDenied);
    t.extra_args = {"--data=" + dir + "/models/data-link"};
    QCOMPARE(ValidateJobSpec(t, roots).code(), StatusCode::kPermissionDenied);
    t.extra_args = {"--config", dir + "/outside/secret"};
    QCOMPARE(ValidateJobSpec(t, roots).code(), StatusCode::kPermissionDenied);
    t.extra_args = {"--data", dir + "/models/data", "--config", "d4", "--steps", "20"};
    QVERIFY(ValidateJobSpec(t, roots, &launched).ok());
    QCOMPARE(launched.extra_args,
             (std::vector<std::string>{"--data=" + RealPathOf(dir + "/models/data"), "--config=d4",
                                       "--steps=20"}));
  }

  // Extra arguments are an allow-list per job kind: nothing that writes a
  // file, reads one outside the roots, or listens on every network passes.
  void extraArgumentsAreAnAllowList_data() {
    QTest::addColumn<int>("kind");
    QTest::addColumn<QStringList>("args");
    QTest::addColumn<bool>("allowed");
    const int inf = int(JobKind::kInference), tr = int(JobKind::kTraining),
              rt = int(JobKind::kRouter);
    QTest::newRow("logits-out") << inf << QStringList{"--logits-out", "/etc/passwd"} << false;
    QTest::newRow("logits-out=") << inf << QStringList{"--logits-out=/etc/passwd"} << false;
    QTest::newRow("host wildcard") << inf << QStringList{"--host", "0.0.0.0"} << false;
    QTest::newRow("host ipv6 wildcard") << inf << QStringList{"--host=::"} << false;
    QTest::newRow("host elsewhere") << inf << QStringList{"--host", "192.0.2.1"} << false;
    QTest::newRow("host loopback") << inf << QStringList{"--host", "127.0.0.1"} << true;
    QTest::newRow("host name") << inf << QStringList{"--host", QSysInfo::machineHostName()} << true;
    QTest::newRow("host other name")
        << inf << QStringList{"--host", "not-this-node.invalid"} << false;
    QTest::newRow("router host wildcard") << rt << QStringList{"--host", "0.0.0.0"} << false;
    QTest::newRow("router port") << rt << QStringList{"--port", "0"} << true;
    QTest::newRow("trainer out") << tr << QStringList{"--out", "/tmp/x"} << false;
    QTest::newRow("trainer grads-out") << tr << QStringList{"--grads-out", "/tmp/x"} << false;
    QTest::newRow("trainer init") << tr << QStringList{"--init", "/tmp"} << false;
    QTest::newRow("bare word") << inf << QStringList{"/etc/passwd"} << false;
    QTest::newRow("help") << inf << QStringList{"--help"} << false;
    QTest::newRow("flag with value") << inf << QStringList{"--json=1"} << false;
    QTest::newRow("missing value") << inf << QStringList{"--slots"} << false;
    QTest::newRow("count out of range") << inf << QStringList{"--slots", "99999999"} << false;
    QTest::newRow("negative count") << inf << QStringList{"--max-tokens", "-1"} << false;
    QTest::newRow("nan") << inf << QStringList{"--temperature", "nan"} << false;
    QTest::newRow("backend path") << inf << QStringList{"--backend", "../x"} << false;
    QTest::newRow("serving flags") << inf << QStringList{"--slots",     "8",      "--context=2048",
                                                         "--kv-memory", "1GiB",   "--kv-dtype",
                                                         "f16",         "--port", "0"}
                                   << true;
    QTest::newRow("one generation")
        << inf
        << QStringList{"--prompt-ids", "1,2,3", "--max-tokens", "6", "--ignore-eos", "--json"}
        << true;
    QTest::newRow("speculative decoding")
        << inf << QStringList{"--speculative", "ngram", "--draft-tokens=3"} << true;
    QTest::newRow("speculative mtp") << inf << QStringList{"--speculative=mtp"} << true;
    QTest::newRow("unknown speculative method")
        << inf << QStringList{"--speculative", "eagle"} << false;
    QTest::newRow("draft tokens out of range")
        << inf << QStringList{"--draft-tokens", "99"} << false;
    QTest::newRow("fixed draft lengths")
        << inf << QStringList{"--speculative", "ngram", "--draft-length=fixed"} << true;
    QTest::newRow("unknown draft length") << inf << QStringList{"--draft-length", "long"} << false;
    QTest::newRow("quantize at load") << inf << QStringList{"--quantize", "nvfp4"} << true;
    QTest::newRow("quantize off") << inf << QStringList{"--quantize=off"} << true;
    QTest::newRow("unknown quantization") << inf << QStringList{"--quantize", "int4"} << false;
    QTest::newRow("fake flags without the owner") << inf << QStringList{"--fake-sleep"} << false;
  }
  void extraArgumentsAreAnAllowList() {
    QFETCH(int, kind);
    QFETCH(QStringList, args);
    QFETCH(bool, allowed);
    std::vector<std::string> a;
    for (const auto& s : args) a.push_back(s.toStdString());
    auto r = CheckExtraArgs(JobKind(kind), a, {TempDir()});
    QVERIFY2(r.ok() == allowed, r.ok() ? "allowed" : r.status().ToString().c_str());
  }
  void valuesCannotBecomeFlags() {
    // A prompt that looks like a flag stays the prompt's value on the launched line.
    auto r = CheckExtraArgs(JobKind::kInference, {"--prompt", "--logits-out=/etc/passwd"}, {});
    QVERIFY(r.ok());
    QCOMPARE(*r, (std::vector<std::string>{"--prompt=--logits-out=/etc/passwd"}));
    // A node owner's own program may take its own flags; the caller cannot add more.
    QVERIFY(CheckExtraArgs(JobKind::kInference, {"--fake-lines=3"}, {}, {"fake-lines"}).ok());
    QVERIFY(!CheckExtraArgs(JobKind::kInference, {"--fake-linesx=3"}, {}, {"fake-lines"}).ok());
  }
  void theCheckedModelPathIsLaunched() {
    const std::string dir = TempDir();
    MakeDirs(dir + "/models/qwen").IgnoreError();
    ::symlink((dir + "/models/qwen").c_str(), (dir + "/models/alias").c_str());
    JobSpec s{"j1", JobKind::kInference, dir + "/models/alias", 1, 0, "127.0.0.1:0"};
    JobSpec launched;
    QVERIFY(ValidateJobSpec(s, {dir + "/models"}, &launched).ok());
    QCOMPARE(launched.model, RealPathOf(dir + "/models/qwen"));
    const auto argv = JobCommandLine(launched, "octet");
    QVERIFY(std::find(argv.begin(), argv.end(), RealPathOf(dir + "/models/qwen")) != argv.end());
    QVERIFY(std::find(argv.begin(), argv.end(), dir + "/models/alias") == argv.end());
  }
  // RoCE facts from a recorded sysfs tree of a DGX Spark-like node (a
  // ConnectX-7 whose ports each show as two PCIe halves), and the NCCL
  // settings they call for.
  void roceFactsAndNcclSettings() {
    const std::string sys = TempDir() + "/sys";
    auto put = [&](const std::string& rel, const std::string& text) {
      MakeDirs(DirName(sys + "/" + rel)).IgnoreError();
      QVERIFY(WriteFileAtomic(sys + "/" + rel, text + "\n").ok());
    };
    struct Dev {
      std::string name, pci, netdev, state;
      int mtu;
    };
    const std::vector<Dev> devs = {
        {"rocep1s0f0", "0000:01:00.0", "enp1s0f0np0", "4: ACTIVE", 9000},
        {"roceP2p1s0f0", "0002:01:00.0", "enP2p1s0f0np0", "4: ACTIVE", 9000},
        {"rocep1s0f1", "0000:01:00.1", "enp1s0f1np1", "4: ACTIVE", 1500},
        {"roceP2p1s0f1", "0002:01:00.1", "enP2p1s0f1np1", "1: DOWN", 9000}};
    for (const Dev& d : devs) {
      const std::string pci_dir = sys + "/devices/pci/" + d.pci;
      MakeDirs(pci_dir + "/net/" + d.netdev).IgnoreError();
      MakeDirs(sys + "/class/infiniband/" + d.name).IgnoreError();
      QCOMPARE(
          ::symlink(pci_dir.c_str(), (sys + "/class/infiniband/" + d.name + "/device").c_str()), 0);
      const std::string port = "class/infiniband/" + d.name + "/ports/1/";
      put(port + "state", d.state);
      put(port + "link_layer", "Ethernet");
      put(port + "gids/0", "fe80:0000:0000:0000:0a00:00ff:fe00:0001");
      put(port + "gid_attrs/types/0", "IB/RoCE v1");
      put(port + "gids/1", "fe80:0000:0000:0000:0a00:00ff:fe00:0001");
      put(port + "gid_attrs/types/1", "RoCE v2");
      put(port + "gids/2", "0000:0000:0000:0000:0000:ffff:0a00:0001");
      put(port + "gid_attrs/types/2", "IB/RoCE v1");
      put(port + "gids/3", "0000:0000:0000:0000:0000:ffff:0a00:0001");
      put(port + "gid_attrs/types/3", "RoCE v2");
      put(port + "gids/4", "0000:0000:0000:0000:0000:0000:0000:0000");
      for (int i = 0; i < 4; ++i) put(port + "gid_attrs/ndevs/" + std::to_string(i), d.netdev);
      put("class/net/" + d.netdev + "/mtu", std::to_string(d.mtu));
    }
    const RdmaProbe probe = ReadRdmaSysfs(sys);
    QCOMPARE(probe.devices.size(), size_t{4});
    const RdmaDeviceFacts& first = probe.devices[2];  // sorted: roceP2... before rocep...
    QCOMPARE(first.name, std::string("rocep1s0f0"));
    QCOMPARE(first.pci_address, std::string("0000:01:00.0"));
    QCOMPARE(first.netdev, std::string("enp1s0f0np0"));
    QCOMPARE(first.ports.at(0).state, std::string("ACTIVE"));
    QCOMPARE(first.ports[0].mtu, 9000);
    QCOMPARE(first.ports[0].gid_table.size(), size_t{4});  // the zero GID left out
    QCOMPARE(first.ports[0].gid_table[3].gid, std::string("::ffff:10.0.0.1"));
    QCOMPARE(first.ports[0].gid_table[3].type, std::string("RoCE v2"));

    const NcclNetworkSettings s = NcclSettingsFor(probe);
    const std::vector<std::string> want = {
        "NCCL_IB_HCA==roceP2p1s0f0:1,rocep1s0f0:1,rocep1s0f1:1", "NCCL_IB_GID_INDEX=3",
        "NCCL_SOCKET_IFNAME==enP2p1s0f0np0,enp1s0f0np0,enp1s0f1np1"};
    QCOMPARE(s.env, want);
    std::string warnings;
    for (const auto& w : s.warnings) warnings += w.kind + " " + w.device + ": " + w.message + "\n";
    QVERIFY2(warnings.find("mtu-below-9000 rocep1s0f1: enp1s0f1np1 (rocep1s0f1) has MTU 1500") !=
                 std::string::npos,
             warnings.c_str());
    QVERIFY2(warnings.find("port-half-unused roceP2p1s0f1: roceP2p1s0f1 port 1 is DOWN while "
                           "rocep1s0f1 on the same physical port (01:00.1/1) is in use") !=
                 std::string::npos,
             warnings.c_str());
    QCOMPARE(s.warnings.size(), size_t{2});
    QCOMPARE(s.warnings[1].port, uint32_t{1});
    // No devices: no settings, no complaint.
    const NcclNetworkSettings none = NcclSettingsFor(ReadRdmaSysfs(TempDir() + "/empty"));
    QVERIFY(none.env.empty() && none.warnings.empty());
  }

  // The recorded Spark tree (tests/data/sysfs/spark-roce): one cable, both
  // PCIe halves of that port in use, nothing to warn about.
  void roceRecordedSparkTree() {
    const RdmaProbe probe = ReadRdmaSysfs(test::RecordedSysfs());
    QCOMPARE(probe.devices.size(), size_t{4});
    QVERIFY(probe.note.empty());
    const RdmaDeviceFacts& cabled =
        probe.devices[3];  // roceP2p1s0f0, roceP2p1s0f1, rocep1s0f0, ...
    QCOMPARE(cabled.name, std::string("rocep1s0f1"));
    QCOMPARE(cabled.pci_address, std::string("0000:01:00.1"));
    QCOMPARE(cabled.netdev, std::string("enp1s0f1np1"));
    const RdmaPortFacts& port = cabled.ports.at(0);
    QCOMPARE(port.state, std::string("ACTIVE"));
    QCOMPARE(port.phys_state, std::string("LinkUp"));
    QCOMPARE(port.rate, std::string("200 Gb/sec (4X HDR)"));
    QCOMPARE(port.netdev, std::string("enp1s0f1np1"));
    QCOMPARE(port.mtu, 9000);
    QCOMPARE(port.active_mtu, 4096);
    QCOMPARE(port.gid_table.size(), size_t{4});
    QCOMPARE(port.gid_table[3].gid, std::string("::ffff:10.10.0.1"));
    QCOMPARE(port.gid_table[3].type, std::string("RoCE v2"));
    QCOMPARE(port.gid_table[0].type, std::string("IB/RoCE v1"));
    const RdmaPortFacts& idle = probe.devices[2].ports.at(0);  // rocep1s0f0: no cable
    QCOMPARE(idle.state, std::string("DOWN"));
    QCOMPARE(idle.phys_state, std::string("Disabled"));
    QCOMPARE(idle.mtu, 1500);
    QCOMPARE(idle.active_mtu, 1024);
    QCOMPARE(idle.gid_table.size(), size_t{2});  // link-local only

    const NcclNetworkSettings s = NcclSettingsFor(probe);
    const std::vector<std::string> want = {"NCCL_IB_HCA==roceP2p1s0f1:1,rocep1s0f1:1",
                                           "NCCL_IB_GID_INDEX=3",
                                           "NCCL_SOCKET_IFNAME==enP2p1s0f1np1,enp1s0f1np1"};
    QCOMPARE(s.env, want);
    QVERIFY2(s.warnings.empty(), s.warnings.empty() ? "" : s.warnings[0].message.c_str());
  }

  // Variants of the recorded tree: a 1500 MTU on one half and the other half
  // down; RoCE v2 off.
  void roceRecordedSparkTreeFaults() {
    const std::string faulty = test::SparkWithMtu1500AndDownHalf(TempDir() + "/sys");
    QVERIFY(!faulty.empty());
    NcclNetworkSettings s = NcclSettingsFor(ReadRdmaSysfs(faulty));
    QCOMPARE(s.env, (std::vector<std::string>{"NCCL_IB_HCA==rocep1s0f1:1", "NCCL_IB_GID_INDEX=3",
                                              "NCCL_SOCKET_IFNAME==enp1s0f1np1"}));
    QCOMPARE(s.warnings.size(), size_t{2});
    QCOMPARE(s.warnings[0].kind, std::string(kRoceMtuBelow9000));
    QCOMPARE(s.warnings[0].device, std::string("rocep1s0f1"));
    QCOMPARE(s.warnings[0].port, uint32_t{1});
    QVERIFY(s.warnings[0].message.find("MTU 1500") != std::string::npos);
    QCOMPARE(s.warnings[1].kind, std::string(kRocePortHalfUnused));
    QCOMPARE(s.warnings[1].device, std::string("roceP2p1s0f1"));
    QVERIFY2(s.warnings[1].message.find("bring enP2p1s0f1np1 up") != std::string::npos,
             s.warnings[1].message.c_str());

    const std::string v1_only = test::SparkWithoutRoceV2(TempDir() + "/sys");
    QVERIFY(!v1_only.empty());
    s = NcclSettingsFor(ReadRdmaSysfs(v1_only));
    QVERIFY(s.env.empty());
    std::vector<std::string> kinds;
    for (const auto& w : s.warnings) kinds.push_back(w.kind + " " + w.device);
    QCOMPARE(kinds, (std::vector<std::string>{"no-rocev2-gid roceP2p1s0f1",
                                              "no-rocev2-gid rocep1s0f1", "no-usable-port "}));
  }

  void roceActiveMtuFollowsTheKernel() {
    QCOMPARE(RoceActiveMtu(9000), 4096);
    QCOMPARE(RoceActiveMtu(4200), 4096);
    QCOMPARE(RoceActiveMtu(4191), 2048);  // 4096 + 96 bytes of RoCE headers do not fit
    QCOMPARE(RoceActiveMtu(1500), 1024);
    QCOMPARE(RoceActiveMtu(0), 0);
  }

  void errorLines() {
    QVERIFY(LooksLikeError("E 12:00:00.000 [rank 2] tcp.cpp:10] peer rank 3 unreachable"));
    QVERIFY(LooksLikeError("RuntimeError: CUDA error"));
    QVERIFY(!LooksLikeError("step 10 loss 3.2"));
  }
};

QTEST_APPLESS_MAIN(TestAgentUnits)
#include "test_agent_units.moc"
