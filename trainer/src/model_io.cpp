#include "octet/trainer/model_io.h"

#include <cstring>

#include "octet/base/file_util.h"
#include "octet/engine/safetensors.h"
#include "octet/kernels/weight.h"
#include "octet/trainer/gpt_config.h"

namespace octet::trainer {
namespace {

Status SaveBuffer(const GptModel& model, std::span<const float> buffer, const std::string& path) {
  engine::SafetensorsWriter writer;
  writer.SetMetadata("format", "pt");
  for (const auto& t : model.tensors()) {
    OCTET_RETURN_IF_ERROR(writer.Add(t.name, engine::DType::kF32, t.shape, buffer.data() + t.offset,
                                     t.numel * int64_t{sizeof(float)}));
  }
  return writer.Write(path);
}

// Copies a F32, BF16 or F16 tensor into `out` (numel floats) as float32.
Status CopyAsF32(const engine::TensorInfo& info, float* out) {
  const int64_t n = info.numel();
  switch (info.dtype) {
    case engine::DType::kF32:
      std::memcpy(out, info.data, static_cast<size_t>(n) * sizeof(float));
      return Status::Ok();
    case engine::DType::kBF16:
    case engine::DType::kF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, info.data + 2 * i, 2);
        out[i] = info.dtype == engine::DType::kBF16 ? kernels::Bf16ToF32(h) : kernels::F16ToF32(h);
      }
      return Status::Ok();
    default:
      return InvalidArgumentError(info.file + ": tensor '" + info.name + "' is " +
                                  std::string(engine::DTypeName(info.dtype)) +
                                  "; the trainer reads F32, BF16 or F16");
  }
}

}  // namespace

Status LoadWeights(GptModel& model, const std::string& path) {
  OCTET_ASSIGN_OR_RETURN(engine::SafetensorsFile file, engine::SafetensorsFile::Open(path));
  for (const auto& t : model.tensors()) {
    const engine::TensorInfo* info = file.Find(t.name);
    if (!info) return NotFoundError(path + ": tensor '" + t.name + "' is missing");
    if (info->shape != t.shape) {
      return InvalidArgumentError(path + ": tensor '" + t.name + "' has shape " +
                                  info->ShapeString() + ", the model expects " +
                                  engine::ShapeString(t.shape));
    }
    OCTET_RETURN_IF_ERROR(CopyAsF32(*info, model.param(t)));
  }
  for (const auto& info : file.tensors()) {
    if (!model.Find(info.name)) {
      return InvalidArgumentError(path + ": unexpected tensor '" + info.name +
                                  "' (not a parameter of this model)");
    }
  }
  return Status::Ok();
}

Status SaveWeights(const GptModel& model, const std::string& path) {
  return SaveBuffer(model, model.params(), path);
}

Status SaveGradients(const GptModel& model, const std::string& path) {
  return SaveBuffer(model, model.grads(), path);
}

Result<std::unique_ptr<GptModel>> LoadModelDir(const std::string& dir,
                                               kernels::KernelBackend* backend, int sequence_len) {
  OCTET_ASSIGN_OR_RETURN(GptConfig config, GptConfig::Load(JoinPath(dir, "config.json")));
  if (sequence_len > 0) config.sequence_len = sequence_len;
  OCTET_ASSIGN_OR_RETURN(auto model, GptModel::Create(config, backend));
  OCTET_RETURN_IF_ERROR(LoadWeights(*model, JoinPath(dir, "model.safetensors")));
  return model;
}

}  // namespace octet::trainer
