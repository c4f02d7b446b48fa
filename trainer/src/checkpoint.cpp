#include "octet/trainer/checkpoint.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "octet/base/file_util.h"
#include "octet/base/json.h"
#include "octet/engine/safetensors.h"
#include "octet/trainer/model_io.h"

namespace octet::trainer {
namespace {

namespace fs = std::filesystem;

constexpr const char* kTokenizerFiles[] = {"tokenizer.json", "tokenizer_config.json"};

std::string StepName(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "step-%06lld", static_cast<long long>(step));
  return buf;
}

Status SyncDir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return InternalError(dir + ": cannot open to fsync");
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return InternalError(dir + ": fsync failed");
  return Status::Ok();
}

Status CopyTokenizer(const std::string& from_dir, const std::string& to_dir) {
  if (from_dir.empty()) return Status::Ok();
  for (const char* name : kTokenizerFiles) {
    const std::string src = JoinPath(from_dir, name);
    if (!PathExists(src)) continue;
    OCTET_ASSIGN_OR_RETURN(std::string text, ReadFileToString(src));
    OCTET_RETURN_IF_ERROR(WriteFileAtomic(JoinPath(to_dir, name), text));
  }
  return Status::Ok();
}

Status WriteModelFiles(const std::string& dir, const GptModel& model,
                       const std::string& tokenizer_dir) {
  OCTET_RETURN_IF_ERROR(WriteFileAtomic(JoinPath(dir, "config.json"), model.config().ToJson()));
  OCTET_RETURN_IF_ERROR(SaveWeights(model, JoinPath(dir, "model.safetensors")));
  return CopyTokenizer(tokenizer_dir, dir);
}

// Folders a checkpoint write leaves behind when its process dies mid-write:
// ".step-NNNNNN.tmp.PID" and ".step-NNNNNN.old.PID", whose PID no longer runs.
std::vector<std::string> StaleTemporaries(const std::string& root) {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string n = it->path().filename().string();
    if (n.rfind(".step-", 0) != 0) continue;
    size_t dot = n.rfind('.');
    if (dot == std::string::npos || dot == 0) continue;
    const std::string kind = n.substr(n.rfind('.', dot - 1) + 1, dot - n.rfind('.', dot - 1) - 1);
    if (kind != "tmp" && kind != "old") continue;
    const long pid = std::strtol(n.c_str() + dot + 1, nullptr, 10);
    if (pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH)) continue;
    out.push_back(it->path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

Status ExportModel(const std::string& dir, const GptModel& model,
                   const std::string& tokenizer_dir) {
  OCTET_RETURN_IF_ERROR(MakeDirs(dir));
  return WriteModelFiles(dir, model, tokenizer_dir);
}

Status SaveCheckpoint(const std::string& out_dir, GptModel& model, Optimizer& optimizer,
                      const CheckpointState& state, const std::string& tokenizer_dir, int keep) {
  const std::string root = JoinPath(out_dir, "checkpoints");
  OCTET_RETURN_IF_ERROR(MakeDirs(root));
  const std::string name = StepName(state.step);
  const std::string final_dir = JoinPath(root, name);
  const std::string tmp_dir = JoinPath(root, "." + name + ".tmp." + std::to_string(::getpid()));
  std::error_code ec;
  // What an earlier write left when its process died (a full disk, a kill).
  for (const std::string& stale : StaleTemporaries(root)) fs::remove_all(stale, ec);
  fs::remove_all(tmp_dir, ec);
  OCTET_RETURN_IF_ERROR(MakeDirs(tmp_dir));

  // A write that fails (a full disk) removes its temporary folder at once:
  // left behind, it would hold the space the next save needs.
  Status written = [&]() -> Status {
    OCTET_RETURN_IF_ERROR(WriteModelFiles(tmp_dir, model, tokenizer_dir));
    engine::SafetensorsWriter opt_writer;
    opt_writer.SetMetadata("format", "pt");
    for (const auto& t : optimizer.StateTensors()) {
      OCTET_RETURN_IF_ERROR(
          opt_writer.Add(t.name, engine::DType::kF32, t.shape, t.data, t.numel * 4));
    }
    OCTET_RETURN_IF_ERROR(opt_writer.Write(JoinPath(tmp_dir, "optimizer.safetensors")));
    nlohmann::ordered_json j;
    j["step"] = state.step;
    j["optimizer_steps"] = optimizer.steps_taken();
    j["loader"] = {{"epoch", state.loader.epoch}, {"offset", state.loader.offset}};
    j["settings"] = nlohmann::json::parse(state.settings_json.empty() ? "{}" : state.settings_json,
                                          nullptr, false);
    OCTET_RETURN_IF_ERROR(
        WriteFileAtomic(JoinPath(tmp_dir, "trainer_state.json"), j.dump(2) + "\n"));
    return SyncDir(tmp_dir);
  }();
  if (!written.ok()) {
    fs::remove_all(tmp_dir, ec);
    return written.WithContext("checkpoint " + name + " not saved (the previous one is kept)");
  }

  // Replace an older folder of the same step (a rerun after resume) only now.
  if (PathExists(final_dir)) {
    const std::string trash = JoinPath(root, "." + name + ".old." + std::to_string(::getpid()));
    fs::rename(final_dir, trash, ec);
    if (ec) return InternalError(final_dir + ": cannot move aside: " + ec.message());
    fs::remove_all(trash, ec);
  }
  fs::rename(tmp_dir, final_dir, ec);
  if (ec) return InternalError(tmp_dir + " -> " + final_dir + ": " + ec.message());
  OCTET_RETURN_IF_ERROR(SyncDir(root));
  OCTET_RETURN_IF_ERROR(WriteFileAtomic(JoinPath(root, "latest"), name + "\n"));

  // Keep the newest `keep` complete checkpoints.
  if (keep > 0) {
    std::vector<std::string> steps;
    for (const auto& e : fs::directory_iterator(root, ec)) {
      const std::string n = e.path().filename().string();
      if (e.is_directory() && n.rfind("step-", 0) == 0) steps.push_back(n);
    }
    std::sort(steps.begin(), steps.end());
    for (size_t i = 0; i + keep < steps.size(); ++i) {
      if (steps[i] != name) fs::remove_all(JoinPath(root, steps[i]), ec);
    }
  }
  return Status::Ok();
}

Result<std::string> LatestCheckpoint(const std::string& out_dir) {
  const std::string latest = JoinPath(JoinPath(out_dir, "checkpoints"), "latest");
  if (!PathExists(latest)) {
    const std::vector<std::string> stale = StaleTemporaries(JoinPath(out_dir, "checkpoints"));
    if (!stale.empty()) {
      return NotFoundError("no complete checkpoint in " + out_dir +
                           ": the first checkpoint "
                           "write was interrupted (it left " +
                           stale.front() +
                           ", which the next save removes); run without --resume to start "
                           "from step 0");
    }
    return NotFoundError("no checkpoint in " + out_dir + " (" + latest +
                         " is missing); run without --resume to start from step 0");
  }
  OCTET_ASSIGN_OR_RETURN(std::string name, ReadFileToString(latest));
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  if (name.rfind("step-", 0) != 0 || name.find('/') != std::string::npos) {
    return DataLossError(latest + ": does not name a checkpoint ('" + name + "')");
  }
  const std::string dir = JoinPath(JoinPath(out_dir, "checkpoints"), name);
  if (!IsDirectory(dir)) return DataLossError(latest + " names " + dir + ", which is missing");
  return dir;
}

Status LoadCheckpoint(const std::string& dir, GptModel& model, Optimizer& optimizer,
                      CheckpointState* state) {
  OCTET_ASSIGN_OR_RETURN(GptConfig config, GptConfig::Load(JoinPath(dir, "config.json")));
  const GptConfig& mc = model.config();
  if (config.n_layer != mc.n_layer || config.n_embd != mc.n_embd || config.n_head != mc.n_head ||
      config.n_kv_head != mc.n_kv_head || config.vocab_size != mc.vocab_size) {
    return InvalidArgumentError(dir + ": the checkpoint's model shape differs from this run's");
  }
  OCTET_RETURN_IF_ERROR(LoadWeights(model, JoinPath(dir, "model.safetensors")));
  const std::string opt_path = JoinPath(dir, "optimizer.safetensors");
  OCTET_ASSIGN_OR_RETURN(engine::SafetensorsFile file, engine::SafetensorsFile::Open(opt_path));
  auto wanted = optimizer.StateTensors();
  for (const auto& t : wanted) {
    const engine::TensorInfo* info = file.Find(t.name);
    if (!info) {
      return InvalidArgumentError(opt_path + ": '" + t.name +
                                  "' is missing (a checkpoint of another optimizer?)");
    }
    if (info->dtype != engine::DType::kF32 || info->numel() != t.numel) {
      return InvalidArgumentError(
          opt_path + ": '" + t.name + "' is " + std::string(engine::DTypeName(info->dtype)) +
          info->ShapeString() + ", expected F32 with " + std::to_string(t.numel) + " elements");
    }
    std::memcpy(t.data, info->data, static_cast<size_t>(t.numel) * sizeof(float));
  }
  if (file.tensors().size() != wanted.size()) {
    return InvalidArgumentError(opt_path + ": holds state for another optimizer set-up");
  }
  const std::string state_path = JoinPath(dir, "trainer_state.json");
  OCTET_ASSIGN_OR_RETURN(std::string text, ReadFileToString(state_path));
  try {
    const auto j = nlohmann::json::parse(text);
    // Counts: present and integers (a float is refused, not cast).
    const auto count = [&](const nlohmann::json& o, const char* key,
                           const char* path) -> Result<int64_t> {
      const std::optional<int64_t> v =
          o.is_object() && o.contains(key) ? IntegerMember(o, key, 0) : std::nullopt;
      if (!v) return DataLossError(state_path + ": " + path + " is missing or not an integer");
      return *v;
    };
    const nlohmann::json& loader = j.at("loader");
    OCTET_ASSIGN_OR_RETURN(state->step, count(j, "step", "step"));
    OCTET_ASSIGN_OR_RETURN(state->loader.epoch, count(loader, "epoch", "loader.epoch"));
    OCTET_ASSIGN_OR_RETURN(state->loader.offset, count(loader, "offset", "loader.offset"));
    state->settings_json = j.value("settings", nlohmann::json::object()).dump();
    OCTET_ASSIGN_OR_RETURN(const int64_t steps, count(j, "optimizer_steps", "optimizer_steps"));
    optimizer.set_steps_taken(steps);
  } catch (const nlohmann::json::exception& e) {
    return DataLossError(state_path + ": " + e.what());
  }
  return Status::Ok();
}

}  // namespace octet::trainer
