// Small pieces of text that the code driving jobs through agents (remote
// instances, deployments) writes about agents and their jobs. Internal to app/.
#pragma once

#include <cstdint>
#include <string>

#include "octet/app/cluster_types.h"
#include "octet/base/host_port.h"

namespace octet::app {

// The host part of an agent's address, where its jobs' ports are reached
// ("unix:..." agents are on this machine).
inline std::string HostOfAgent(const std::string& address) {
  if (address.rfind("unix:", 0) == 0) return "127.0.0.1";
  std::string host;
  uint16_t port = 0;
  if (!SplitHostPort(address, &host, &port).ok()) return address;
  return host;
}

// The agent's account of a rank that ended: its exit reason and the last
// error line the worker printed (when the reason does not already hold it).
inline std::string EndedWhy(const JobStatus& job) {
  std::string why = job.exit_reason.empty() ? job.state : job.exit_reason;
  if (!job.last_error_line.empty() && why.find(job.last_error_line) == std::string::npos) {
    why += ": " + job.last_error_line;
  }
  return why;
}

}  // namespace octet::app
