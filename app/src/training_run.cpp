#include "octet/app/training_run.h"

#include <cstdlib>
#include <filesystem>
#include <regex>
#include <string>

#include "octet/base/json.h"

namespace octet::app {

Result<TrainingDataKind> ClassifyTrainingData(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (dir.empty()) return InvalidArgumentError("no training data folder chosen");
  if (!fs::is_directory(dir, ec)) return NotFoundError(dir + ": no such folder");
  if (fs::exists(fs::path(dir) / "meta.json", ec)) return TrainingDataKind::kPrepared;
  fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec);
  if (ec) return NotFoundError(dir + ": cannot read the folder: " + ec.message());
  for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) break;
    if (it->path().extension() == ".txt" && it->is_regular_file(ec)) return TrainingDataKind::kText;
  }
  return InvalidArgumentError(dir +
                              " holds neither prepared training data (meta.json, train-*.bin, "
                              "tokenizer.json from `octet train prepare`) nor .txt files");
}

Result<TrainingFigures> ParseTrainingFigures(std::string_view line) {
  if (!IsFiguresLine(line)) return InvalidArgumentError("not an @octet-figures line");
  const std::string_view text = line.substr(kFiguresPrefix.size());
  TrainingFigures f;
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    if (!j.is_object()) return InvalidArgumentError("@octet-figures: not a JSON object");
    if (j.value("kind", std::string()) != "training") {
      return InvalidArgumentError("@octet-figures: not a training line");
    }
    f.state = j.value("state", std::string());
    // Step counts are integers or the line is refused (a float is never cast).
    const auto step = [&](const char* key, int64_t fallback) -> Result<int64_t> {
      const std::optional<int64_t> v = IntegerMember(j, key, fallback);
      if (!v || *v < 0) {
        return InvalidArgumentError(std::string("@octet-figures: \"") + key +
                                    "\" must be a non-negative integer, not " + j.at(key).dump());
      }
      return *v;
    };
    if (j.contains("train_step")) {
      f.has_step = true;
      OCTET_ASSIGN_OR_RETURN(f.train_step, step("train_step", 0));
      OCTET_ASSIGN_OR_RETURN(f.train_total_steps, step("train_total_steps", 0));
      f.train_loss = j.value("train_loss", 0.0);
      f.train_tps = j.value("train_tps", 0.0);
      f.step_ms = j.value("step_ms", 0.0);
      f.compute_ms = j.value("compute_ms", 0.0);
      f.allreduce_ms = j.value("allreduce_ms", 0.0);
      f.allreduce_share = j.value("allreduce_share", 0.0);
      f.mfu = j.value("mfu", 0.0);
    }
    if (j.contains("val_step")) {
      f.has_val = true;
      OCTET_ASSIGN_OR_RETURN(f.val_step, step("val_step", 0));
      f.val_loss = j.value("val_loss", 0.0);
      f.val_bpb = j.value("val_bpb", -1.0);
    }
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgumentError(std::string("@octet-figures: ") + e.what());
  }
  return f;
}

bool FoldTrainingLogLine(std::string_view line_view, TrainingFigures* f) {
  // Numbers as printf writes them ("%.4f" of a diverged loss is "nan" or "inf").
  static const std::regex kStep(
      R"(^step ([0-9]+)/([0-9]+) \| loss (\S+) \| .*\| ([0-9.]+) tok/s \| ([0-9.]+) ms )"
      R"(\(compute ([0-9.]+), all-reduce wait ([0-9.]+), busy [0-9.]+\) \| mfu ([0-9.]+)%)");
  static const std::regex kEval(
      R"(^eval at step ([0-9]+) \| val loss (\S+)(?: \| ([0-9.]+) bits/byte)?)");
  const std::string line(line_view);
  std::smatch m;
  auto num = [](const std::ssub_match& s) { return std::strtod(s.str().c_str(), nullptr); };
  auto count = [](const std::ssub_match& s) { return std::strtoll(s.str().c_str(), nullptr, 10); };
  if (std::regex_search(line, m, kStep)) {
    f->has_step = true;
    f->train_step = count(m[1]);
    f->train_total_steps = count(m[2]);
    f->train_loss = num(m[3]);
    f->train_tps = num(m[4]);
    f->step_ms = num(m[5]);
    f->compute_ms = num(m[6]);
    f->allreduce_ms = num(m[7]);
    f->allreduce_share = f->step_ms > 0 ? f->allreduce_ms / f->step_ms : 0.0;
    f->mfu = num(m[8]) / 100.0;
  } else if (std::regex_search(line, m, kEval)) {
    f->has_val = true;
    f->val_step = count(m[1]);
    f->val_loss = num(m[2]);
    f->val_bpb = m[3].matched ? num(m[3]) : -1.0;
  } else {
    return false;
  }
  f->state = "running";
  return true;
}

void TrainingCurves::Add(const TrainingFigures& f) {
  latest_ = f;
  if (f.has_step) {
    if (f.train_total_steps > 0) total_steps_ = f.train_total_steps;
    if (train_loss_.empty() || f.train_step > train_loss_.back().step) {
      train_loss_.push_back({f.train_step, f.train_loss});
      train_tps_.push_back({f.train_step, f.train_tps});
    }
  }
  if (f.has_val && (val_loss_.empty() || f.val_step > val_loss_.back().step)) {
    val_loss_.push_back({f.val_step, f.val_loss});
  }
}

}  // namespace octet::app
