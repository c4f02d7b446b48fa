// octet.v1.ModelService (models.proto), served by AgentServer: what this
// node's model store holds, the files of a snapshot, a file of the model
// roots streamed to a peer, and pulls into the store.
//
// The store is a Hugging Face hub cache (models--ORG--NAME/{blobs,snapshots,
// refs}) at AgentConfig::models_dir, which lies inside the model roots, so
// a pulled snapshot is a model folder jobs accept. A pull runs
// `octet pull REPO --cache-dir STORE` as a child process (from the Hub, or
// `--from-peer` another agent's copy over this same authenticated API) and
// streams its progress lines back.
//
// Internal to the agent library: agent_server.cpp builds it with its token
// check and background threads.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace octet::agent {

struct ModelServiceDeps {
  // The token check every method starts with (AgentServer::Impl::Authorize).
  std::function<grpc::Status(grpc::CallbackServerContext*, const char*)> authorize;
  // Runs blocking work off gRPC's threads; joined at shutdown.
  std::function<void(std::function<void()>)> run_background;
  std::vector<std::string> model_roots;
  std::string models_dir;     // "" : no store (pulls refused)
  std::string octet_binary;   // runs `pull`
  std::string cluster_token;  // lets a pull child authenticate to a peer agent
  // A stream (file read, pull events) whose reader takes nothing this long
  // ends with DEADLINE_EXCEEDED and its work stops (AgentConfig::stream_stall_ms).
  std::chrono::milliseconds stream_stall{60'000};
};

std::unique_ptr<grpc::Service> MakeModelService(ModelServiceDeps deps);

}  // namespace octet::agent
