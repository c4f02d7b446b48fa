#include "octet/trainer/model_io.h"

#include "octet/base/file_util.h"
#include "octet/trainer/gpt_config.h"
#include "safetensors_f32.h"

namespace octet::trainer {
namespace {

Status SaveBuffer(const GptModel& model, std::span<const float> buffer, const std::string& path) {
  std::vector<internal::F32TensorRef> refs;
  for (const auto& t : model.tensors()) refs.push_back({t.name, t.shape, buffer.data() + t.offset});
  return WriteFileAtomic(path, internal::SafetensorsBytesF32(refs));
}

}  // namespace

Status LoadWeights(GptModel& model, const std::string& path) {
  OCTET_ASSIGN_OR_RETURN(auto tensors, internal::ReadSafetensorsF32(path));
  for (const auto& t : model.tensors()) {
    auto it = tensors.find(t.name);
    if (it == tensors.end()) return NotFoundError(path + ": tensor '" + t.name + "' is missing");
    if (it->second.shape != t.shape) {
      auto str = [](const std::vector<int64_t>& s) {
        std::string r = "[";
        for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
        return r + "]";
      };
      return InvalidArgumentError(path + ": tensor '" + t.name + "' has shape " +
                                  str(it->second.shape) + ", the model expects " + str(t.shape));
    }
    std::copy(it->second.data.begin(), it->second.data.end(), model.param(t));
  }
  if (tensors.size() != model.tensors().size()) {
    for (const auto& [name, t] : tensors) {
      if (!model.Find(name)) {
        return InvalidArgumentError(path + ": unexpected tensor '" + name +
                                    "' (not a parameter of this model)");
      }
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
