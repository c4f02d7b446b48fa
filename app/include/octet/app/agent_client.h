// A client of one octet-agent: every call of the v1 wire API as a C++ call
// returning plain values (cluster_types.h) or an octet::Status that names the
// agent ("agent 127.0.0.1:47100: unauthenticated: wrong cluster token").
//
// Unary calls block the calling thread until the reply or the deadline, so a
// GUI calls them from a worker thread (ClusterSession does). Streams run on a
// thread owned by the returned AgentStream and call back on that thread;
// destroying the handle cancels the stream and joins the thread.
//
// The connection is made lazily and re-made after failures with a short
// backoff (200 ms .. 1 s), so a restarted agent is reachable again within
// about a second. Thread-safe: one client may be shared by many threads.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "octet/app/cluster_types.h"
#include "octet/base/deadline.h"
#include "octet/base/status.h"

namespace octet::app {

struct AgentEndpoint {
  std::string address;          // "host:port" or "unix:/path"
  std::string token;            // the cluster token
  std::string tls_ca_pem;       // non-empty: TLS, verifying the agent against this CA
  std::string tls_server_name;  // the name in the agent's certificate (default: the host)
};

// A running server stream. Destroying it cancels the call and joins its thread.
class AgentStream {
 public:
  virtual ~AgentStream() = default;
  // Asks the stream to end; the end callback follows with CANCELLED.
  virtual void Cancel() = 0;
  // Whether the end callback has run.
  virtual bool done() const = 0;
};

// A node's model store (models.proto): a Hugging Face hub cache inside the
// agent's model roots.
struct NodeModel {
  std::string repo, commit;
  std::vector<std::string> refs;
  std::string snapshot_dir;
  uint32_t files = 0;
  int64_t bytes = 0;
  uint32_t incomplete_files = 0, missing_files = 0;
};
struct NodeModels {
  std::string models_dir;  // "" : the agent has none
  std::vector<NodeModel> models;
};
struct PeerSnapshotFile {
  std::string path;
  int64_t size = 0;
  std::string blob;       // sha256 (LFS) or git blob id: the checksum it is named by
  std::string blob_path;  // on the peer, for ReadFile
};
struct PeerSnapshot {
  std::string commit;
  std::vector<PeerSnapshotFile> files;
};
struct ModelPullRequest {
  std::string repo, revision = "main";
  std::vector<std::string> include;
  std::string endpoint, hf_token;  // "" : the node's own
  std::string peer;                // copy from this agent instead of the Hub
  std::string peer_tls_ca_pem, peer_tls_server_name;
  uint32_t jobs = 0;
};
struct ModelPullEvent {
  std::string line;  // a progress or log line
  uint32_t files_done = 0, files_total = 0;
  int64_t bytes_done = 0, bytes_total = 0;
  double bytes_per_s = 0;
  bool finished = false, ok = false;  // the last event: the outcome
  std::string error, commit, snapshot_dir;
  int64_t network_bytes = 0;
  uint32_t files_downloaded = 0;
};

class AgentClient {
 public:
  // Makes the channel; no I/O happens until the first call.
  static Result<std::unique_ptr<AgentClient>> Create(const AgentEndpoint& endpoint);
  ~AgentClient();
  AgentClient(const AgentClient&) = delete;
  AgentClient& operator=(const AgentClient&) = delete;

  const std::string& address() const;

  Result<NodeFacts> GetFacts(Deadline deadline);
  Result<LinksReport> GetLinks(Deadline deadline);
  // Asks this agent to probe a peer's link-probe endpoint "host:port".
  // `bytes` 0 and `round_trips` 0 take the agent's defaults (16 MiB, 100).
  Result<LinkProbeResult> ProbeLink(const std::string& peer_probe_address, uint64_t bytes,
                                    uint32_t round_trips, Deadline deadline);
  Result<JobStartResult> StartJob(const JobSpec& spec, Deadline deadline);
  // True when the job was running and has now ended; false when it had already ended.
  Result<bool> StopJob(const std::string& job_id, Deadline deadline);
  Result<std::vector<JobStatus>> ListJobs(Deadline deadline);
  // The job's output so far (not following).
  Result<std::string> ReadLogs(const std::string& job_id, Deadline deadline);

  using SampleCallback = std::function<void(const TelemetrySample&)>;
  using TextCallback = std::function<void(const std::string&)>;
  using EndCallback = std::function<void(const Status&)>;
  // Telemetry every `interval_ms` (the agent clamps to 50..60000) until
  // cancelled or the agent goes away; `on_end` runs exactly once, last.
  std::unique_ptr<AgentStream> StreamTelemetry(uint32_t interval_ms, SampleCallback on_sample,
                                               EndCallback on_end);
  // A job's output from the start; with `follow`, until the job ends.
  std::unique_ptr<AgentStream> StreamLogs(const std::string& job_id, bool follow,
                                          TextCallback on_text, EndCallback on_end);

  // The models in the node's store.
  Result<NodeModels> ListModels(Deadline deadline);
  // The files of REPO@REVISION in the node's store, for copying them.
  Result<PeerSnapshot> GetSnapshot(const std::string& repo, const std::string& revision,
                                   Deadline deadline);
  // A file inside the agent's model roots from `offset`, chunk by chunk to
  // on_data (an error from it cancels the call). Blocks until the end.
  Status ReadFile(const std::string& path, int64_t offset,
                  const std::function<Status(const char*, size_t)>& on_data, Deadline deadline);
  // Has the agent pull a repo into its store (from the Hub, or from
  // request.peer's copy); events on this thread, the last one the outcome.
  // Blocks until the pull ends, the agent goes away, or *cancel is set.
  Result<ModelPullEvent> PullModel(const ModelPullRequest& request,
                                   const std::function<void(const ModelPullEvent&)>& on_event,
                                   const std::atomic<bool>* cancel);

 private:
  AgentClient() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace octet::app
