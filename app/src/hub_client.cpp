// Downloading from the Hugging Face Hub (see hub.h for the conventions).
//
// Why cpp-httplib: Debian ships it (libcpp-httplib-dev, built with OpenSSL),
// the serving and router code already use it, and its streaming Get with a
// response handler and a content receiver is all a resumable download needs:
// we follow redirects ourselves (to drop the Authorization header when a
// redirect leaves the endpoint, as huggingface_hub does) and send Range.
#include <fcntl.h>
#include <fnmatch.h>
#include <httplib.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <thread>

#include "octet/app/hub.h"
#include "octet/base/build_info.h"
#include "octet/base/file_util.h"
#include "octet/base/http/client_error.h"
#include "octet/base/json.h"

namespace octet::app::hub {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kMaxRedirects = 10;
constexpr size_t kMaxInfoBytes = 64 << 20;

struct SplitUrl {
  std::string origin;  // "https://host:port"
  std::string path;    // "/a/b?c", never empty
};

Result<SplitUrl> Split(const std::string& url) {
  const size_t scheme = url.find("://");
  if (scheme == std::string::npos ||
      (url.compare(0, scheme, "http") != 0 && url.compare(0, scheme, "https") != 0)) {
    return InvalidArgumentError("not an http(s) URL: '" + url + "'");
  }
  const size_t slash = url.find('/', scheme + 3);
  if (slash == std::string::npos) return SplitUrl{url, "/"};
  return SplitUrl{url.substr(0, slash), url.substr(slash)};
}

std::string Encode(std::string_view s, bool keep_slash) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char ch : s) {
    const bool plain = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                       (ch >= '0' && ch <= '9') || ch == '-' || ch == '_' || ch == '.' ||
                       ch == '~' || (keep_slash && ch == '/');
    if (plain) {
      out += static_cast<char>(ch);
    } else {
      out += '%';
      out += hex[ch >> 4];
      out += hex[ch & 15];
    }
  }
  return out;
}

bool Retryable(const Status& s) {
  return s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kDeadlineExceeded ||
         s.code() == StatusCode::kDataLoss || s.code() == StatusCode::kOutOfRange;
}

// What a user does about an HTTP error from the Hub for `repo`.
Status HttpError(const HubConfig& c, const RepoRef& ref, int status, const std::string& what,
                 const std::string& hub_message) {
  const std::string page = c.endpoint + "/" + ref.repo;
  const std::string said = hub_message.empty() ? "" : " (the Hub says: " + hub_message + ")";
  if (status == 401 || status == 403) {
    std::string msg = ref.repo + ": " + std::to_string(status) +
                      (status == 401 ? " Unauthorized" : " Forbidden") + " for " + what + said +
                      ". The repo is gated or private";
    if (c.token.empty()) {
      msg += " and no token was sent: accept its licence at " + page +
             " while logged in, create a read token at " + c.endpoint +
             "/settings/tokens and set HF_TOKEN (or write it to $HF_HOME/token)";
    } else {
      msg += ": the token from " + c.token_source +
             " was refused or has no access; accept the "
             "licence at " +
             page +
             " with the account the token belongs to, or use another "
             "token (HF_TOKEN)";
    }
    return status == 401 ? UnauthenticatedError(msg) : PermissionDeniedError(msg);
  }
  if (status == 404) {
    return NotFoundError(ref.ToString() + ": " + what + " not found on " + c.endpoint + " (404)" +
                         said + "; check the repo id and the revision");
  }
  return UnavailableError(ref.ToString() + ": HTTP " + std::to_string(status) + " for " + what +
                          said);
}

struct Response {
  int status = 0;
  httplib::Headers headers;
  std::string body;  // non-2xx bodies (capped), and all bodies when no receiver is given
};

// GET `url`, following redirects. 2xx bodies go to `on_data` (or into
// Response::body when it is null); `on_head` sees a 2xx response's headers
// before its body. Either callback returning an error aborts the request with
// that error. The Authorization header goes only to the endpoint's origin.
Result<Response> HttpGet(const HubConfig& c, std::string url, const httplib::Headers& extra,
                         const std::function<Status(const Response&)>& on_head,
                         const std::function<Status(const char*, size_t)>& on_data,
                         const std::atomic<bool>* cancel) {
  OCTET_ASSIGN_OR_RETURN(SplitUrl endpoint, Split(c.endpoint));
  for (int hop = 0; hop <= kMaxRedirects; ++hop) {
    OCTET_ASSIGN_OR_RETURN(SplitUrl u, Split(url));
    httplib::Client cli(u.origin);
    cli.set_connection_timeout(std::chrono::milliseconds(c.connect_timeout_ms));
    cli.set_read_timeout(std::chrono::milliseconds(c.read_timeout_ms));
    cli.set_write_timeout(std::chrono::milliseconds(c.read_timeout_ms));
    cli.set_follow_location(false);
    cli.set_decompress(false);
    httplib::Headers h = extra;
    h.emplace("User-Agent", "octet/" + GetBuildInfo().version + "; hf-hub-compatible");
    h.emplace("Accept-Encoding", "identity");
    if (!c.token.empty() && u.origin == endpoint.origin) {
      h.emplace("Authorization", "Bearer " + c.token);
    }
    Response resp;
    Status abort_reason;
    std::string location;
    const auto head = [&](const httplib::Response& r) {
      resp.status = r.status;
      resp.headers = r.headers;
      if (r.status >= 300 && r.status < 400 && r.has_header("Location")) {
        location = r.get_header_value("Location");
        return true;
      }
      if (r.status >= 200 && r.status < 300 && on_head) {
        abort_reason = on_head(resp);
        return abort_reason.ok();
      }
      return true;
    };
    const auto body = [&](const char* d, size_t n) {
      if (cancel && cancel->load()) {
        abort_reason = CancelledError("stopped by a signal");
        return false;
      }
      if (!location.empty()) return true;
      if (resp.status >= 200 && resp.status < 300 && on_data) {
        abort_reason = on_data(d, n);
        return abort_reason.ok();
      }
      const size_t cap = resp.status >= 200 && resp.status < 300 ? kMaxInfoBytes : 4096;
      if (resp.body.size() + n > cap) {
        if (resp.status >= 200 && resp.status < 300) {
          abort_reason = ResourceExhaustedError(url + ": response larger than " +
                                                std::to_string(cap) + " bytes");
          return false;
        }
        return true;
      }
      resp.body.append(d, n);
      return true;
    };
    auto res = cli.Get(u.path, h, head, body);
    if (!abort_reason.ok()) return abort_reason;
    if (cancel && cancel->load()) return CancelledError("stopped by a signal");
    if (!res) {
      return UnavailableError(
          "GET " + url + ": " + http::ClientErrorText(res.error()) +
          (res.error() == httplib::Error::Read ? " (timed out or dropped)" : ""));
    }
    if (location.empty()) return resp;
    if (location.rfind("http://", 0) == 0 || location.rfind("https://", 0) == 0) {
      url = location;
    } else if (!location.empty() && location[0] == '/') {
      url = u.origin + location;
    } else {
      return UnavailableError("GET " + url + ": unsupported redirect to '" + location + "'");
    }
  }
  return UnavailableError("GET " + url + ": more than " + std::to_string(kMaxRedirects) +
                          " redirects");
}

std::string HubMessage(const Response& r) {
  auto it = r.headers.find("X-Error-Message");
  if (it != r.headers.end()) return it->second;
  auto j = nlohmann::json::parse(r.body, nullptr, false);
  if (j.is_object() && j.contains("error") && j["error"].is_string())
    return j["error"].get<std::string>();
  return {};
}

bool SafeRelativePath(const std::string& p) {
  if (p.empty() || p[0] == '/' || p.find('\0') != std::string::npos) return false;
  size_t start = 0;
  while (start <= p.size()) {
    size_t end = p.find('/', start);
    if (end == std::string::npos) end = p.size();
    const std::string_view seg(p.data() + start, end - start);
    if (seg.empty() || seg == "." || seg == "..") return false;
    start = end + 1;
  }
  return true;
}

bool IsHex(const std::string& s, size_t n) {
  return s.size() == n && std::all_of(s.begin(), s.end(), [](char ch) {
           return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f');
         });
}

Status SyncAndClose(int fd, const std::string& path) {
  const bool ok = ::fsync(fd) == 0;
  ::close(fd);
  return ok ? Status::Ok() : DataLossError("fsync " + path + " failed");
}

// snapshots/<commit>/<path> -> ../../blobs/<id> (one more ../ per folder in path).
Status LinkIntoSnapshot(const std::string& repo_dir, const std::string& commit, const HubFile& f) {
  const fs::path link = fs::path(repo_dir) / "snapshots" / commit / f.path;
  std::error_code ec;
  fs::create_directories(link.parent_path(), ec);
  if (ec)
    return InternalError("cannot create " + link.parent_path().string() + ": " + ec.message());
  std::string target;
  for (int i = 0; i < 2 + static_cast<int>(std::count(f.path.begin(), f.path.end(), '/')); ++i) {
    target += "../";
  }
  target += "blobs/" + f.BlobName();
  const fs::path tmp = link.string() + ".octet-tmp." + std::to_string(::getpid());
  fs::remove(tmp, ec);
  fs::create_symlink(target, tmp, ec);
  if (!ec) fs::rename(tmp, link, ec);
  if (ec) return InternalError("cannot link " + link.string() + ": " + ec.message());
  return Status::Ok();
}

// Does the file at `path` hold exactly what the Hub promised for f?
Status Verify(const HubFile& f, const std::string& path, std::string* how) {
  std::error_code ec;
  const int64_t size = static_cast<int64_t>(fs::file_size(path, ec));
  if (ec) return NotFoundError("cannot stat " + path);
  if (f.size >= 0 && size != f.size) {
    return DataLossError(f.path + ": " + std::to_string(size) + " bytes, the Hub lists " +
                         std::to_string(f.size));
  }
  if (!f.sha256.empty()) {
    OCTET_ASSIGN_OR_RETURN(std::string got, FileSha256(path));
    if (got != f.sha256) {
      return DataLossError(f.path + ": sha256 " + got + " does not match the Hub's " + f.sha256);
    }
    *how = "sha256 verified";
  } else if (IsHex(f.blob_id, 40)) {
    OCTET_ASSIGN_OR_RETURN(std::string got, FileGitBlobId(path));
    if (got != f.blob_id) {
      return DataLossError(f.path + ": git blob id " + got + " does not match the Hub's " +
                           f.blob_id);
    }
    *how = "git blob id verified";
  } else {
    *how = "size verified";
  }
  return Status::Ok();
}

// State shared by the download workers. Guarded by mu.
class PullState {
 public:
  PullState(const PullOptions& o, int files_total, int64_t bytes_total)
      : o_(o), start_(Clock::now()) {
    files_total_ = files_total;
    bytes_total_ = bytes_total;
  }

  void Start(const HubFile& f, int64_t on_disk) {
    std::lock_guard<std::mutex> lock(mu_);
    active_.push_back({f.path, on_disk, f.size < 0 ? 0 : f.size, Clock::now(), 0});
    bytes_done_ += on_disk;
    Emit(PullProgress::Event::kFileStarted, active_.back(), "");
  }
  // The file's on-disk size changed by `delta` (negative on a restart);
  // `network` bytes came over the wire.
  void Add(const std::string& path, int64_t delta, int64_t network) {
    std::lock_guard<std::mutex> lock(mu_);
    bytes_done_ += delta;
    network_ += network;
    for (auto& a : active_) {
      if (a.path == path) {
        a.done += delta;
        a.network += network;
      }
    }
  }
  void Retry(const std::string& path, const std::string& why) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = std::find_if(active_.begin(), active_.end(),
                           [&](const Active& a) { return a.path == path; });
    Emit(PullProgress::Event::kFileRetry, it != active_.end() ? *it : Active{path}, why);
  }
  void Finish(const HubFile& f, bool cached, const std::string& how) {
    std::lock_guard<std::mutex> lock(mu_);
    ++files_done_;
    auto it = std::find_if(active_.begin(), active_.end(),
                           [&](const Active& a) { return a.path == f.path; });
    Active a = it != active_.end() ? *it : Active{f.path, f.size, f.size, Clock::now(), 0};
    if (it != active_.end()) active_.erase(it);
    if (cached) {
      bytes_done_ += std::max<int64_t>(f.size, 0);
      a.done = a.total = std::max<int64_t>(f.size, 0);
    }
    Emit(cached ? PullProgress::Event::kFileCached : PullProgress::Event::kFileDone, a, how);
  }
  void Abandon(const std::string& path) {  // a failed file leaves the live display
    std::lock_guard<std::mutex> lock(mu_);
    auto it = std::find_if(active_.begin(), active_.end(),
                           [&](const Active& a) { return a.path == path; });
    if (it != active_.end()) active_.erase(it);
  }
  void Tick() {
    std::lock_guard<std::mutex> lock(mu_);
    Emit(PullProgress::Event::kTick, Active{}, "");
  }
  int64_t network() const {
    std::lock_guard<std::mutex> lock(mu_);
    return network_;
  }
  double seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

 private:
  struct Active {
    std::string path;
    int64_t done = 0, total = 0;
    Clock::time_point since;
    int64_t network = 0;
  };
  FileProgress Describe(const Active& a) const {
    const double s = std::chrono::duration<double>(Clock::now() - a.since).count();
    return {a.path, a.done, a.total, s > 0 ? double(a.network) / s : 0};
  }
  void Emit(PullProgress::Event e, const Active& about, const std::string& detail) {
    if (!o_.progress) return;
    PullProgress p;
    p.event = e;
    p.file = Describe(about);
    p.detail = detail;
    for (const auto& a : active_) p.active.push_back(Describe(a));
    p.files_done = files_done_;
    p.files_total = files_total_;
    p.bytes_done = bytes_done_;
    p.bytes_total = bytes_total_;
    const double s = seconds();
    p.bytes_per_s = s > 0 ? double(network_) / s : 0;
    if (p.bytes_per_s > 0)
      p.eta_s = double(std::max<int64_t>(bytes_total_ - bytes_done_, 0)) / p.bytes_per_s;
    o_.progress(p);
  }

  const PullOptions& o_;
  const Clock::time_point start_;
  mutable std::mutex mu_;
  std::vector<Active> active_;  // guarded by mu_
  int files_done_ = 0, files_total_ = 0;
  int64_t bytes_done_ = 0, bytes_total_ = 0, network_ = 0;
};

struct PullContext {
  const HubConfig& c;
  const RepoRef& ref;
  const PullOptions& o;
  std::string repo_dir;
  std::string commit;
  PullState* state;
};

bool Cancelled(const PullOptions& o) { return o.cancel && o.cancel->load(); }

// One GET of f into `part`, resuming from its current size.
Status DownloadOnce(const PullContext& x, const HubFile& f, const std::string& part,
                    int64_t* network) {
  const int fd = ::open(part.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return InternalError("cannot open " + part + " for writing");
  int64_t offset = ::lseek(fd, 0, SEEK_END);
  if (f.size >= 0 && offset > f.size) {  // longer than the file: not ours to resume
    x.state->Add(f.path, -offset, 0);
    if (::ftruncate(fd, 0) != 0) {
      ::close(fd);
      return InternalError("cannot truncate " + part);
    }
    offset = ::lseek(fd, 0, SEEK_SET);
  }
  if (f.size >= 0 && offset == f.size) return SyncAndClose(fd, part);  // complete: verify next
  // Writes bytes that arrived at the end of `part`; more than the file's
  // listed size is refused, naming who sent them.
  const auto append = [&](const char* d, size_t n, std::string_view sender,
                          std::string_view listing) -> Status {
    size_t left = n;
    while (left > 0) {
      const ssize_t w = ::write(fd, d + (n - left), left);
      if (w <= 0) return ResourceExhaustedError("cannot write " + part + " (disk full?)");
      left -= static_cast<size_t>(w);
    }
    offset += static_cast<int64_t>(n);
    *network += static_cast<int64_t>(n);
    x.state->Add(f.path, static_cast<int64_t>(n), static_cast<int64_t>(n));
    if (f.size >= 0 && offset > f.size) {
      return DataLossError(f.path + ": " + std::string(sender) + " sent more than the " +
                           std::to_string(f.size) + " bytes " + std::string(listing));
    }
    return Status::Ok();
  };
  if (x.o.source) {
    // A peer's copy: resumed at `offset` by asking for the rest.
    const auto write = [&](const char* d, size_t n) -> Status {
      if (Cancelled(x.o)) return CancelledError("stopped by a signal");
      return append(d, n, x.o.source->name, "listed");
    };
    const Status read = x.o.source->read(f, offset, write);
    const Status closed = SyncAndClose(fd, part);
    OCTET_RETURN_IF_ERROR(read);
    OCTET_RETURN_IF_ERROR(closed);
    if (f.size >= 0 && offset < f.size) {
      return UnavailableError(f.path + ": " + x.o.source->name + " ended after " +
                              std::to_string(offset) + " of " + std::to_string(f.size) + " bytes");
    }
    return Status::Ok();
  }
  httplib::Headers h;
  if (offset > 0) h.emplace("Range", "bytes=" + std::to_string(offset) + "-");
  const std::string url = x.c.endpoint + "/" + x.ref.repo + "/resolve/" + x.commit + "/" +
                          Encode(f.path, /*keep_slash=*/true);
  const auto on_head = [&](const Response& r) -> Status {
    if (r.status == 206) {
      // "bytes START-END/TOTAL": the server must resume where we are.
      auto it = r.headers.find("Content-Range");
      const std::string cr = it == r.headers.end() ? "" : it->second;
      const size_t sp = cr.find(' ');
      if (sp == std::string::npos || std::atoll(cr.c_str() + sp + 1) != offset) {
        return DataLossError(f.path + ": the server resumed at '" + cr + "', not at byte " +
                             std::to_string(offset));
      }
    } else if (offset > 0) {  // 200: the server ignored Range; start over
      x.state->Add(f.path, -offset, 0);
      if (::ftruncate(fd, 0) != 0 || ::lseek(fd, 0, SEEK_SET) != 0) {
        return InternalError("cannot truncate " + part);
      }
      offset = 0;
    }
    return Status::Ok();
  };
  const auto on_data = [&](const char* d, size_t n) -> Status {
    return append(d, n, "the server", "the Hub lists");
  };
  auto r = HttpGet(x.c, url, h, on_head, on_data, x.o.cancel);
  const Status closed = SyncAndClose(fd, part);
  if (!r.ok()) return r.status();
  if (r->status == 416) {  // our partial file does not fit the server's: drop it
    x.state->Add(f.path, -offset, 0);
    std::error_code ec;
    fs::remove(part, ec);
    return OutOfRangeError(f.path + ": the server refused to resume at byte " +
                           std::to_string(offset) + " (416); starting over");
  }
  if (r->status < 200 || r->status >= 300) {
    Status s = HttpError(x.c, x.ref, r->status, f.path, HubMessage(*r));
    if (r->status == 429 || r->status >= 500) return UnavailableError(s.message());
    return s;
  }
  OCTET_RETURN_IF_ERROR(closed);
  if (f.size >= 0 && offset < f.size) {
    return UnavailableError(f.path + ": the connection ended after " + std::to_string(offset) +
                            " of " + std::to_string(f.size) + " bytes");
  }
  return Status::Ok();
}

bool SleepUnlessCancelled(const PullOptions& o, int ms) {
  const auto until = Clock::now() + std::chrono::milliseconds(ms);
  while (Clock::now() < until) {
    if (Cancelled(o)) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return !Cancelled(o);
}

Status PullFile(const PullContext& x, const HubFile& f, PulledFile* out) {
  out->file = f;
  const std::string blobs = JoinPath(x.repo_dir, "blobs");
  const std::string blob = JoinPath(blobs, f.BlobName());
  const std::string part = blob + ".incomplete";
  std::error_code ec;
  std::string how;
  if (fs::exists(blob, ec)) {
    Status v = x.o.verify_cached ? Verify(f, blob, &how)
               : (f.size < 0 || int64_t(fs::file_size(blob, ec)) == f.size)
                   ? Status::Ok()
                   : DataLossError(f.path + ": cached blob has the wrong size");
    if (v.ok()) {
      OCTET_RETURN_IF_ERROR(LinkIntoSnapshot(x.repo_dir, x.commit, f));
      x.state->Finish(f, /*cached=*/true, how.empty() ? "in the cache" : "in the cache, " + how);
      return Status::Ok();
    }
    x.state->Retry(f.path, "the cached blob is corrupt (" + v.message() + "); fetching again");
    fs::remove(blob, ec);
  }
  const int64_t on_disk = fs::exists(part, ec) ? int64_t(fs::file_size(part, ec)) : 0;
  x.state->Start(f, on_disk);
  out->downloaded = true;
  Status last;
  int backoff = x.o.retry_backoff_ms;
  for (int attempt = 1; attempt <= std::max(1, x.o.attempts); ++attempt) {
    if (Cancelled(x.o)) return CancelledError("stopped by a signal");
    Status s = DownloadOnce(x, f, part, &out->network_bytes);
    if (s.ok()) {
      s = Verify(f, part, &how);
      if (s.ok()) {
        fs::rename(part, blob, ec);
        if (ec) return InternalError("cannot rename " + part + ": " + ec.message());
        OCTET_RETURN_IF_ERROR(LinkIntoSnapshot(x.repo_dir, x.commit, f));
        x.state->Finish(f, /*cached=*/false, how);
        return Status::Ok();
      }
      // A complete file with the wrong bytes is refused: discard it, fetch again.
      const int64_t bad = int64_t(fs::file_size(part, ec));
      fs::remove(part, ec);
      x.state->Add(f.path, -bad, 0);
      s = DataLossError(s.message() + "; the download was discarded");
    }
    if (s.code() == StatusCode::kCancelled) return s;
    last = s;
    if (!Retryable(s)) break;
    if (attempt < x.o.attempts) {
      x.state->Retry(f.path, s.message() + "; attempt " + std::to_string(attempt + 1) + " of " +
                                 std::to_string(x.o.attempts));
      if (!SleepUnlessCancelled(x.o, backoff)) return CancelledError("stopped by a signal");
      backoff = std::min(backoff * 2, 30'000);
    }
  }
  x.state->Abandon(f.path);
  return last;
}

bool Included(const std::vector<std::string>& globs, const std::string& path) {
  if (globs.empty()) return true;
  for (const auto& g : globs) {
    if (::fnmatch(g.c_str(), path.c_str(), 0) == 0) return true;
  }
  return false;
}

Result<PullResult> PullOffline(const HubConfig& c, const RepoRef& ref, const PullOptions& o) {
  auto snap = ResolveSnapshot(c, ref);
  if (!snap.ok()) {
    return Status(snap.status().code(), "offline (HF_HUB_OFFLINE): " + snap.status().message() +
                                            " once the Hub is reachable");
  }
  PullResult r;
  r.ref = ref;
  r.offline = true;
  r.snapshot_dir = *snap;
  r.commit = BaseName(*snap);
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(*snap, ec)) {
    if (e.is_directory()) continue;
    const std::string rel = fs::relative(e.path(), *snap).string();
    if (!Included(o.include, rel)) continue;
    PulledFile pf;
    pf.file.path = rel;
    std::error_code fec;
    pf.file.size =
        fs::is_regular_file(fs::status(e.path(), fec)) ? int64_t(fs::file_size(e.path(), fec)) : -1;
    if (pf.file.size < 0) {
      return DataLossError("offline (HF_HUB_OFFLINE): " + e.path().string() +
                           " links to a missing blob; pull again online");
    }
    r.bytes_total += pf.file.size;
    r.files.push_back(pf);
  }
  std::sort(r.files.begin(), r.files.end(),
            [](const PulledFile& a, const PulledFile& b) { return a.file.path < b.file.path; });
  return r;
}

}  // namespace

Result<RepoInfo> FetchRepoInfo(const HubConfig& c, const RepoRef& ref) {
  if (c.offline) return FailedPreconditionError("offline (HF_HUB_OFFLINE): no Hub requests");
  const std::string url = c.endpoint + "/api/models/" + ref.repo + "/revision/" +
                          Encode(ref.revision, /*keep_slash=*/false) + "?blobs=true";
  OCTET_ASSIGN_OR_RETURN(Response r, HttpGet(c, url, {}, nullptr, nullptr, nullptr));
  if (r.status != 200) {
    return HttpError(c, ref, r.status, "revision " + ref.revision + " (model info)", HubMessage(r));
  }
  RepoInfo info;
  info.ref = ref;
  try {
    const auto j = nlohmann::json::parse(r.body);
    info.commit = j.at("sha").get<std::string>();
    for (const auto& s : j.at("siblings")) {
      HubFile f;
      f.path = s.at("rfilename").get<std::string>();
      if (!SafeRelativePath(f.path)) {
        return DataLossError(url + ": unsafe file name '" + f.path + "' in the file list");
      }
      if (s.contains("size") && s["size"].is_number_integer()) f.size = s["size"].get<int64_t>();
      if (s.contains("blobId") && s["blobId"].is_string())
        f.blob_id = s["blobId"].get<std::string>();
      if (s.contains("lfs") && s["lfs"].is_object()) {
        const auto& lfs = s["lfs"];
        f.sha256 = lfs.at("sha256").get<std::string>();
        if (lfs.contains("size") && lfs["size"].is_number_integer())
          f.size = lfs["size"].get<int64_t>();
      }
      std::transform(f.sha256.begin(), f.sha256.end(), f.sha256.begin(), ::tolower);
      if (!f.sha256.empty() && !IsHex(f.sha256, 64)) {
        return DataLossError(url + ": '" + f.path + "' has a malformed sha256");
      }
      if (f.sha256.empty() && !IsHex(f.blob_id, 40)) {
        // No checksum to name the blob by (a minimal mirror): name it by
        // commit and path so it is still unique, and verify the size only.
        f.blob_id = info.commit + "-" + Encode(f.path, false);
      }
      info.files.push_back(std::move(f));
    }
  } catch (const std::exception& e) {
    return DataLossError(url + ": not a model info document: " + e.what());
  }
  if (info.commit.empty() || !SafeRelativePath(info.commit) ||
      info.commit.find('/') != std::string::npos) {
    return DataLossError(url + ": bad commit '" + info.commit + "'");
  }
  return info;
}

Result<std::string> FetchSmallFile(const HubConfig& c, const RepoInfo& info,
                                   const std::string& path) {
  if (c.offline) return FailedPreconditionError("offline (HF_HUB_OFFLINE): no Hub requests");
  if (!SafeRelativePath(path)) return InvalidArgumentError("unsafe file name '" + path + "'");
  const std::string url = c.endpoint + "/" + info.ref.repo + "/resolve/" + info.commit + "/" +
                          Encode(path, /*keep_slash=*/true);
  OCTET_ASSIGN_OR_RETURN(Response r, HttpGet(c, url, {}, nullptr, nullptr, nullptr));
  if (r.status != 200) return HttpError(c, info.ref, r.status, path, HubMessage(r));
  return r.body;
}

Result<PullResult> Pull(const HubConfig& c, const RepoRef& ref, const PullOptions& o) {
  if (c.offline && !o.source) return PullOffline(c, ref, o);
  auto info = o.source ? o.source->info(ref) : FetchRepoInfo(c, ref);
  if (info.ok() && o.source) {
    // A peer's list gets the checks the Hub's gets in FetchRepoInfo: names
    // that stay inside the snapshot and blob names that stay inside blobs/.
    if (!SafeRelativePath(info->commit) || info->commit.find('/') != std::string::npos) {
      return DataLossError(o.source->name + ": bad commit '" + info->commit + "'");
    }
    for (const auto& f : info->files) {
      const std::string blob = f.BlobName();
      if (!SafeRelativePath(f.path) || blob.empty() || blob.find('/') != std::string::npos ||
          blob[0] == '.') {
        return DataLossError(o.source->name + ": unsafe file '" + f.path + "' (blob '" + blob +
                             "') in its file list");
      }
    }
  }
  if (!info.ok()) {
    if (info.status().code() == StatusCode::kUnavailable && ResolveSnapshot(c, ref).ok()) {
      return Status(info.status().code(), info.status().message() + " (the cache holds " +
                                              ref.ToString() +
                                              ": HF_HUB_OFFLINE=1 uses it without the Hub)");
    }
    return info.status();
  }
  std::vector<HubFile> files;
  for (const auto& f : info->files) {
    if (Included(o.include, f.path)) files.push_back(f);
  }
  if (files.empty()) {
    return NotFoundError(ref.ToString() + ": no file of revision " + info->commit +
                         " matches --include");
  }
  PullResult result;
  result.ref = ref;
  result.commit = info->commit;
  const std::string repo_dir = RepoCacheDir(c, ref.repo);
  OCTET_RETURN_IF_ERROR(MakeDirs(JoinPath(repo_dir, "blobs")));
  OCTET_RETURN_IF_ERROR(MakeDirs(JoinPath(JoinPath(repo_dir, "snapshots"), info->commit)));
  result.snapshot_dir = JoinPath(JoinPath(repo_dir, "snapshots"), info->commit);

  int64_t bytes_total = 0;
  for (const auto& f : files) bytes_total += std::max<int64_t>(f.size, 0);
  PullState state(o, static_cast<int>(files.size()), bytes_total);
  PullContext x{c, ref, o, repo_dir, info->commit, &state};
  result.files.resize(files.size());
  std::vector<Status> errors(files.size());
  std::atomic<size_t> next{0};
  std::mutex done_mu;
  std::condition_variable done_cv;
  int running = std::clamp(o.jobs, 1, 64);
  running = std::min<int>(running, static_cast<int>(files.size()));
  const int workers = running;
  std::vector<std::thread> threads;
  for (int t = 0; t < workers; ++t) {
    threads.emplace_back([&] {
      for (size_t i; !Cancelled(o) && (i = next.fetch_add(1)) < files.size();) {
        errors[i] = PullFile(x, files[i], &result.files[i]);
      }
      std::lock_guard<std::mutex> lock(done_mu);
      --running;
      done_cv.notify_all();
    });
  }
  {
    std::unique_lock<std::mutex> lock(done_mu);
    while (!done_cv.wait_for(lock, std::chrono::milliseconds(250), [&] { return running == 0; })) {
      lock.unlock();
      state.Tick();
      lock.lock();
    }
  }
  for (auto& t : threads) t.join();
  state.Tick();
  result.network_bytes = state.network();
  result.seconds = state.seconds();
  result.bytes_total = bytes_total;
  for (size_t i = 0; i < files.size(); ++i) result.files[i].file = files[i];

  if (Cancelled(o)) {
    return CancelledError("stopped by a signal; partial files are kept in " + repo_dir +
                          "/blobs and the next `octet pull " + ref.ToString() + "` resumes them");
  }
  std::string failed;
  Status first;
  int n_failed = 0;
  for (size_t i = 0; i < files.size(); ++i) {
    if (errors[i].ok()) continue;
    if (first.ok()) first = errors[i];
    if (++n_failed <= 3) failed += "\n  " + errors[i].message();
  }
  if (!first.ok()) {
    return Status(first.code(), ref.ToString() + ": " + std::to_string(n_failed) + " of " +
                                    std::to_string(files.size()) + " files failed:" + failed +
                                    (n_failed > 3 ? "\n  ..." : "") +
                                    "\n(a rerun resumes the others where they stopped)");
  }
  if (ref.revision != info->commit) {
    const std::string refs = JoinPath(JoinPath(repo_dir, "refs"), ref.revision);
    OCTET_RETURN_IF_ERROR(MakeDirs(DirName(refs)));
    OCTET_RETURN_IF_ERROR(WriteFileAtomic(refs, info->commit));
  }
  return result;
}

}  // namespace octet::app::hub
