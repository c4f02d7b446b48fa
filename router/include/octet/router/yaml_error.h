// Where a setting sits in a YAML file, and one validation error about it.
// Shared by every YAML file octet reads (the routing policy, the deployment
// file); yaml_checker.h produces them. No yaml-cpp here, so the types can sit
// in public headers whose users never parse YAML.
#pragma once

#include <string>

namespace octet::router {

// 1-based; 0 when unknown.
struct SourceLocation {
  int line = 0;
  int column = 0;
};

// One validation error: ToString() is "FILE:LINE:COL: message".
struct YamlError {
  std::string file;
  int line = 0;
  int column = 0;
  std::string message;
  std::string ToString() const;
};

}  // namespace octet::router
