#include "octet/app/local_instance.h"

#include <chrono>
#include <filesystem>
#include <regex>

#include "octet/base/file_util.h"

namespace octet::app {

Result<std::vector<std::string>> InstanceSpec::Argv() const {
  std::string bin = octet_binary;
  if (bin.empty()) {
    OCTET_ASSIGN_OR_RETURN(std::string self, SelfExecutablePath());
    bin = (std::filesystem::path(self).parent_path() / "octet").string();
  }
  std::error_code ec;
  if (!std::filesystem::exists(bin, ec)) return NotFoundError(bin + ": the octet program is not there");
  std::vector<std::string> argv = {bin};
  if (kind == Kind::kInference) {
    if (model_dir.empty()) return InvalidArgumentError("no model folder chosen");
    if (tp < 1 || tp > 64) return InvalidArgumentError("TP degree must be in 1..64");
    argv.insert(argv.end(), {"serve", "--model", model_dir, "--tp", std::to_string(tp),
                             "--transport", transport, "--algo", algo, "--host", host, "--port",
                             "0", "--grpc-port", "off", "--slots", std::to_string(num_slots)});
    if (!served_name.empty()) argv.insert(argv.end(), {"--served-model-name", served_name});
    if (context > 0) argv.insert(argv.end(), {"--context", std::to_string(context)});
  } else {
    if (policy_file.empty()) return InvalidArgumentError("no routing policy file chosen");
    argv.insert(argv.end(), {"route", "--policy", policy_file, "--host", host, "--port", "0"});
  }
  return argv;
}

Result<std::unique_ptr<LocalInstance>> LocalInstance::Start(const InstanceSpec& spec,
                                                            LineFn on_line, ReadyFn on_ready) {
  OCTET_ASSIGN_OR_RETURN(std::vector<std::string> argv, spec.Argv());
  std::unique_ptr<LocalInstance> inst(new LocalInstance);
  inst->spec_ = spec;
  inst->on_line_ = std::move(on_line);
  inst->on_ready_ = std::move(on_ready);
  SpawnOptions o;
  o.argv = argv;
  LocalInstance* self = inst.get();
  o.on_output = [self](std::string_view chunk) { self->OnOutput(chunk); };
  OCTET_ASSIGN_OR_RETURN(inst->process_, Subprocess::Spawn(o));
  return inst;
}

LocalInstance::~LocalInstance() {
  if (process_ && !exit_) Stop(3000);
}

void LocalInstance::OnOutput(std::string_view chunk) {
  static const std::regex kServing(R"(on (http://[0-9A-Za-z.:\[\]-]+:[0-9]+))");
  std::vector<std::string> lines;
  std::string ready_url;
  {
    std::lock_guard<std::mutex> lock(mu_);
    partial_.append(chunk);
    size_t eol;
    while ((eol = partial_.find('\n')) != std::string::npos) {
      std::string line = partial_.substr(0, eol);
      partial_.erase(0, eol + 1);
      if (line.find("error") != std::string::npos) last_error_ = line;
      std::smatch m;
      if (base_url_.empty() && line.find("serving") != std::string::npos &&
          std::regex_search(line, m, kServing)) {
        base_url_ = m[1].str();
        ready_url = base_url_;
      }
      lines.push_back(std::move(line));
    }
  }
  for (const std::string& l : lines) {
    if (on_line_) on_line_(l);
  }
  if (!ready_url.empty() && on_ready_) on_ready_(ready_url);
}

std::string LocalInstance::base_url() const {
  std::lock_guard<std::mutex> lock(mu_);
  return base_url_;
}

std::string LocalInstance::last_error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_error_;
}

std::optional<ExitStatus> LocalInstance::Poll() {
  if (!exit_ && process_) exit_ = process_->Poll();
  return exit_;
}

ExitStatus LocalInstance::Stop(int grace_ms) {
  if (!exit_ && process_) exit_ = process_->Terminate(std::chrono::milliseconds(grace_ms));
  return exit_.value_or(ExitStatus{});
}

}  // namespace octet::app
