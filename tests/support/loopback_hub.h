// A Hugging Face Hub on loopback for tests: a small HTTP server in the Hub's
// URL layout (model info API with blobs, `resolve` answering 302 to a blob
// URL, Range, a gated repo answering 401 without the right token). It counts
// requests and bytes per file, and can drop the connection, send corrupt
// bytes once or serve slowly, so that what crossed the wire is checked, not
// what the client says. Digests come from Qt (independent of the code under
// test). Used by tests/unit/app/test_hub_pull and tests/ui/test_models_panel.
#pragma once

#include <httplib.h>

#include <QCryptographicHash>
#include <chrono>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "octet/base/file_util.h"
#include "octet/base/json.h"

namespace octet::test {

// Reference digests from Qt, independent of the code under test.
inline std::string Sha256(const std::string& data) {
  return QCryptographicHash::hash(QByteArray(data.data(), qsizetype(data.size())),
                                  QCryptographicHash::Sha256)
      .toHex()
      .toStdString();
}
inline std::string GitBlobId(const std::string& data) {
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
class LoopbackHub {
 public:
  static constexpr const char* kCommit = "0123456789abcdef0123456789abcdef01234567";
  static constexpr const char* kToken = "hf_good_token";

  LoopbackHub() {
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
  ~LoopbackHub() {
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
  // Each blob chunk (64 KiB) waits this long: a slow Hub, for cancelling mid-pull.
  void SetChunkDelayMs(int ms) {
    std::lock_guard<std::mutex> lock(mu_);
    delay_ms_ = ms;
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
    const int delay_ms = delay_ms_;
    res.set_content_provider(bytes.size(), "application/octet-stream",
                             [this, bytes, path, drop_after, delay_ms, sent = size_t(0)](
                                 size_t off, size_t len, httplib::DataSink& sink) mutable {
                               if (delay_ms > 0) {
                                 std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
                               }
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
  int delay_ms_ = 0;
};

inline std::string Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (auto& ch : s) ch = static_cast<char>(rng());
  return s;
}

inline std::vector<RepoFile> ReadDir(const std::string& dir) {
  std::vector<RepoFile> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    out.push_back({name, *octet::ReadFileToString(e.path().string()),
                   name.find(".safetensors") != std::string::npos});
  }
  return out;
}

}  // namespace octet::test
