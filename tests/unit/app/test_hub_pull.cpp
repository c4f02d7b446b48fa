// `octet pull` / `octet models` against a Hub on loopback: a small HTTP server
// in the Hub's URL layout (model info API with blobs, `resolve` answering 302
// to a blob URL, Range, a gated repo answering 401 without the right token)
// serving a checkpoint the test writes itself (WriteRandomCheckpoint) plus a
// 4 MiB LFS file. The server counts requests and bytes per file, and can drop
// the connection or send corrupt bytes once, so resume and verification are
// checked by what crossed the wire, not by what the client says.
#include <httplib.h>

#include <QTemporaryDir>
#include <QtTest>
#include <filesystem>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <thread>

#include "octet/app/hub.h"
#include "octet/base/file_util.h"
#include "octet/engine/random_checkpoint.h"
#include "octet_test.h"

using octet::test::RunProgram;
namespace fs = std::filesystem;

namespace {

// Reference digests from Qt, independent of the code under test.
std::string Sha256(const std::string& data) {
  return QCryptographicHash::hash(QByteArray(data.data(), qsizetype(data.size())),
                                  QCryptographicHash::Sha256)
      .toHex()
      .toStdString();
}
std::string GitBlobId(const std::string& data) {
  const std::string all = "blob " + std::to_string(data.size()) + std::string(1, '\0') + data;
  return QCryptographicHash::hash(QByteArray(all.data(), qsizetype(all.size())),
                                  QCryptographicHash::Sha1)
      .toHex()
      .toStdString();
}

struct RepoFile {
  std::string path;
  std::string bytes;
  bool lfs = false;
};

// A Hub on 127.0.0.1: /api/models/{repo}/revision/{rev}, /{repo}/resolve/...
// -> 302 /cdn/{repo}/{path}, which honours Range. State guarded by mu.
class FakeHub {
 public:
  static constexpr const char* kCommit = "0123456789abcdef0123456789abcdef01234567";
  static constexpr const char* kToken = "hf_good_token";

  FakeHub() {
    srv_.Get(R"(/api/models/([^/]+)/([^/]+)/revision/([^/?]+))",
             [this](const httplib::Request& req, httplib::Response& res) { Info(req, res); });
    srv_.Get(R"(/([^/]+)/([^/]+)/resolve/([^/]+)/(.+))",
             [this](const httplib::Request& req, httplib::Response& res) {
               const std::string repo = req.matches[1].str() + "/" + req.matches[2].str();
               if (!Allowed(repo, req, res)) return;
               res.status = 302;
               res.set_header("Location", "/cdn/" + repo + "/" + req.matches[4].str());
             });
    srv_.Get(R"(/cdn/([^/]+)/([^/]+)/(.+))",
             [this](const httplib::Request& req, httplib::Response& res) { Blob(req, res); });
    port_ = srv_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { srv_.listen_after_bind(); });
  }
  ~FakeHub() {
    srv_.stop();
    thread_.join();
  }

  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }

  void AddRepo(const std::string& repo, std::vector<RepoFile> files, bool gated = false) {
    std::lock_guard<std::mutex> lock(mu_);
    repos_[repo] = std::move(files);
    if (gated) gated_.insert(repo);
  }
  // The next blob response for path sends `after` bytes, then drops the connection.
  void DropOnce(const std::string& path, size_t after) {
    std::lock_guard<std::mutex> lock(mu_);
    drop_[path] = after;
  }
  void CorruptOnce(const std::string& path) {
    std::lock_guard<std::mutex> lock(mu_);
    corrupt_.insert(path);
  }
  int Requests(const std::string& path) {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_[path];
  }
  int64_t BytesSent(const std::string& path) {
    std::lock_guard<std::mutex> lock(mu_);
    return bytes_[path];
  }
  std::vector<std::string> Ranges(const std::string& path) {
    std::lock_guard<std::mutex> lock(mu_);
    return ranges_[path];
  }
  void ResetCounters() {
    std::lock_guard<std::mutex> lock(mu_);
    requests_.clear();
    bytes_.clear();
    ranges_.clear();
  }

 private:
  bool Allowed(const std::string& repo, const httplib::Request& req, httplib::Response& res) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!repos_.count(repo)) {
      res.status = 404;
      res.set_header("X-Error-Message", "Repository not found");
      return false;
    }
    if (gated_.count(repo) &&
        req.get_header_value("Authorization") != std::string("Bearer ") + kToken) {
      res.status = 401;
      res.set_header("X-Error-Message", "Access to model " + repo + " is restricted.");
      return false;
    }
    return true;
  }
  void Info(const httplib::Request& req, httplib::Response& res) {
    const std::string repo = req.matches[1].str() + "/" + req.matches[2].str();
    if (!Allowed(repo, req, res)) return;
    std::lock_guard<std::mutex> lock(mu_);
    nlohmann::json j = {{"id", repo}, {"sha", kCommit}, {"siblings", nlohmann::json::array()}};
    for (const auto& f : repos_[repo]) {
      const std::string oid = GitBlobId(f.bytes);
      nlohmann::json s = {{"rfilename", f.path}, {"size", f.bytes.size()}, {"blobId", oid}};
      if (f.lfs) {
        s["lfs"] = {{"sha256", Sha256(f.bytes)}, {"size", f.bytes.size()}, {"pointerSize", 134}};
      }
      j["siblings"].push_back(s);
    }
    res.set_content(j.dump(), "application/json");
  }
  void Blob(const httplib::Request& req, httplib::Response& res) {
    const std::string repo = req.matches[1].str() + "/" + req.matches[2].str();
    const std::string path = req.matches[3].str();
    std::lock_guard<std::mutex> lock(mu_);
    const RepoFile* file = nullptr;
    for (const auto& f : repos_[repo]) {
      if (f.path == path) file = &f;
    }
    if (!file) {
      res.status = 404;
      return;
    }
    ++requests_[path];
    ranges_[path].push_back(req.get_header_value("Range"));
    std::string bytes = file->bytes;
    if (corrupt_.erase(path)) bytes[bytes.size() / 2] ^= 0x5a;
    size_t drop_after = std::string::npos;
    if (auto it = drop_.find(path); it != drop_.end()) {
      drop_after = it->second;
      drop_.erase(it);
    }
    // httplib applies the request's Range to what the provider offers.
    res.set_content_provider(bytes.size(), "application/octet-stream",
                             [this, bytes, path, drop_after, sent = size_t(0)](
                                 size_t off, size_t len, httplib::DataSink& sink) mutable {
                               const size_t n = std::min<size_t>(len, 64 * 1024);
                               const size_t allowed = drop_after == std::string::npos ? n
                                                      : sent >= drop_after
                                                          ? 0
                                                          : std::min(n, drop_after - sent);
                               if (allowed == 0) return false;  // drop the connection mid-file
                               sink.write(bytes.data() + off, allowed);
                               sent += allowed;
                               std::lock_guard<std::mutex> lock(mu_);
                               bytes_[path] += static_cast<int64_t>(allowed);
                               return true;
                             });
  }

  httplib::Server srv_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::map<std::string, std::vector<RepoFile>> repos_;  // guarded by mu_
  std::set<std::string> gated_, corrupt_;
  std::map<std::string, size_t> drop_;
  std::map<std::string, int> requests_;
  std::map<std::string, int64_t> bytes_;
  std::map<std::string, std::vector<std::string>> ranges_;
};

std::string Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (auto& ch : s) ch = static_cast<char>(rng());
  return s;
}

std::vector<RepoFile> ReadDir(const std::string& dir) {
  std::vector<RepoFile> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    out.push_back({name, *octet::ReadFileToString(e.path().string()),
                   name.find(".safetensors") != std::string::npos});
  }
  return out;
}

}  // namespace

class TestHubPull : public QObject {
  Q_OBJECT

  QTemporaryDir tmp_;
  std::unique_ptr<FakeHub> hub_;
  std::vector<RepoFile> files_;  // acme/tiny
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
  std::string Snapshot() { return cache_ + "/models--acme--tiny/snapshots/" + FakeHub::kCommit; }
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
        QString(FakeHub::kCommit));
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
    hub_ = std::make_unique<FakeHub>();
    hub_->AddRepo("acme/tiny", files_);
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
                                   std::string(FakeHub::kToken) + "\n")
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
    QCOMPARE(m["commit"].get<std::string>(), std::string(FakeHub::kCommit));
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
