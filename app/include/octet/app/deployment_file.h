// The deployment file (`octet deploy`, resources/deploy/example-deployment.yaml):
// ParseDeployment reads the YAML and validates it like a routing policy —
// every error as FILE:LINE:COL, unknown keys with the nearest known one
// suggested, the router's YAML guard against alias bombs first. Nothing here
// talks to a node: placement and running a deployment are in deployment.h,
// which includes this. Kept apart so that the parser builds on its own:
// deployment_file.cpp needs only base and the router's YAML guard and schema
// checker (yaml_checker.h, the routing policy's too); the fuzz target
// `deployment` compiles it without the agent client.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "octet/base/status.h"

namespace octet::app {

struct DeploymentError {
  std::string file;
  int line = 0;  // 1-based; 0 when unknown
  int column = 0;
  std::string message;
  std::string ToString() const;  // "FILE:LINE:COL: message"
};

struct DeployInstanceSpec {
  std::string name;   // replicas are NAME-0, NAME-1, ...
  std::string model;  // folder path on the nodes (inside their model roots)
  int tp = 1;
  int replicas = 1;
  std::vector<std::string> nodes;  // optional: tp * replicas node names, replica by replica
  // As `octet serve` takes them ("" / 0: its defaults).
  std::string transport = "tcp";  // tcp | verbs | shm (shm: every rank on one host)
  std::string algorithm = "auto";
  std::string kv_memory;  // "4GiB"
  int64_t kv_memory_bytes = 0;
  std::string kv_dtype = "f32";
  int num_slots = 4;  // --slots (not `slots`: Qt reserves that word)
  int context = 0;    // 0: the model's, at most 4096
  std::string speculative = "off";
  int draft_tokens = 0;
  std::string backend;
  int threads = 0;
  std::string served_model_name;
  int line = 0, column = 0;  // where the instance was written
};

struct DeployRouterSpec {
  bool present = false;
  std::string policy;  // absolute path (relative ones resolved against the file's folder)
  std::string node;    // "" : placed
  int port = 0;        // 0: any free port
  int line = 0, column = 0;
};

struct Deployment {
  std::string source_file;
  int version = 1;
  std::string name;
  std::vector<DeployInstanceSpec> instances;
  DeployRouterSpec router;
  int replica_count() const;
  int node_count() const;  // sum of tp * replicas
  const DeployInstanceSpec* Find(std::string_view instance) const;
};

struct DeploymentParseResult {
  std::shared_ptr<const Deployment> deployment;  // null when any error
  std::vector<DeploymentError> errors;           // sorted by line and column
  bool ok() const { return deployment != nullptr; }
  Status status() const;  // InvalidArgument listing every error, one per line
};

DeploymentParseResult ParseDeployment(std::string_view yaml, const std::string& file_name);
// Reads and parses; a missing file is one error at 0:0.
DeploymentParseResult LoadDeploymentFile(const std::string& path);

}  // namespace octet::app
