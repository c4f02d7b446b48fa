// Internal, TEMPORARY: a minimal float32-only safetensors reader and writer so
// the trainer can load the fixtures and write checkpoints before the engine's
// public one (octet/engine/safetensors.h: SafetensorsFile, SafetensorsWriter)
// is merged. Replace every use with the engine's when it lands; nothing
// outside trainer/src includes this.
//
// Reading checks what the format requires (see FIELD-NOTES.md "Model files"):
// header length within the file and under 100 MB, JSON object, every tensor
// F32 with end − begin = numel·4, offsets inside the data and contiguous
// without holes or overlap, no trailing bytes. Errors name the file, the
// tensor and the byte offset.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "octet/base/status.h"

namespace octet::trainer::internal {

struct F32Tensor {
  std::vector<int64_t> shape;
  std::vector<float> data;
};

Result<std::map<std::string, F32Tensor>> ReadSafetensorsF32(const std::string& path);

struct F32TensorRef {
  std::string name;
  std::vector<int64_t> shape;
  const float* data = nullptr;  // numel floats
};

// The whole file's bytes (header padded with spaces to a multiple of 8,
// "__metadata__": {"format": "pt"} plus `metadata`), tensors in the given order.
std::string SafetensorsBytesF32(const std::vector<F32TensorRef>& tensors,
                                const std::map<std::string, std::string>& metadata = {});

}  // namespace octet::trainer::internal
