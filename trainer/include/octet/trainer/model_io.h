// Reading and writing a GptModel's tensors as safetensors, by parameter name
// (transformer.wte.weight, transformer.h.{i}.attn.c_q.weight, ..., lm_head.weight).
//
// A model folder is Hugging Face-shaped: config.json (GptConfig::ToJson) and
// model.safetensors (F32), as ../shared/fixtures/trainer holds and as
// checkpoints are written.
#pragma once

#include <memory>
#include <string>

#include "octet/base/status.h"
#include "octet/kernels/backend.h"
#include "octet/trainer/gpt_model.h"

namespace octet::trainer {

// Fills every parameter from an F32 safetensors file. Every model tensor must
// be present with its exact shape; extra tensors are an error too (a file for
// another model). Errors name the file and the tensor.
Status LoadWeights(GptModel& model, const std::string& path);

// Writes every parameter (or, for SaveGradients, every gradient) under its
// name as F32, atomically (temp file + fsync + rename).
Status SaveWeights(const GptModel& model, const std::string& path);
Status SaveGradients(const GptModel& model, const std::string& path);

// Opens a model folder: config.json + model.safetensors. `sequence_len`, when
// > 0, overrides the config's (a run may use longer or shorter sequences).
Result<std::unique_ptr<GptModel>> LoadModelDir(const std::string& dir,
                                               kernels::KernelBackend* backend,
                                               int sequence_len = 0);

}  // namespace octet::trainer
