// The Hugging Face cache on disk: repo ids, the environment, resolving a repo
// id to a snapshot folder, listing and removing models, file digests. No
// network here (hub_client.cpp downloads).
#include <openssl/evp.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>

#include "octet/app/hub.h"
#include "octet/base/file_util.h"

namespace octet::app::hub {
namespace fs = std::filesystem;

namespace {

bool IsNamePart(std::string_view s) {
  if (s.empty() || s.size() > 96 || s[0] == '.' || s[0] == '-') return false;
  for (char ch : s) {
    const bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                    (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == '-';
    if (!ok) return false;
  }
  return s.find("..") == std::string_view::npos;
}

bool IsRevision(std::string_view s) {
  if (s.empty() || s.size() > 255 || s[0] == '.' || s[0] == '/' || s[0] == '-') return false;
  if (s.find("..") != std::string_view::npos) return false;
  for (char ch : s) {
    if (ch <= ' ' || ch == '\\' || ch == '?' || ch == '#' || ch == '%') return false;
  }
  return true;
}

bool IsCommitHash(std::string_view s) {
  if (s.size() != 40) return false;
  for (char ch : s) {
    if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f'))) return false;
  }
  return true;
}

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  size_t i = 0;
  while (i < s.size() && s[i] == ' ') ++i;
  return s.substr(i);
}

std::string EnvOr(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

bool EnvTrue(const char* name) {
  std::string v = EnvOr(name, "");
  for (char& ch : v) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return v == "1" || v == "true" || v == "yes" || v == "on";
}

std::string ToHex(const unsigned char* d, unsigned n) {
  static const char* k = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (unsigned i = 0; i < n; ++i) {
    out[2 * i] = k[d[i] >> 4];
    out[2 * i + 1] = k[d[i] & 15];
  }
  return out;
}

Result<std::string> DigestFile(const std::string& path, const EVP_MD* md, std::string_view prefix) {
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return NotFoundError("cannot open " + path);
  EVP_DigestInit_ex(ctx.get(), md, nullptr);
  EVP_DigestUpdate(ctx.get(), prefix.data(), prefix.size());
  std::vector<char> buf(1 << 20);
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0)
    EVP_DigestUpdate(ctx.get(), buf.data(), n);
  const bool err = std::ferror(f);
  std::fclose(f);
  if (err) return DataLossError("read error in " + path);
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned len = 0;
  EVP_DigestFinal_ex(ctx.get(), out, &len);
  return ToHex(out, len);
}

}  // namespace

bool LooksLikeRepoRef(std::string_view text) { return ParseRepoRef(text).ok(); }

Result<RepoRef> ParseRepoRef(std::string_view text) {
  RepoRef r;
  std::string_view repo = text;
  if (size_t at = text.find('@'); at != std::string_view::npos) {
    repo = text.substr(0, at);
    r.revision = std::string(text.substr(at + 1));
    if (!IsRevision(r.revision)) {
      return InvalidArgumentError("'" + std::string(text) + "': bad revision after '@'");
    }
  }
  const size_t slash = repo.find('/');
  if (slash == std::string_view::npos || !IsNamePart(repo.substr(0, slash)) ||
      !IsNamePart(repo.substr(slash + 1))) {
    return InvalidArgumentError("'" + std::string(text) +
                                "' is not a Hub repo id (ORG/NAME or ORG/NAME@REVISION)");
  }
  r.repo = std::string(repo);
  return r;
}

HubConfig HubConfig::FromEnvironment() {
  HubConfig c;
  std::string endpoint = EnvOr("HF_ENDPOINT", c.endpoint);
  while (!endpoint.empty() && endpoint.back() == '/') endpoint.pop_back();
  c.endpoint = endpoint;
  const std::string home = EnvOr("HOME", "/tmp");
  const std::string hf_home =
      EnvOr("HF_HOME", JoinPath(EnvOr("XDG_CACHE_HOME", home + "/.cache"), "huggingface"));
  c.cache_dir = EnvOr("HF_HUB_CACHE", EnvOr("HUGGINGFACE_HUB_CACHE", JoinPath(hf_home, "hub")));
  c.offline = EnvTrue("HF_HUB_OFFLINE");
  if (std::string t = Trim(EnvOr("HF_TOKEN", EnvOr("HUGGING_FACE_HUB_TOKEN", ""))); !t.empty()) {
    c.token = t;
    c.token_source = "HF_TOKEN";
  } else {
    const std::string path = EnvOr("HF_TOKEN_PATH", JoinPath(hf_home, "token"));
    if (auto s = ReadFileToString(path); s.ok() && !Trim(*s).empty()) {
      c.token = Trim(*s);
      c.token_source = path;
    }
  }
  return c;
}

std::string RepoFolderName(std::string_view repo) {
  std::string out = "models--";
  for (char ch : repo) {
    if (ch == '/') {
      out += "--";
    } else {
      out += ch;
    }
  }
  return out;
}

std::string RepoCacheDir(const HubConfig& c, std::string_view repo) {
  return JoinPath(c.cache_dir, RepoFolderName(repo));
}

Result<std::string> ResolveSnapshot(const HubConfig& c, const RepoRef& ref) {
  const std::string dir = RepoCacheDir(c, ref.repo);
  auto not_pulled = [&](const std::string& why) {
    return NotFoundError(ref.ToString() + " is not pulled yet (" + why + "): run `octet pull " +
                         ref.ToString() + "`");
  };
  if (!IsDirectory(dir)) return not_pulled("no " + dir);
  std::string commit = ref.revision;
  if (!IsCommitHash(commit)) {
    auto s = ReadFileToString(JoinPath(JoinPath(dir, "refs"), ref.revision));
    if (!s.ok()) return not_pulled("no refs/" + ref.revision + " in " + dir);
    commit = Trim(*s);
  }
  const std::string snap = JoinPath(JoinPath(dir, "snapshots"), commit);
  if (!IsDirectory(snap)) return not_pulled("no snapshot " + commit + " in " + dir);
  return snap;
}

Result<std::vector<LocalModel>> ListLocalModels(const HubConfig& c) {
  std::vector<LocalModel> out;
  std::error_code ec;
  if (!fs::is_directory(c.cache_dir, ec)) return out;  // nothing pulled yet
  std::vector<fs::path> repos;
  for (const auto& e : fs::directory_iterator(c.cache_dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("models--", 0) == 0 && e.is_directory()) repos.push_back(e.path());
  }
  if (ec) return InternalError("cannot list " + c.cache_dir + ": " + ec.message());
  std::sort(repos.begin(), repos.end());
  for (const fs::path& rdir : repos) {
    std::string repo = rdir.filename().string().substr(8);
    if (size_t p = repo.find("--"); p != std::string::npos) repo.replace(p, 2, "/");
    // refs: commit -> names
    std::map<std::string, std::vector<std::string>> refs;
    if (fs::is_directory(rdir / "refs", ec)) {
      for (const auto& e : fs::recursive_directory_iterator(rdir / "refs", ec)) {
        if (!e.is_regular_file()) continue;
        auto s = ReadFileToString(e.path().string());
        if (s.ok()) refs[Trim(*s)].push_back(fs::relative(e.path(), rdir / "refs").string());
      }
    }
    int64_t repo_bytes = 0;
    int incomplete = 0;
    if (fs::is_directory(rdir / "blobs", ec)) {
      for (const auto& e : fs::directory_iterator(rdir / "blobs", ec)) {
        if (!e.is_regular_file()) continue;
        repo_bytes += static_cast<int64_t>(e.file_size(ec));
        if (e.path().extension() == ".incomplete") ++incomplete;
      }
    }
    bool any = false;
    if (fs::is_directory(rdir / "snapshots", ec)) {
      for (const auto& s : fs::directory_iterator(rdir / "snapshots", ec)) {
        if (!s.is_directory()) continue;
        any = true;
        LocalModel m;
        m.repo = repo;
        m.commit = s.path().filename().string();
        m.refs = refs[m.commit];
        m.snapshot_dir = s.path().string();
        m.repo_bytes = repo_bytes;
        m.incomplete_files = incomplete;
        for (const auto& f : fs::recursive_directory_iterator(s.path(), ec)) {
          if (f.is_directory()) continue;
          std::error_code fec;
          const auto st = fs::status(f.path(), fec);  // follows the link
          if (fec || !fs::is_regular_file(st)) {
            ++m.missing_files;
            continue;
          }
          ++m.files;
          m.bytes += static_cast<int64_t>(fs::file_size(f.path(), fec));
        }
        out.push_back(std::move(m));
      }
    }
    if (!any) {  // a pull that never finished a file: still worth showing (and removing)
      LocalModel m;
      m.repo = repo;
      m.repo_bytes = repo_bytes;
      m.incomplete_files = incomplete;
      out.push_back(std::move(m));
    }
  }
  return out;
}

Status RemoveLocalModel(const HubConfig& c, std::string_view repo) {
  if (!LooksLikeRepoRef(repo) || repo.find('@') != std::string_view::npos) {
    return InvalidArgumentError("'" + std::string(repo) + "' is not a repo id (ORG/NAME)");
  }
  const std::string dir = RepoCacheDir(c, repo);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return NotFoundError(std::string(repo) + " is not in the cache (no " + dir + ")");
  }
  fs::remove_all(dir, ec);
  if (ec) return InternalError("cannot remove " + dir + ": " + ec.message());
  return Status::Ok();
}

Result<std::string> FileSha256(const std::string& path) {
  return DigestFile(path, EVP_sha256(), {});
}

Result<std::string> FileGitBlobId(const std::string& path) {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec) return NotFoundError("cannot stat " + path + ": " + ec.message());
  const std::string prefix = "blob " + std::to_string(size) + std::string(1, '\0');
  return DigestFile(path, EVP_sha1(), prefix);
}

}  // namespace octet::app::hub
