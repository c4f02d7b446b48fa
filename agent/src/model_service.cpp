#include "model_service.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "octet/agent/job_arguments.h"
#include "octet/agent/link_probe.h"  // SplitHostPort
#include "octet/base/deadline.h"
#include "octet/base/file_util.h"
#include "octet/base/json.h"
#include "octet/base/log.h"
#include "octet/base/subprocess.h"
#include "octet/v1/models.grpc.pb.h"

namespace octet::agent {
namespace {

namespace fs = std::filesystem;

// A server stream fed by a producer thread. Push blocks while `capacity`
// messages wait (back-pressure from a slow reader) and returns false once the
// call is over (cancelled, the client gone): the producer then stops. A
// reader that takes nothing for `stall` is given up on: the queue is dropped,
// the call ends with DEADLINE_EXCEEDED once the write in flight completes
// (or the client goes), and the producer's thread is free at once. The
// reactor deletes itself in OnDone; the producer only touches Core.
template <typename Msg>
class QueueWriter final : public grpc::ServerWriteReactor<Msg> {
 public:
  struct Core {
    Core(std::chrono::milliseconds stall, std::string what) : stall(stall), what(std::move(what)) {}
    const std::chrono::milliseconds stall;
    const std::string what;  // the call, for the log line when its reader stalls
    std::mutex mu;
    std::condition_variable cv;
    QueueWriter* writer = nullptr;  // null once finished
    std::deque<Msg> queue;
    Msg current;
    bool writing = false, closing = false, finished = false;
    grpc::Status status;
    size_t capacity = 8;

    bool Push(Msg m) {
      std::unique_lock<std::mutex> lock(mu);
      const auto room = [&] { return finished || closing || queue.size() < capacity; };
      if (!cv.wait_for(lock, stall, room)) {
        const std::string why =
            "the reader took nothing for " + std::to_string(stall.count()) + " ms";
        OCTET_LOG(WARNING) << what << ": " << why << "; the stream ends";
        closing = true;
        status = grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, why);
        queue.clear();
        Pump();  // finishes now unless a write is in flight (then OnWriteDone does)
        return false;
      }
      if (finished || closing) return false;
      queue.push_back(std::move(m));
      Pump();
      return true;
    }
    void Close(const grpc::Status& s) {
      std::lock_guard<std::mutex> lock(mu);
      if (finished || closing) return;
      closing = true;
      status = s;
      Pump();
    }
    // The call is over or ending (cancelled, or its reader given up on).
    bool over() {
      std::lock_guard<std::mutex> lock(mu);
      return finished || closing;
    }
    // Under mu.
    void Pump() {
      if (finished || writing) return;
      if (!queue.empty()) {
        current = std::move(queue.front());
        queue.pop_front();
        writing = true;
        cv.notify_all();
        writer->StartWrite(&current);
        return;
      }
      if (closing) FinishLocked(status);
    }
    void FinishLocked(const grpc::Status& s) {
      if (finished) return;
      finished = true;
      cv.notify_all();
      writer->Finish(s);
    }
  };

  QueueWriter(std::chrono::milliseconds stall, std::string what)
      : core_(std::make_shared<Core>(stall, std::move(what))) {
    core_->writer = this;
  }
  std::shared_ptr<Core> core() { return core_; }

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> lock(core_->mu);
    core_->writing = false;
    if (!ok) {
      core_->FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "the reader went away"));
      return;
    }
    core_->Pump();
  }
  void OnCancel() override {
    std::lock_guard<std::mutex> lock(core_->mu);
    if (!core_->writing) core_->FinishLocked(grpc::Status::CANCELLED);
    core_->closing = true;
    core_->status = grpc::Status::CANCELLED;
    core_->queue.clear();
    core_->cv.notify_all();
  }
  void OnDone() override {
    {
      std::lock_guard<std::mutex> lock(core_->mu);
      core_->finished = true;
      core_->cv.notify_all();
    }
    delete this;
  }

 private:
  std::shared_ptr<Core> core_;
};

template <typename Msg>
class Rejected final : public grpc::ServerWriteReactor<Msg> {
 public:
  explicit Rejected(const grpc::Status& s) { this->Finish(s); }
  void OnDone() override { delete this; }
};

bool NamePart(const std::string& s) {
  if (s.empty() || s.size() > 96 || s[0] == '.' || s[0] == '-') return false;
  return std::all_of(s.begin(), s.end(), [](char ch) {
    return std::isalnum(static_cast<unsigned char>(ch)) || ch == '.' || ch == '_' || ch == '-';
  });
}

// ORG/NAME, as the Hub spells repo ids (and nothing a command line or a path
// could misread).
bool ValidRepo(const std::string& repo) {
  const size_t slash = repo.find('/');
  if (slash == std::string::npos) return false;
  const std::string org = repo.substr(0, slash), name = repo.substr(slash + 1);
  return NamePart(org) && NamePart(name) && org.find("..") == std::string::npos &&
         name.find("..") == std::string::npos;
}

bool ValidRevision(const std::string& rev) {
  if (rev.empty() || rev.size() > 128 || rev[0] == '-' || rev[0] == '/' ||
      rev.find("..") != std::string::npos) {
    return false;
  }
  return std::all_of(rev.begin(), rev.end(), [](char ch) {
    return std::isalnum(static_cast<unsigned char>(ch)) || ch == '.' || ch == '_' || ch == '-' ||
           ch == '/';
  });
}

std::string RepoDir(const std::string& store, const std::string& repo) {
  std::string folder = "models--" + repo;
  for (size_t i = 0; (i = folder.find('/', i)) != std::string::npos;) folder.replace(i, 1, "--");
  return JoinPath(store, folder);
}

// models--ORG--NAME -> ORG/NAME ("" when not a model folder).
std::string RepoOfFolder(const std::string& folder) {
  static const std::string kPrefix = "models--";
  if (folder.rfind(kPrefix, 0) != 0) return "";
  std::string rest = folder.substr(kPrefix.size());
  const size_t sep = rest.find("--");
  if (sep == std::string::npos) return "";
  return rest.substr(0, sep) + "/" + rest.substr(sep + 2);
}

std::string Trimmed(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  return s;
}

void ScanStore(const std::string& store, v1::ListModelsReply* reply) {
  std::error_code ec;
  if (store.empty() || !fs::is_directory(store, ec)) return;
  std::vector<fs::path> repos;
  for (const auto& e : fs::directory_iterator(store, ec)) repos.push_back(e.path());
  std::sort(repos.begin(), repos.end());
  for (const auto& dir : repos) {
    const std::string repo = RepoOfFolder(dir.filename().string());
    if (repo.empty()) continue;
    std::map<std::string, std::vector<std::string>> refs;  // commit -> names
    std::error_code rec;
    for (const auto& r : fs::recursive_directory_iterator(dir / "refs", rec)) {
      if (!r.is_regular_file()) continue;
      auto text = ReadFileToString(r.path().string());
      if (text.ok()) {
        refs[Trimmed(*text)].push_back(r.path().lexically_relative(dir / "refs").string());
      }
    }
    uint32_t incomplete = 0;
    std::error_code bec;
    for (const auto& b : fs::directory_iterator(dir / "blobs", bec)) {
      if (b.path().extension() == ".incomplete") ++incomplete;
    }
    std::error_code sec;
    std::vector<fs::path> snaps;
    for (const auto& s : fs::directory_iterator(dir / "snapshots", sec)) snaps.push_back(s.path());
    std::sort(snaps.begin(), snaps.end());
    for (const auto& snap : snaps) {
      v1::NodeModel* m = reply->add_models();
      m->set_repo(repo);
      m->set_commit(snap.filename().string());
      for (const auto& name : refs[snap.filename().string()]) m->add_refs(name);
      m->set_snapshot_dir(snap.string());
      m->set_incomplete_files(incomplete);
      uint32_t files = 0, missing = 0;
      int64_t bytes = 0;
      std::error_code wec;
      for (const auto& f : fs::recursive_directory_iterator(snap, wec)) {
        if (f.is_directory()) continue;
        std::error_code fec;
        if (fs::is_regular_file(fs::status(f.path(), fec))) {
          ++files;
          bytes += static_cast<int64_t>(fs::file_size(f.path(), fec));
        } else {
          ++missing;
        }
      }
      m->set_files(files);
      m->set_bytes(bytes);
      m->set_missing_files(missing);
    }
  }
}

class ModelServiceImpl final : public v1::ModelService::CallbackService {
 public:
  explicit ModelServiceImpl(ModelServiceDeps d) : d_(std::move(d)) {}

  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* ctx,
                                       const v1::ListModelsRequest*,
                                       v1::ListModelsReply* reply) override {
    return Unary(ctx, "ModelService/ListModels", [this, reply] {
      reply->set_models_dir(d_.models_dir);
      ScanStore(d_.models_dir, reply);
      return grpc::Status::OK;
    });
  }

  grpc::ServerUnaryReactor* GetSnapshot(grpc::CallbackServerContext* ctx,
                                        const v1::GetSnapshotRequest* req,
                                        v1::GetSnapshotReply* reply) override {
    return Unary(ctx, "ModelService/GetSnapshot", [this, req, reply] {
      const std::string rev = req->revision().empty() ? "main" : req->revision();
      if (!ValidRepo(req->repo()) || !ValidRevision(rev)) {
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                            "'" + req->repo() + "@" + rev + "' is not a repo id ORG/NAME[@REV]");
      }
      if (d_.models_dir.empty()) {
        return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                            "this agent has no model store (--models-dir / --model-roots)");
      }
      const std::string dir = RepoDir(d_.models_dir, req->repo());
      std::string commit = rev;
      if (auto ref = ReadFileToString(JoinPath(JoinPath(dir, "refs"), rev)); ref.ok()) {
        commit = Trimmed(*ref);
      }
      const fs::path snap = fs::path(dir) / "snapshots" / commit;
      std::error_code ec;
      if (!NamePart(commit) || !fs::is_directory(snap, ec)) {
        return grpc::Status(
            grpc::StatusCode::NOT_FOUND,
            req->repo() + "@" + rev + " is not in this node's store " + d_.models_dir);
      }
      reply->set_commit(commit);
      std::vector<v1::SnapshotFile> files;
      for (const auto& e : fs::recursive_directory_iterator(snap, ec)) {
        if (e.is_directory()) continue;
        v1::SnapshotFile f;
        f.set_path(e.path().lexically_relative(snap).string());
        std::error_code fec;
        const fs::path target = fs::canonical(e.path(), fec);
        if (fec || !fs::is_regular_file(target, fec)) {
          return grpc::Status(grpc::StatusCode::DATA_LOSS,
                              e.path().string() + " links to a missing blob: pull it again here");
        }
        f.set_size(static_cast<int64_t>(fs::file_size(target, fec)));
        if (e.is_symlink()) f.set_blob(target.filename().string());
        f.set_blob_path(target.string());
        files.push_back(std::move(f));
      }
      std::sort(files.begin(), files.end(),
                [](const auto& a, const auto& b) { return a.path() < b.path(); });
      for (auto& f : files) *reply->add_files() = std::move(f);
      return grpc::Status::OK;
    });
  }

  grpc::ServerWriteReactor<v1::FileChunk>* ReadFile(grpc::CallbackServerContext* ctx,
                                                    const v1::ReadFileRequest* req) override {
    if (grpc::Status auth = d_.authorize(ctx, "ModelService/ReadFile"); !auth.ok()) {
      return new Rejected<v1::FileChunk>(auth);
    }
    // Only files inside the model roots, symlinks resolved (the same check
    // as a job's model folder).
    auto real = ResolveInsideRoots(req->path(), d_.model_roots, "file");
    if (!real.ok()) {
      OCTET_LOG(WARNING) << "ReadFile refused from " << ctx->peer() << ": "
                         << real.status().message();
      return new Rejected<v1::FileChunk>(grpc::Status(real.status().code() == StatusCode::kNotFound
                                                          ? grpc::StatusCode::NOT_FOUND
                                                          : grpc::StatusCode::PERMISSION_DENIED,
                                                      real.status().message()));
    }
    std::error_code ec;
    if (!fs::is_regular_file(*real, ec) || req->offset() < 0) {
      return new Rejected<v1::FileChunk>(grpc::Status(
          grpc::StatusCode::INVALID_ARGUMENT, req->path() + " is not a file (or a bad offset)"));
    }
    auto* w = new QueueWriter<v1::FileChunk>(d_.stream_stall,
                                             "ReadFile " + *real + " for " + ctx->peer());
    auto core = w->core();
    const std::string path = *real;
    const int64_t offset = req->offset();
    d_.run_background([core, path, offset] {
      const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0 || ::lseek(fd, offset, SEEK_SET) != offset) {
        if (fd >= 0) ::close(fd);
        core->Close(grpc::Status(grpc::StatusCode::OUT_OF_RANGE,
                                 "cannot read " + path + " from byte " + std::to_string(offset)));
        return;
      }
      std::string buf(1 << 20, '\0');
      grpc::Status end = grpc::Status::OK;
      for (;;) {
        const ssize_t n = ::read(fd, buf.data(), buf.size());
        if (n < 0) {
          end = grpc::Status(grpc::StatusCode::DATA_LOSS, "read error on " + path);
          break;
        }
        if (n == 0) break;
        v1::FileChunk c;
        c.set_data(buf.data(), static_cast<size_t>(n));
        if (!core->Push(std::move(c))) break;
      }
      ::close(fd);
      core->Close(end);
    });
    return w;
  }

  grpc::ServerWriteReactor<v1::PullModelEvent>* PullModel(
      grpc::CallbackServerContext* ctx, const v1::PullModelRequest* req) override {
    if (grpc::Status auth = d_.authorize(ctx, "ModelService/PullModel"); !auth.ok()) {
      return new Rejected<v1::PullModelEvent>(auth);
    }
    auto argv = PullCommand(*req);
    if (!argv.ok()) {
      return new Rejected<v1::PullModelEvent>(
          grpc::Status(argv.status().code() == StatusCode::kFailedPrecondition
                           ? grpc::StatusCode::FAILED_PRECONDITION
                           : grpc::StatusCode::INVALID_ARGUMENT,
                       argv.status().message()));
    }
    std::vector<std::string> env = {"HF_HUB_OFFLINE="};
    if (!req->hf_token().empty()) env.push_back("HF_TOKEN=" + req->hf_token());
    if (!req->peer().empty()) {
      env.push_back("OCTET_PEER_TOKEN=" + d_.cluster_token);
      if (!req->peer_tls_ca_pem().empty())
        env.push_back("OCTET_PEER_CA_PEM=" + req->peer_tls_ca_pem());
    }
    auto* w = new QueueWriter<v1::PullModelEvent>(
        d_.stream_stall, "PullModel " + req->repo() + " for " + ctx->peer());
    auto core = w->core();
    OCTET_LOG(INFO) << "pull " << req->repo()
                    << (req->peer().empty() ? " from the Hub" : " from peer " + req->peer())
                    << " into " << d_.models_dir << " for " << ctx->peer();
    d_.run_background([core, argv = *argv, env] { RunPull(core, argv, env); });
    return w;
  }

 private:
  template <typename Fn>
  grpc::ServerUnaryReactor* Unary(grpc::CallbackServerContext* ctx, const char* method, Fn fn) {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    if (grpc::Status auth = d_.authorize(ctx, method); !auth.ok()) {
      reactor->Finish(auth);
      return reactor;
    }
    d_.run_background([reactor, fn = std::move(fn)]() mutable { reactor->Finish(fn()); });
    return reactor;
  }

  Result<std::vector<std::string>> PullCommand(const v1::PullModelRequest& r) const {
    if (d_.models_dir.empty()) {
      return FailedPreconditionError(
          "this agent has no model store: start it with --model-roots DIR (pulls go to DIR/hub) "
          "or --models-dir DIR");
    }
    const std::string rev = r.revision().empty() ? "main" : r.revision();
    if (!ValidRepo(r.repo()) || !ValidRevision(rev)) {
      return InvalidArgumentError("'" + r.repo() + "@" + rev +
                                  "' is not a repo id ORG/NAME[@REVISION]");
    }
    std::vector<std::string> argv = {d_.octet_binary, "pull", r.repo() + "@" + rev,
                                     "--cache-dir=" + d_.models_dir, "--progress-lines"};
    for (const auto& g : r.include()) {
      if (g.empty() || g[0] == '-' || g.find('\0') != std::string::npos) {
        return InvalidArgumentError("include glob '" + g + "' refused");
      }
      argv.push_back("--include=" + g);
    }
    if (!r.endpoint().empty()) {
      if (r.endpoint().rfind("http://", 0) != 0 && r.endpoint().rfind("https://", 0) != 0) {
        return InvalidArgumentError("endpoint '" + r.endpoint() + "' is not an http(s) URL");
      }
      argv.push_back("--endpoint=" + r.endpoint());
    }
    if (!r.peer().empty()) {
      std::string host;
      uint16_t port = 0;
      if (!SplitHostPort(r.peer(), &host, &port).ok() || port == 0) {
        return InvalidArgumentError("peer '" + r.peer() + "' is not HOST:PORT");
      }
      argv.push_back("--from-peer=" + r.peer());
      if (!r.peer_tls_server_name().empty()) {
        if (!NamePart(r.peer_tls_server_name())) {
          return InvalidArgumentError("peer TLS name '" + r.peer_tls_server_name() + "' refused");
        }
        argv.push_back("--peer-tls-name=" + r.peer_tls_server_name());
      }
    }
    if (r.jobs() > 0) argv.push_back("--jobs=" + std::to_string(std::min<uint32_t>(r.jobs(), 64)));
    return argv;
  }

  // Runs the pull child; its "@octet-pull {json}" lines become progress
  // events, "@octet-pull-done {json}" the outcome, other lines pass as text.
  static void RunPull(std::shared_ptr<QueueWriter<v1::PullModelEvent>::Core> core,
                      std::vector<std::string> argv, std::vector<std::string> env) {
    std::mutex mu;
    std::string pending;
    std::string last_error;
    v1::PullModelEvent done;
    bool have_done = false;
    auto on_line = [&](const std::string& line) {
      v1::PullModelEvent e;
      auto parse = [](const std::string& text) {
        return nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
      };
      if (line.rfind("@octet-pull-done ", 0) == 0) {
        const auto j = parse(line.substr(17));
        if (!j.is_object()) return;
        done.set_commit(j.value("commit", ""));
        done.set_snapshot_dir(j.value("snapshot", ""));
        done.set_network_bytes(j.value("network_bytes", int64_t{0}));
        done.set_files_downloaded(j.value("files_downloaded", 0u));
        done.set_files_total(j.value("files_total", 0u));
        done.set_bytes_total(j.value("bytes_total", int64_t{0}));
        have_done = true;
        return;
      }
      if (line.rfind("@octet-pull ", 0) == 0) {
        const auto j = parse(line.substr(12));
        if (!j.is_object()) return;
        e.set_files_done(j.value("files_done", 0u));
        e.set_files_total(j.value("files_total", 0u));
        e.set_bytes_done(j.value("bytes_done", int64_t{0}));
        e.set_bytes_total(j.value("bytes_total", int64_t{0}));
        e.set_bytes_per_s(j.value("bytes_per_s", 0.0));
      } else {
        e.set_line(line);
        if (line.find("error") != std::string::npos) last_error = line;
      }
      core->Push(std::move(e));
    };
    SpawnOptions so;
    so.argv = std::move(argv);
    so.env = std::move(env);
    so.on_output = [&](std::string_view chunk) {
      std::lock_guard<std::mutex> lock(mu);
      pending.append(chunk);
      for (size_t nl; (nl = pending.find('\n')) != std::string::npos;) {
        const std::string line = pending.substr(0, nl);
        pending.erase(0, nl + 1);
        on_line(line);
      }
    };
    auto child = Subprocess::Spawn(so);
    if (!child.ok()) {
      core->Close(grpc::Status(grpc::StatusCode::INTERNAL,
                               "cannot start " + so.argv[0] + ": " + child.status().message()));
      return;
    }
    // Until it ends; the caller going away stops it (a rerun resumes).
    std::optional<ExitStatus> st;
    while (!(st = (*child)->Poll())) {
      if (core->over()) {
        (*child)->Terminate(std::chrono::milliseconds(3000));
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    (void)(*child)->Wait(Deadline::AfterMs(5000));
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!pending.empty()) on_line(pending);
      pending.clear();
    }
    done.set_finished(true);
    done.set_ok(st->success() && have_done);
    if (!done.ok()) {
      done.set_error(last_error.empty() ? "octet pull ended: " + st->ToString() : last_error);
    }
    core->Push(std::move(done));
    core->Close(grpc::Status::OK);
  }

  ModelServiceDeps d_;
};

}  // namespace

std::unique_ptr<grpc::Service> MakeModelService(ModelServiceDeps deps) {
  return std::make_unique<ModelServiceImpl>(std::move(deps));
}

}  // namespace octet::agent
