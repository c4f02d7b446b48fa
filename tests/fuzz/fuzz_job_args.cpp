// The agent's check of a job's arguments (agent/src/job_arguments.cpp), as a
// caller holding the cluster token reaches it: the input's first byte picks
// the job kind, its first line is a path the job names (a model, a policy),
// the other lines are the job's extra arguments ("@ROOT" stands for the model
// root, so that paths inside it are reached). Any arguments are refused with a
// message or come back as "--name" / "--name=value" words (no value can read
// as a flag); a path is accepted only inside the root — the root is a folder
// made here, with a symlink in it that leads out.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "octet/agent/job_arguments.h"

namespace {

namespace fs = std::filesystem;

void RemoveRoot();

// root/model/config.json, root/policy.yaml, root/data/, root/out -> /tmp;
// removed when the process exits (remove_all takes the link, not /tmp).
const std::string& Root() {
  static const std::string root = [] {
    const fs::path r =
        fs::temp_directory_path() / ("octet-fuzz-job-args-" + std::to_string(::getpid()));
    fs::create_directories(r / "model");
    fs::create_directories(r / "data");
    std::ofstream(r / "model" / "config.json") << "{}";
    std::ofstream(r / "policy.yaml") << "pools: {}\n";
    std::error_code ec;
    fs::create_directory_symlink("/tmp", r / "out", ec);
    return fs::canonical(r).string();
  }();
  // Registered once `root` is made, so that it runs before root's destructor.
  static const bool removed_at_exit = std::atexit(RemoveRoot) == 0;
  (void)removed_at_exit;
  return root;
}

void RemoveRoot() {
  std::error_code ec;
  fs::remove_all(Root(), ec);
}

std::string Expand(std::string s) {
  for (size_t at; (at = s.find("@ROOT")) != std::string::npos;) s.replace(at, 5, Root());
  return s;
}

bool Inside(const std::string& path, const std::string& root) {
  return path == root || path.rfind(root + "/", 0) == 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace octet::agent;
  if (size == 0) return 0;
  const std::string& root = Root();
  const auto kind = static_cast<JobKind>(data[0] % 3);
  std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::vector<std::string> lines;
  while (lines.size() < 64) {
    const size_t nl = in.find('\n');
    lines.push_back(Expand(std::string(in.substr(0, nl))));
    if (nl == std::string_view::npos) break;
    in.remove_prefix(nl + 1);
  }
  // The first line: a path the job names.
  auto resolved = ResolveInsideRoots(lines[0], {root}, "model");
  if (resolved.ok() && !Inside(*resolved, root)) std::abort();  // a path outside the roots
  if (!resolved.ok() && resolved.status().message().empty()) std::abort();
  // The rest: the job's extra arguments.
  const std::vector<std::string> args(lines.begin() + 1, lines.end());
  auto checked = CheckExtraArgs(kind, args, {root});
  if (!checked.ok()) {
    if (checked.status().message().empty()) std::abort();
    return 0;
  }
  for (const std::string& a : *checked) {
    if (a.size() < 3 || a.rfind("--", 0) != 0) std::abort();  // not one flag word
  }
  if (checked->size() > args.size()) std::abort();
  (void)IsAddressOfThisNode(lines[0]);
  return 0;
}
