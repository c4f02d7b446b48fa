// `octet pull` / `octet models` / `octet plan REPO` against a Hub on loopback
// (tests/support/loopback_hub.h) serving a checkpoint the test writes itself
// (WriteRandomCheckpoint) plus a 4 MiB LFS file; resume and verification are
// checked by what crossed the wire, not by what the client says.
#include <httplib.h>

#include <QTemporaryDir>
#include <QtTest>
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "child_process.h"
#include "loopback_hub.h"
#include "octet/app/agent_client.h"
#include "octet/app/cluster_profile.h"
#include "octet/app/hub.h"
#include "octet/app/local_cluster.h"
#include "octet/base/file_util.h"
#include "octet/base/json.h"
#include "octet_test.h"
#include "random_checkpoint.h"

using octet::test::RunProgram;
namespace fs = std::filesystem;

using octet::test::GitBlobId;
using octet::test::LoopbackHub;
using octet::test::Random;
using octet::test::ReadDir;
using octet::test::RepoFile;
using octet::test::Sha256;

class TestHubPull : public QObject {
  Q_OBJECT

  QTemporaryDir tmp_;
  std::unique_ptr<LoopbackHub> hub_;
  std::vector<RepoFile> files_;  // acme/tiny
  std::vector<RepoFile> moe_;    // acme/moe: Qwen3-MoE with NVFP4 experts (hf_quant_config.json)
  std::string cache_;
  int run_ = 0;

  // A fresh cache folder per test function.
  std::vector<std::string> Env(std::vector<std::string> more = {}) {
    std::vector<std::string> env = {
        "HF_HUB_CACHE=" + cache_, "HF_HOME=" + tmp_.path().toStdString() + "/hf-home",
        "HF_ENDPOINT=" + hub_->endpoint(), "HF_TOKEN=", "HF_HUB_OFFLINE="};
    for (const auto& m : more) {  // later settings replace the defaults above
      const std::string key = m.substr(0, m.find('=') + 1);
      std::erase_if(env, [&](const std::string& e) { return e.rfind(key, 0) == 0; });
      env.push_back(m);
    }
    return env;
  }
  octet::test::CommandResult Octet(std::vector<std::string> args,
                                   std::vector<std::string> env = {}) {
    args.insert(args.begin(), "octet");
    return RunProgram(args, 120'000, Env(std::move(env)));
  }
  std::string Snapshot() {
    return cache_ + "/models--acme--tiny/snapshots/" + LoopbackHub::kCommit;
  }
  void ExpectComplete() {
    for (const auto& f : files_) {
      const std::string p = Snapshot() + "/" + f.path;
      QVERIFY2(fs::is_symlink(p), p.c_str());
      QVERIFY2(*octet::ReadFileToString(p) == f.bytes, p.c_str());
      const std::string target = fs::read_symlink(p).string();
      QVERIFY2(target.rfind("../../", 0) == 0 && target.find("/blobs/") != std::string::npos,
               target.c_str());
      QVERIFY2(fs::equivalent(
                   fs::path(p).parent_path() / target,
                   fs::path(cache_) / "models--acme--tiny/blobs" / fs::path(target).filename()),
               target.c_str());
    }
    QCOMPARE(
        QString::fromStdString(*octet::ReadFileToString(cache_ + "/models--acme--tiny/refs/main")),
        QString(LoopbackHub::kCommit));
    for (const auto& e : fs::directory_iterator(cache_ + "/models--acme--tiny/blobs")) {
      QVERIFY2(e.path().extension() != ".incomplete", e.path().c_str());
    }
  }

 private slots:
  void initTestCase() {
    QVERIFY(tmp_.isValid());
    const std::string model = tmp_.path().toStdString() + "/model";
    QVERIFY(octet::engine::WriteRandomCheckpoint(octet::engine::RandomModelShape{}, model).ok());
    files_ = ReadDir(model);
    files_.push_back({"extra/big.bin", Random(4 << 20, 7), true});
    files_.push_back({"README.md", "# tiny\n", false});
    octet::engine::RandomModelShape moe;
    moe.architecture = "Qwen3MoeForCausalLM";
    moe.num_experts = 8;
    moe.experts_per_token = 2;
    moe.moe_intermediate_size = 32;
    moe.tie_word_embeddings = false;
    moe.nvfp4_experts = true;
    const std::string moe_dir = tmp_.path().toStdString() + "/moe";
    QVERIFY(octet::engine::WriteRandomCheckpoint(moe, moe_dir).ok());
    moe_ = ReadDir(moe_dir);
    hub_ = std::make_unique<LoopbackHub>();
    hub_->AddRepo("acme/tiny", files_);
    hub_->AddRepo("acme/moe", moe_);
    hub_->AddRepo("acme/gated", {{"config.json", "{}", false}}, /*gated=*/true);
  }
  void init() {
    cache_ = tmp_.path().toStdString() + "/cache" + std::to_string(++run_);
    hub_->ResetCounters();
  }

  void fullPullLandsInTheCacheLayout() {
    auto r = Octet({"pull", "acme/tiny", "--json"});
    QVERIFY2(r.exit_code == 0, r.output.c_str());
    ExpectComplete();
    // The LFS file is stored under its sha256, the others under their git blob id.
    const std::string big = fs::read_symlink(Snapshot() + "/extra/big.bin").string();
    QCOMPARE(QString::fromStdString(big),
             QString::fromStdString("../../../blobs/" + Sha256(files_[files_.size() - 2].bytes)));
    for (const auto& f : files_) QCOMPARE(hub_->Requests(f.path), 1);
    // Piped stderr: no escape codes.
    QVERIFY(r.output.find('\033') == std::string::npos);

    // A second pull finds everything verified in the cache and downloads nothing.
    hub_->ResetCounters();
    r = Octet({"pull", "acme/tiny"});
    QVERIFY2(r.exit_code == 0, r.output.c_str());
    for (const auto& f : files_) QCOMPARE(hub_->Requests(f.path), 0);

    // The repo id is a model folder for generate.
    r = Octet({"generate", "--model", "acme/tiny", "--prompt-ids", "1,2,3", "--max-tokens", "2",
               "--temperature", "0", "--json"});
    QVERIFY2(r.exit_code == 0, r.output.c_str());
    QVERIFY2(r.output.find("\"ids\"") != std::string::npos, r.output.c_str());
  }

  void includeGlobsSelectFiles() {
    auto r = Octet({"pull", "acme/tiny", "--include", "*.json", "--include=README.md"});
    QVERIFY2(r.exit_code == 0, r.output.c_str());
    QVERIFY(fs::exists(Snapshot() + "/config.json"));
    QVERIFY(fs::exists(Snapshot() + "/README.md"));
    QVERIFY(!fs::exists(Snapshot() + "/extra/big.bin"));
    QCOMPARE(hub_->Requests("extra/big.bin"), 0);
  }

  void droppedConnectionResumesWithRange() {
    // In one run: the connection drops after 1 MiB, the retry asks for the rest.
    hub_->DropOnce("extra/big.bin", 1 << 20);
    auto r = Octet({"pull", "acme/tiny"});
    QVERIFY2(r.exit_code == 0, r.output.c_str());
    ExpectComplete();
    QCOMPARE(hub_->Requests("extra/big.bin"), 2);
    QCOMPARE(hub_->Ranges("extra/big.bin").back(), std::string("bytes=1048576-"));
    QCOMPARE(hub_->BytesSent("extra/big.bin"), int64_t(4 << 20));  // nothing sent twice
  }

  void interruptedPullResumesOnRerun() {
    hub_->DropOnce("extra/big.bin", 3 << 20);
    auto r = Octet({"pull", "acme/tiny", "--attempts", "1"});
    QVERIFY2(r.exit_code == 1, r.output.c_str());
    QVERIFY2(r.output.find("rerun resumes") != std::string::npos, r.output.c_str());
    QVERIFY(fs::exists(Snapshot() + "/config.json"));     // finished files are kept
    QVERIFY(!fs::exists(Snapshot() + "/extra/big.bin"));  // the partial one is not served
    // Not resolvable as complete yet: refs/main is written last.
    QVERIFY(!fs::exists(cache_ + "/models--acme--tiny/refs/main"));

    hub_->ResetCounters();
    r = Octet({"pull", "acme/tiny"});
    QVERIFY2(r.exit_code == 0, r.output.c_str());
    ExpectComplete();
    QCOMPARE(hub_->Requests("config.json"), 0);  // finished files not fetched again
    QCOMPARE(hub_->Requests("model.safetensors"), 0);
    QCOMPARE(hub_->Ranges("extra/big.bin").front(), std::string("bytes=3145728-"));
    QCOMPARE(hub_->BytesSent("extra/big.bin"), int64_t(1 << 20));
  }

  void corruptBytesAreRefusedAndFetchedAgain() {
    hub_->CorruptOnce("extra/big.bin");
    hub_->CorruptOnce("config.json");  // not LFS: checked by its git blob id
    auto r = Octet({"pull", "acme/tiny"});
    QVERIFY2(r.exit_code == 0, r.output.c_str());
    QVERIFY2(r.output.find("does not match") != std::string::npos, r.output.c_str());
    ExpectComplete();
    QCOMPARE(hub_->Requests("extra/big.bin"), 2);
    QCOMPARE(hub_->Requests("config.json"), 2);

    // A blob corrupted on disk is detected by the next pull and replaced.
    const std::string blob = fs::canonical(Snapshot() + "/extra/big.bin").string();
    {
      std::string bytes = *octet::ReadFileToString(blob);
      bytes[10] ^= 1;
      fs::permissions(blob, fs::perms::owner_write, fs::perm_options::add);
      QVERIFY(octet::WriteFileAtomic(blob, bytes).ok());
    }
    hub_->ResetCounters();
    r = Octet({"pull", "acme/tiny"});
    QVERIFY2(r.exit_code == 0, r.output.c_str());
    QVERIFY2(r.output.find("corrupt") != std::string::npos, r.output.c_str());
    QCOMPARE(hub_->Requests("extra/big.bin"), 1);
    ExpectComplete();
  }

  void gatedRepoExplainsTheToken() {
    auto r = Octet({"pull", "acme/gated"});
    QCOMPARE(r.exit_code, 1);
    for (const char* s : {"acme/gated", "401", "licence", "HF_TOKEN", "/acme/gated"}) {
      QVERIFY2(r.output.find(s) != std::string::npos,
               (std::string(s) + " in: " + r.output).c_str());
    }
    r = Octet({"pull", "acme/gated"}, {"HF_TOKEN=wrong"});
    QCOMPARE(r.exit_code, 1);
    QVERIFY2(r.output.find("token from HF_TOKEN was refused") != std::string::npos,
             r.output.c_str());
    // The token file under $HF_HOME works like HF_TOKEN.
    QVERIFY(octet::MakeDirs(tmp_.path().toStdString() + "/hf-home").ok());
    QVERIFY(octet::WriteFileAtomic(tmp_.path().toStdString() + "/hf-home/token",
                                   std::string(LoopbackHub::kToken) + "\n")
                .ok());
    r = Octet({"pull", "acme/gated"});
    fs::remove(tmp_.path().toStdString() + "/hf-home/token");
    QVERIFY2(r.exit_code == 0, r.output.c_str());
  }

  void offlineResolvesFromTheCacheOnly() {
    auto r = Octet({"pull", "acme/tiny"}, {"HF_HUB_OFFLINE=1"});
    QCOMPARE(r.exit_code, 1);
    QVERIFY2(r.output.find("not pulled yet") != std::string::npos, r.output.c_str());
    QCOMPARE(hub_->Requests("config.json"), 0);
    QVERIFY(Octet({"pull", "acme/tiny"}).exit_code == 0);
    hub_->ResetCounters();
    // Offline with an endpoint that would refuse: nothing is asked.
    r = Octet({"pull", "acme/tiny", "--json"},
              {"HF_HUB_OFFLINE=1", "HF_ENDPOINT=http://127.0.0.1:1"});
    QVERIFY2(r.exit_code == 0, r.output.c_str());
    const auto j = nlohmann::json::parse(
        r.output.substr(r.output.find('{'), r.output.rfind('}') - r.output.find('{') + 1));
    QCOMPARE(j["offline"].get<bool>(), true);
    QCOMPARE(j["files"].size(), files_.size());
  }

  void modelsListsAndRemoves() {
    QVERIFY(Octet({"pull", "acme/tiny"}).exit_code == 0);
    auto r = Octet({"models", "--json"});
    QVERIFY2(r.exit_code == 0, r.output.c_str());
    const auto j = nlohmann::json::parse(r.output);
    QCOMPARE(j["models"].size(), size_t(1));
    const auto& m = j["models"][0];
    QCOMPARE(m["repo"].get<std::string>(), std::string("acme/tiny"));
    QCOMPARE(m["commit"].get<std::string>(), std::string(LoopbackHub::kCommit));
    QCOMPARE(m["refs"][0].get<std::string>(), std::string("main"));
    int64_t total = 0;
    for (const auto& f : files_) total += static_cast<int64_t>(f.bytes.size());
    QCOMPARE(m["bytes"].get<int64_t>(), total);
    QCOMPARE(m["files"].get<int>(), static_cast<int>(files_.size()));

    r = Octet({"models"});
    QVERIFY2(r.output.find("acme/tiny") != std::string::npos, r.output.c_str());

    r = Octet({"models", "rm", "acme/tiny"});
    QVERIFY2(r.exit_code == 0, r.output.c_str());
    QVERIFY(!fs::exists(cache_ + "/models--acme--tiny"));
    r = Octet({"models", "rm", "acme/tiny"});
    QCOMPARE(r.exit_code, 1);

    // Not pulled: generate says so and how to pull it.
    r = Octet({"generate", "--model", "acme/tiny", "--prompt-ids", "1", "--max-tokens", "1"});
    QCOMPARE(r.exit_code, 1);
    QVERIFY2(r.output.find("not pulled yet") != std::string::npos, r.output.c_str());
    QVERIFY2(r.output.find("octet pull acme/tiny") != std::string::npos, r.output.c_str());
  }

  // `octet plan REPO` for a repo that is not pulled: the file list and
  // config.json (+ hf_quant_config.json) only, no weights; the weights count
  // as the safetensors files' sizes. Checked against the plan of the same
  // model pulled (exact bytes from the safetensors headers).
  void planFromTheHubFetchesNoWeights() {
    for (const auto& [repo, files] :
         {std::pair{std::string("acme/tiny"), files_}, std::pair{std::string("acme/moe"), moe_}}) {
      hub_->ResetCounters();
      auto r = Octet({"plan", repo, "--nodes", "2", "--node-memory", "1GiB", "--json"});
      QVERIFY2(r.exit_code == 0, r.output.c_str());
      const auto j = nlohmann::json::parse(
          r.output.substr(r.output.find('{'), r.output.rfind('}') - r.output.find('{') + 1));
      QCOMPARE(j["planned_from"].get<std::string>(), std::string("hub"));
      QCOMPARE(j["hub"]["commit"].get<std::string>(), std::string(LoopbackHub::kCommit));
      int64_t safetensors = 0;
      bool quantized = false;
      for (const auto& f : files) {
        const bool small = f.path == "config.json" || f.path == "hf_quant_config.json";
        quantized = quantized || f.path == "hf_quant_config.json";
        QVERIFY2(hub_->Requests(f.path) == (small ? 1 : 0), (repo + " " + f.path).c_str());
        if (f.path.ends_with(".safetensors")) safetensors += static_cast<int64_t>(f.bytes.size());
      }
      QCOMPARE(quantized, repo == "acme/moe");
      QCOMPARE(j["weight_bytes"].get<int64_t>(), safetensors);
      QVERIFY(!fs::exists(cache_ + "/" + octet::app::hub::RepoFolderName(repo)));

      // The same model pulled: planned from its folder.
      QVERIFY(Octet({"pull", repo, "--quiet"}).exit_code == 0);
      r = Octet({"plan", "--model", repo, "--nodes", "2", "--node-memory", "1GiB", "--json"});
      QVERIFY2(r.exit_code == 0, r.output.c_str());
      const auto k = nlohmann::json::parse(
          r.output.substr(r.output.find('{'), r.output.rfind('}') - r.output.find('{') + 1));
      QCOMPARE(k["planned_from"].get<std::string>(), std::string("folder"));
      const double exact = double(k["weight_bytes"].get<int64_t>());
      const double from_config = double(j["hub"]["config_weight_bytes"].get<int64_t>());
      QVERIFY2(
          std::fabs(from_config - exact) <= 0.03 * exact,
          (repo + ": config " + std::to_string(from_config) + " vs folder " + std::to_string(exact))
              .c_str());
      QCOMPARE(j["fits"].get<bool>(), k["fits"].get<bool>());
      QCOMPARE(j["model"]["num_experts"].get<int64_t>(), k["model"]["num_experts"].get<int64_t>());
    }
    // Not a model repo: said so, nothing fetched.
    auto r = Octet({"plan", "acme/gated"}, {std::string("HF_TOKEN=") + LoopbackHub::kToken});
    QCOMPARE(r.exit_code, 1);
    QVERIFY2(r.output.find("safetensors") != std::string::npos, r.output.c_str());
  }

  // `octet pull --cluster` on a 3-node local cluster: the first node
  // downloads from the Hub (each file asked for once), the other two copy
  // from it through the agents; a copy corrupted on one node is found by the
  // next pull and copied again, the Hub not asked. The agents hand out only
  // files inside their model roots, and only to callers with the token.
  void clusterPullDownloadsOnceAndCopiesToPeers() {
    const std::string config = tmp_.path().toStdString() + "/config" + std::to_string(run_);
    octet::app::LocalClusterOptions lo;
    lo.nodes = 3;
    lo.memory_per_node_bytes = 1ull << 30;
    lo.name = "pulltest";
    lo.state_dir = octet::app::ProfileDir(lo.name, config);
    lo.agent_binary = octet::test::BinDir() + "/octet-agent";
    lo.model_roots = {tmp_.path().toStdString() + "/roots"};
    QVERIFY(octet::MakeDirs(lo.model_roots[0]).ok());
    auto cluster = octet::app::LocalCluster::Start(lo, octet::Deadline::AfterMs(30'000));
    QVERIFY2(cluster.ok(), cluster.status().ToString().c_str());
    QVERIFY(octet::app::SaveProfile((*cluster)->profile()).ok());
    auto node_file = [&](int node, const std::string& path) {
      return lo.state_dir + "/node-" + std::to_string(node) + "/hub/models--acme--tiny/snapshots/" +
             LoopbackHub::kCommit + "/" + path;
    };
    int64_t total = 0;
    for (const auto& f : files_) total += static_cast<int64_t>(f.bytes.size());
    auto pull = [&] {
      auto r = Octet({"pull", "acme/tiny", "--cluster", "pulltest", "--config-dir", config,
                      "--json", "--quiet"});
      if (r.exit_code != 0) return std::make_pair(r, nlohmann::json());
      return std::make_pair(
          r, nlohmann::json::parse(r.output.substr(r.output.find('{'),
                                                   r.output.rfind('}') - r.output.find('{') + 1)));
    };

    auto [r, j] = pull();
    QVERIFY2(r.exit_code == 0, r.output.c_str());
    for (const auto& f : files_) QCOMPARE(hub_->Requests(f.path), 1);  // once, by node 0
    QCOMPARE(j["nodes"].size(), size_t(3));
    for (int i = 0; i < 3; ++i) {
      const auto& n = j["nodes"][i];
      QVERIFY2(n["ok"].get<bool>(), n.dump().c_str());
      QCOMPARE(n["commit"].get<std::string>(), std::string(LoopbackHub::kCommit));
      QCOMPARE(n["source"].get<std::string>(), std::string(i == 0 ? "hub" : "peer pulltest-0"));
      QCOMPARE(n["network_bytes"].get<int64_t>(), total);
      for (const auto& f : files_) {
        QVERIFY2(*octet::ReadFileToString(node_file(i, f.path)) == f.bytes,
                 node_file(i, f.path).c_str());
        QVERIFY(fs::is_symlink(node_file(i, f.path)));  // the hub cache layout
      }
    }

    // Planning for the cluster: its node count and memory, from the agents.
    auto pl =
        Octet({"plan", "acme/tiny", "--cluster", "pulltest", "--config-dir", config, "--json"});
    QVERIFY2(pl.exit_code == 0, pl.output.c_str());
    const auto pj = nlohmann::json::parse(
        pl.output.substr(pl.output.find('{'), pl.output.rfind('}') - pl.output.find('{') + 1));
    QCOMPARE(pj["nodes"].get<int>(), 3);
    QCOMPARE(pj["node_memory_bytes"].get<int64_t>(), int64_t(1) << 30);

    // Which node holds what.
    auto m = Octet({"models", "--cluster", "pulltest", "--config-dir", config, "--json"});
    QVERIFY2(m.exit_code == 0, m.output.c_str());
    const auto mj = nlohmann::json::parse(m.output);
    QCOMPARE(mj["nodes"].size(), size_t(3));
    for (const auto& n : mj["nodes"]) {
      QCOMPARE(n["models"].size(), size_t(1));
      QCOMPARE(n["models"][0]["repo"].get<std::string>(), std::string("acme/tiny"));
      QCOMPARE(n["models"][0]["commit"].get<std::string>(), std::string(LoopbackHub::kCommit));
      QCOMPARE(n["models"][0]["bytes"].get<int64_t>(), total);
    }

    // Each node's store is one of its agent's model roots: the snapshot is a
    // model path its launches accept.
    for (size_t i = 0; i < 3; ++i) {
      auto ep = octet::app::EndpointFor((*cluster)->profile(), i);
      QVERIFY(ep.ok());
      auto client = octet::app::AgentClient::Create(*ep);
      QVERIFY(client.ok());
      auto facts = (*client)->GetFacts(octet::Deadline::AfterMs(10'000));
      QVERIFY(facts.ok());
      const std::string store = lo.state_dir + "/node-" + std::to_string(i) + "/hub";
      QVERIFY2(std::find(facts->model_roots.begin(), facts->model_roots.end(), store) !=
                   facts->model_roots.end(),
               store.c_str());
    }

    // A copy interrupted on node 1 (its blob gone, the first MiB left as
    // .incomplete): the next pull copies only the rest, from that offset.
    {
      const std::string blob = fs::canonical(node_file(1, "extra/big.bin")).string();
      const std::string bytes = *octet::ReadFileToString(blob);
      fs::remove(blob);
      QVERIFY(octet::WriteFileAtomic(blob + ".incomplete", bytes.substr(0, 1 << 20)).ok());
    }
    hub_->ResetCounters();
    std::tie(r, j) = pull();
    QVERIFY2(r.exit_code == 0, r.output.c_str());
    for (const auto& f : files_) QCOMPARE(hub_->Requests(f.path), 0);
    QCOMPARE(j["nodes"][1]["files_downloaded"].get<int>(), 1);
    QCOMPARE(j["nodes"][1]["network_bytes"].get<int64_t>(), int64_t(3 << 20));
    QVERIFY(*octet::ReadFileToString(node_file(1, "extra/big.bin")) ==
            files_[files_.size() - 2].bytes);

    // A copy corrupted on node 2: the next pull re-hashes, refuses it and
    // copies it again from node 0; nothing comes from the Hub.
    const std::string big = fs::canonical(node_file(2, "extra/big.bin")).string();
    {
      std::string bytes = *octet::ReadFileToString(big);
      bytes[bytes.size() / 3] ^= 1;
      fs::permissions(big, fs::perms::owner_write, fs::perm_options::add);
      QVERIFY(octet::WriteFileAtomic(big, bytes).ok());
    }
    hub_->ResetCounters();
    std::tie(r, j) = pull();
    QVERIFY2(r.exit_code == 0, r.output.c_str());
    for (const auto& f : files_) QCOMPARE(hub_->Requests(f.path), 0);
    QCOMPARE(j["nodes"][0]["files_downloaded"].get<int>(), 0);
    QCOMPARE(j["nodes"][1]["files_downloaded"].get<int>(), 0);
    QCOMPARE(j["nodes"][2]["files_downloaded"].get<int>(), 1);
    QCOMPARE(j["nodes"][2]["network_bytes"].get<int64_t>(), int64_t(4 << 20));
    QVERIFY(*octet::ReadFileToString(node_file(2, "extra/big.bin")) ==
            files_[files_.size() - 2].bytes);

    // The peer copy's file API: the token, and the model roots.
    auto token = octet::ReadFileToString((*cluster)->profile().token_file());
    QVERIFY(token.ok());
    while (!token->empty() && std::isspace(static_cast<unsigned char>(token->back()))) {
      token->pop_back();
    }
    const std::string blob0 = fs::canonical(node_file(0, "config.json")).string();
    auto sink = [](const char*, size_t) { return octet::Status::Ok(); };
    auto wrong = octet::app::AgentClient::Create({(*cluster)->address(0), "not-the-token"});
    QVERIFY(wrong.ok());
    QCOMPARE((*wrong)->ReadFile(blob0, 0, sink, octet::Deadline::AfterMs(10'000)).code(),
             octet::StatusCode::kUnauthenticated);
    auto right = octet::app::AgentClient::Create({(*cluster)->address(0), *token});
    QVERIFY(right.ok());
    std::string got;
    QVERIFY((*right)
                ->ReadFile(
                    blob0, 0,
                    [&](const char* d, size_t n) {
                      got.append(d, n);
                      return octet::Status::Ok();
                    },
                    octet::Deadline::AfterMs(10'000))
                .ok());
    for (const auto& f : files_) {
      if (f.path == "config.json") QVERIFY(got == f.bytes);
    }
    for (const std::string& outside : {tmp_.path().toStdString() + "/model/config.json",
                                       std::string("/etc/passwd"), lo.state_dir + "/token"}) {
      QCOMPARE((*right)->ReadFile(outside, 0, sink, octet::Deadline::AfterMs(10'000)).code(),
               octet::StatusCode::kPermissionDenied);
    }
  }

  // The same copy between two agents that speak only TLS (a profile made by
  // `octet cluster init --tls`, each agent with the certificate it issued):
  // the first node downloads from the Hub, the second copies from it over the
  // TLS channel, checking the peer's certificate against the cluster CA under
  // the peer's node name, and gets the same bytes.
  void clusterPullCopiesOverTls() {
    const std::string root = tmp_.path().toStdString() + "/tls";
    const std::string config = root + "/config";
    octet::app::ClusterInitOptions init;
    init.name = "tlspull";
    init.config_dir = config;
    init.tls = true;
    init.nodes = {{"a", "127.0.0.1:1"}, {"b", "127.0.0.1:1"}};  // ports once the agents listen
    auto profile = octet::app::InitCluster(init);
    QVERIFY2(profile.ok(), profile.status().ToString().c_str());
    const std::string roots = root + "/roots";
    QVERIFY(octet::MakeDirs(roots).ok());
    auto token = octet::ReadFileToString(profile->token_file());
    QVERIFY(token.ok());
    std::vector<octet::test::CapturedProcess> agents(2);
    for (size_t i = 0; i < 2; ++i) {
      const std::string name = profile->nodes[i].name;
      const std::string dir = root + "/node-" + name;
      QVERIFY(octet::MakeDirs(dir).ok());
      QVERIFY(octet::WriteFileAtomic(dir + "/token", *token, 0600).ok());
      QVERIFY(octet::WriteFileAtomic(dir + "/machine-id", "tls-pull-" + name + "\n").ok());
      QVERIFY(agents[i]
                  .Start(octet::test::AgentArgv(
                      octet::test::BinDir(), dir, "127.0.0.1:0",
                      {"--tls-cert", profile->node_cert_file(name), "--tls-key",
                       profile->node_key_file(name), "--model-roots", roots, "--models-dir",
                       dir + "/hub", "--memory-budget", "1G"}))
                  .ok());
      const std::string address = octet::test::WaitForAgentAddress(dir + "/address", 20'000);
      QVERIFY2(!address.empty(), agents[i].output().c_str());
      profile->nodes[i].address = address;
    }
    QVERIFY(octet::app::SaveProfile(*profile).ok());

    auto r = Octet(
        {"pull", "acme/tiny", "--cluster", "tlspull", "--config-dir", config, "--json", "--quiet"});
    QVERIFY2(r.exit_code == 0, (r.output + agents[0].output() + agents[1].output()).c_str());
    const auto j = nlohmann::json::parse(
        r.output.substr(r.output.find('{'), r.output.rfind('}') - r.output.find('{') + 1));
    for (const auto& f : files_) QCOMPARE(hub_->Requests(f.path), 1);  // once, by node a
    QCOMPARE(j["nodes"].size(), size_t(2));
    QVERIFY2(j["nodes"][1]["ok"].get<bool>(), j.dump().c_str());
    QCOMPARE(j["nodes"][0]["source"].get<std::string>(), std::string("hub"));
    QCOMPARE(j["nodes"][1]["source"].get<std::string>(), std::string("peer a"));
    for (const auto& f : files_) {
      const std::string copy =
          root + "/node-b/hub/models--acme--tiny/snapshots/" + LoopbackHub::kCommit + "/" + f.path;
      QVERIFY2(*octet::ReadFileToString(copy) == f.bytes, copy.c_str());
    }
  }

  void repoRefsParse() {
    using octet::app::hub::ParseRepoRef;
    auto r = ParseRepoRef("Qwen/Qwen3-0.6B@v1.0");
    QVERIFY(r.ok());
    QCOMPARE(r->repo, std::string("Qwen/Qwen3-0.6B"));
    QCOMPARE(r->revision, std::string("v1.0"));
    QCOMPARE(ParseRepoRef("a/b")->revision, std::string("main"));
    for (const char* bad : {"./a/b", "/a/b", "a", "a/b/c", "../b", "a/..", "a/b@", "a/b@../x"}) {
      QVERIFY2(!ParseRepoRef(bad).ok(), bad);
    }
    QCOMPARE(octet::app::hub::RepoFolderName("Qwen/Qwen3-0.6B"),
             std::string("models--Qwen--Qwen3-0.6B"));
  }
};

QTEST_GUILESS_MAIN(TestHubPull)
#include "test_hub_pull.moc"
