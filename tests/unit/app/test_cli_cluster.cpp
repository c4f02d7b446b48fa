// `octet cluster init|add|status|links|local` as a user runs them: exit codes,
// one-line reasons, --json documents, files with the right permissions.
#include <signal.h>
#include <sys/stat.h>

#include <QtTest>

#include "child_process.h"
#include "octet/agent/cluster_token.h"
#include "octet/app/local_cluster.h"
#include "octet/base/file_util.h"
#include "octet/base/json.h"
#include "octet/base/subprocess.h"
#include "octet_test.h"
#include "recorded_sysfs.h"

using namespace octet;
using nlohmann::json;
using octet::test::RunProgram;

namespace {
unsigned Mode(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return 0;
  return st.st_mode & 0777;
}
// The JSON document on stdout (RunProgram merges stderr; the document starts at the first '{').
json ParseJson(const std::string& out) {
  const size_t b = out.find("{\n");
  if (b == std::string::npos) return json();
  // Human lines on stderr may follow the document; cut at the matching close.
  int depth = 0;
  bool in_string = false, escape = false;
  for (size_t i = b; i < out.size(); ++i) {
    const char c = out[i];
    if (in_string) {
      if (escape)
        escape = false;
      else if (c == '\\')
        escape = true;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    if (c == '{') ++depth;
    if (c == '}' && --depth == 0) return json::parse(out.substr(b, i - b + 1), nullptr, false);
  }
  return json();
}
}  // namespace

class TestCliCluster : public QObject {
  Q_OBJECT
 private:
  QTemporaryDir dir_;
  std::vector<std::string> Env() {
    const std::string d = dir_.path().toStdString();
    return {"OCTET_CONFIG_DIR=" + d + "/config", "XDG_STATE_HOME=" + d + "/state", "HOME=" + d};
  }

 private slots:
  void usage() {
    QCOMPARE(RunProgram({"octet", "cluster"}, 10'000, Env()).exit_code, 2);
    QCOMPARE(RunProgram({"octet", "cluster", "--help"}, 10'000, Env()).exit_code, 0);
    auto r = RunProgram({"octet", "cluster", "frobnicate"}, 10'000, Env());
    QCOMPARE(r.exit_code, 2);
    QVERIFY(r.output.find("unknown subcommand 'frobnicate'") != std::string::npos);
    for (const char* sub : {"init", "add", "status", "links", "local"}) {
      auto h = RunProgram({"octet", "cluster", sub, "--help"}, 10'000, Env());
      QCOMPARE(h.exit_code, 0);
      QVERIFY2(h.output.find("--json") != std::string::npos, sub);
    }
  }

  void initAndAdd() {
    auto r = RunProgram({"octet", "cluster", "init", "--name", "lab", "--nodes",
                         "a=10.0.0.1,b=10.0.0.2:47200", "--tls", "--cabling", "pair", "--json"},
                        30'000, Env());
    QCOMPARE(r.exit_code, 0);
    const json j = ParseJson(r.output);
    QVERIFY2(j.is_object(), r.output.c_str());
    QCOMPARE(j["name"].get<std::string>(), std::string("lab"));
    QCOMPARE(j["nodes"].size(), size_t{2});
    QCOMPARE(j["nodes"][0]["address"].get<std::string>(), std::string("10.0.0.1:47100"));
    const std::string token_file = j["token_file"].get<std::string>();
    QCOMPARE(Mode(token_file), 0600u);
    QVERIFY(agent::ReadTokenFile(token_file).ok());
    QCOMPARE(Mode(j["nodes"][1]["key"].get<std::string>()), 0600u);
    QVERIFY(PathExists(j["ca"].get<std::string>()));

    auto again = RunProgram({"octet", "cluster", "init", "--name", "lab"}, 10'000, Env());
    QCOMPARE(again.exit_code, 1);
    QVERIFY(again.output.find("already exists") != std::string::npos);

    auto add = RunProgram(
        {"octet", "cluster", "add", "c", "--address", "10.0.0.3", "--cluster", "lab", "--json"},
        30'000, Env());
    QCOMPARE(add.exit_code, 0);
    QCOMPARE(ParseJson(add.output)["address"].get<std::string>(), std::string("10.0.0.3:47100"));
    QVERIFY(PathExists(ParseJson(add.output)["cert"].get<std::string>()));

    QCOMPARE(
        RunProgram({"octet", "cluster", "add", "c", "--cluster", "lab"}, 10'000, Env()).exit_code,
        2);
    QCOMPARE(RunProgram({"octet", "cluster", "init", "--name", "x", "--nodes", "noequals"}, 10'000,
                        Env())
                 .exit_code,
             2);
    QCOMPARE(
        RunProgram({"octet", "cluster", "init", "--name", "bad name"}, 10'000, Env()).exit_code, 2);
    QCOMPARE(
        RunProgram({"octet", "cluster", "status", "--cluster", "nope"}, 10'000, Env()).exit_code,
        1);
    QCOMPARE(RunProgram({"octet", "cluster", "status", "--agents", "127.0.0.1:1"}, 10'000, Env())
                 .exit_code,
             2);
  }

  void statusAndLinksOfALocalCluster() {
    app::LocalClusterOptions o;
    o.nodes = 3;
    o.memory_per_node_bytes = 1ull << 30;
    o.cabling = "switch";
    o.state_dir = dir_.path().toStdString() + "/lc";
    o.agent_binary = test::BinDir() + "/octet-agent";
    auto cluster = app::LocalCluster::Start(o, Deadline::AfterMs(30'000));
    QVERIFY2(cluster.ok(), cluster.status().ToString().c_str());
    std::string agents;
    for (size_t i = 0; i < (*cluster)->size(); ++i)
      agents += (i ? "," : "") + (*cluster)->address(i);
    const std::string token = (*cluster)->profile().token_file();
    // Node 1 holds one model in its store (a Hugging Face cache layout: the
    // snapshot of commit abc123, ref main); the others hold none.
    const std::string repo_dir = o.state_dir + "/node-1/hub/models--acme--tiny-model";
    QVERIFY(MakeDirs(repo_dir + "/snapshots/abc123", 0700).ok());
    QVERIFY(MakeDirs(repo_dir + "/refs", 0700).ok());
    QVERIFY(WriteFileAtomic(repo_dir + "/refs/main", "abc123\n").ok());
    QVERIFY(WriteFileAtomic(repo_dir + "/snapshots/abc123/config.json", "{\"a\": 1}\n").ok());
    QVERIFY(WriteFileAtomic(repo_dir + "/snapshots/abc123/model.safetensors", "12345678").ok());

    auto r = RunProgram(
        {"octet", "cluster", "status", "--agents", agents, "--token-file", token, "--json"}, 60'000,
        Env());
    QCOMPARE(r.exit_code, 0);
    json j = ParseJson(r.output);
    QVERIFY2(j.is_object(), r.output.c_str());
    QCOMPARE(j["nodes"].size(), size_t{3});
    for (const auto& n : j["nodes"]) {
      QVERIFY(n["reachable"].get<bool>());
      QCOMPARE(n["facts"]["memory"]["budget_bytes"].get<uint64_t>(), 1ull << 30);
      QVERIFY(n["facts"]["cpu"]["cores"].get<int>() > 0);
    }
    QCOMPARE(j["cabling"]["kind"].get<std::string>(), std::string("switch"));
    // Each node's models, as `octet models --cluster` lists them.
    for (size_t i = 0; i < 3; ++i) {
      const json& n = j["nodes"][i];
      QVERIFY2(n.contains("models") && n["models"].is_array(), n.dump().c_str());
      QCOMPARE(n["models_dir"].get<std::string>(),
               o.state_dir + "/node-" + std::to_string(i) + "/hub");
      QCOMPARE(n["models"].size(), size_t(i == 1 ? 1 : 0));
    }
    const json& model = j["nodes"][1]["models"][0];
    QCOMPARE(model["repo"].get<std::string>(), std::string("acme/tiny-model"));
    QCOMPARE(model["commit"].get<std::string>(), std::string("abc123"));
    QCOMPARE(model["refs"], json::array({"main"}));
    QCOMPARE(model["files"].get<int>(), 2);
    QCOMPARE(model["bytes"].get<int64_t>(), int64_t{8 + 9});
    QCOMPARE(model["missing_files"].get<int>(), 0);
    // The help says so.
    auto help = RunProgram({"octet", "cluster", "status", "--help"}, 10'000, Env());
    QVERIFY2(help.output.find("models_dir") != std::string::npos, help.output.c_str());

    auto links = RunProgram({"octet", "cluster", "links", "--agents", agents, "--token-file", token,
                             "--probe", "--probe-bytes", "1M", "--round-trips", "5", "--json"},
                            60'000, Env());
    QCOMPARE(links.exit_code, 0);
    j = ParseJson(links.output);
    QCOMPARE(j["probes"].size(), size_t{3});
    for (const auto& p : j["probes"]) {
      QVERIFY2(p["ok"].get<bool>(), p.dump().c_str());
      QVERIFY(p["throughput_gbps"].get<double>() > 0);
    }

    // One agent gone: status still answers, exits 1, and says which.
    QVERIFY((*cluster)->KillNode(2).ok());
    r = RunProgram(
        {"octet", "cluster", "status", "--agents", agents, "--token-file", token, "--json"}, 60'000,
        Env());
    QCOMPARE(r.exit_code, 1);
    j = ParseJson(r.output);
    QVERIFY(!j["nodes"][2]["reachable"].get<bool>());
    QCOMPARE(j["cabling"]["kind"].get<std::string>(), std::string("partial"));

    // The wrong token is refused by every agent.
    const std::string bad = dir_.path().toStdString() + "/bad-token";
    QVERIFY(agent::WriteTokenFile(bad, "not-the-token").ok());
    r = RunProgram(
        {"octet", "cluster", "status", "--agents", agents, "--token-file", bad, "--json"}, 60'000,
        Env());
    QCOMPARE(r.exit_code, 1);
    j = ParseJson(r.output);
    QVERIFY2(j["nodes"][0]["error"].get<std::string>().find("unauthenticated") != std::string::npos,
             r.output.c_str());
  }

  // An octet-agent reading a recorded sysfs tree (--rdma-sys-root): the Spark
  // tree with a 1500 MTU on one half and the other half down. `cluster status`
  // shows the RoCE facts, the NCCL settings and the warnings.
  void statusShowsRoceFactsAndWarnings() {
    const std::string d = dir_.path().toStdString() + "/roce-agent";
    QVERIFY(MakeDirs(d, 0700).ok());
    const std::string tree = test::SparkWithMtu1500AndDownHalf(d + "/sys");
    QVERIFY(!tree.empty());
    QVERIFY(agent::WriteTokenFile(d + "/token", "roce-cli-token-0123456789").ok());
    QVERIFY(WriteFileAtomic(d + "/machine-id", "roce-cli-machine\n").ok());
    SpawnOptions so;
    so.argv = test::AgentArgv(test::BinDir(), d, "127.0.0.1:0", {"--rdma-sys-root", tree});
    so.output_file = d + "/agent.log";
    auto agent = Subprocess::Spawn(so);
    QVERIFY2(agent.ok(), agent.status().ToString().c_str());
    const std::string address = test::WaitForAgentAddress(d + "/address", 20'000);
    QVERIFY(!address.empty());

    auto r = RunProgram(
        {"octet", "cluster", "status", "--agents", address, "--token-file", d + "/token", "--json"},
        60'000, Env());
    QCOMPARE(r.exit_code, 0);
    const json j = ParseJson(r.output);
    QVERIFY2(j.is_object(), r.output.c_str());
    const json& f = j["nodes"][0]["facts"];
    QCOMPARE(f["rdma_devices"].size(), size_t{4});
    const json& port = f["rdma_devices"][3]["ports"][0];
    QCOMPARE(port["netdev"].get<std::string>(), std::string("enp1s0f1np1"));
    QCOMPARE(port["mtu"].get<int>(), 1500);
    QCOMPARE(port["active_mtu"].get<int>(), 1024);
    QCOMPARE(port["gid_table"][3]["type"].get<std::string>(), std::string("RoCE v2"));
    QCOMPARE(f["nccl"]["NCCL_IB_HCA"].get<std::string>(), std::string("=rocep1s0f1:1"));
    QVERIFY(f["nccl"]["applied"].get<bool>());
    QCOMPARE(f["roce_warnings"].size(), size_t{2});
    QCOMPARE(f["roce_warnings"][0]["kind"].get<std::string>(), std::string("mtu-below-9000"));
    QCOMPARE(f["roce_warnings"][1]["device"].get<std::string>(), std::string("roceP2p1s0f1"));

    // The human form names each warning under its node.
    r = RunProgram(
        {"octet", "cluster", "status", "--agents", address, "--token-file", d + "/token"}, 60'000,
        Env());
    QVERIFY2(r.output.find("RoCE: enp1s0f1np1 (rocep1s0f1) has MTU 1500") != std::string::npos,
             r.output.c_str());
    (*agent)->Kill(SIGTERM);
    QVERIFY((*agent)->Wait(Deadline::AfterMs(10'000)).ok());
  }

  void localRunsAndStops() {
    auto r = RunProgram({"octet", "cluster", "local", "--nodes", "2", "--memory-per-node", "512M",
                         "--cabling", "ring", "--name", "cli", "--for", "1", "--json"},
                        60'000, Env());
    QCOMPARE(r.exit_code, 0);
    const json j = ParseJson(r.output);
    QVERIFY2(j.is_object(), r.output.c_str());
    QCOMPARE(j["nodes"].size(), size_t{2});
    QVERIFY(j["nodes"][0]["node_id"] != j["nodes"][1]["node_id"]);
    QCOMPARE(j["nodes"][0]["memory_budget_bytes"].get<uint64_t>(), 512ull << 20);
    QCOMPARE(j["cabling"]["kind"].get<std::string>(), std::string("direct-pair"));
    QVERIFY(r.output.find("local cluster 'cli' stopped") != std::string::npos);
    // It left a profile for other terminals, with a private token.
    const std::string profile = j["profile"].get<std::string>();
    QVERIFY(PathExists(profile + "/cluster.json"));
    QCOMPARE(Mode(profile + "/token"), 0600u);
    // Its agents are gone.
    for (const auto& n : j["nodes"]) QVERIFY(::kill(n["pid"].get<int>(), 0) != 0);

    QCOMPARE(RunProgram({"octet", "cluster", "local", "--nodes", "0"}, 10'000, Env()).exit_code, 2);
    QCOMPARE(
        RunProgram({"octet", "cluster", "local", "--cabling", "mesh"}, 10'000, Env()).exit_code, 2);
    QCOMPARE(RunProgram({"octet", "cluster", "local", "--memory-per-node", "lots"}, 10'000, Env())
                 .exit_code,
             2);
  }
};

QTEST_GUILESS_MAIN(TestCliCluster)
#include "test_cli_cluster.moc"
