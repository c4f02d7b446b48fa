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

 private:
  AgentClient() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace octet::app
