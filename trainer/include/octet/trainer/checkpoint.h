// Checkpoints: a Hugging Face model folder plus the training state, written so
// that a crash at any moment leaves the previous checkpoint whole.
//
//   OUT/checkpoints/step-000100/
//       config.json           GptConfig::ToJson (model_type "nanochat")
//       model.safetensors     F32 weights, parameter names as the fixtures'
//       tokenizer.json        (and tokenizer_config.json) copied from the data
//       optimizer.safetensors "<param>.exp_avg", ".exp_avg_sq", ".momentum_buffer"
//       trainer_state.json    step, loader position, the run's settings
//   OUT/checkpoints/latest    the name of the newest complete checkpoint
//
// A checkpoint is written into a temporary folder (every file fsynced), which
// is renamed into place; only then is `latest` replaced (atomically). Older
// checkpoints beyond `keep` are removed afterwards. ExportModel writes the
// plain model folder (config, weights, tokenizer) — what `octet generate
// --model OUT` loads — each file atomically.
#pragma once

#include <cstdint>
#include <string>

#include "octet/base/status.h"
#include "octet/trainer/gpt_model.h"
#include "octet/trainer/optimizer.h"
#include "octet/trainer/token_shards.h"

namespace octet::trainer {

struct CheckpointState {
  int64_t step = 0;           // optimizer steps completed
  LoaderPosition loader;      // where the next step's data starts
  std::string settings_json;  // the run's settings (a JSON object), checked on resume
};

// `tokenizer_dir` (may be empty): folder whose tokenizer.json /
// tokenizer_config.json are copied when present.
Status SaveCheckpoint(const std::string& out_dir, GptModel& model, Optimizer& optimizer,
                      const CheckpointState& state, const std::string& tokenizer_dir, int keep);

// The newest complete checkpoint folder under OUT/checkpoints (NotFound when
// there is none).
Result<std::string> LatestCheckpoint(const std::string& out_dir);

// Loads weights, optimizer state and training state from a checkpoint folder.
// The model and optimizer must have the checkpoint's shapes and set-up.
Status LoadCheckpoint(const std::string& checkpoint_dir, GptModel& model, Optimizer& optimizer,
                      CheckpointState* state);

Status ExportModel(const std::string& dir, const GptModel& model, const std::string& tokenizer_dir);

}  // namespace octet::trainer
