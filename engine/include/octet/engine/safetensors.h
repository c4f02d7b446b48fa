// safetensors files: reading (memory-mapped, every header field validated) and
// writing (streamed to a temporary file, then renamed into place).
//
// Format: u64 little-endian header length N, N bytes of JSON
// {name: {"dtype", "shape", "data_offsets": [begin, end)}, "__metadata__": {...}},
// then the tensor bytes. Offsets are relative to the data start. The reader
// rejects what the reference implementation rejects: a header over 100 MB,
// offsets out of bounds, overlapping or with holes, a size that is not
// numel x dtype size, trailing bytes. Errors name the file, the tensor and the
// byte offset.
//
// A CheckpointStore is a Hugging Face model folder's weights: one
// model.safetensors or shards listed in model.safetensors.index.json.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "octet/base/file_util.h"
#include "octet/base/status.h"

namespace octet::engine {

enum class DType : uint8_t {
  kF64,
  kF32,
  kF16,
  kBF16,
  kI64,
  kI32,
  kI16,
  kI8,
  kU64,
  kU32,
  kU16,
  kU8,
  kBool,
  kF8E4M3,
  kF8E5M2,
};

std::string_view DTypeName(DType d);  // "BF16", "F8_E4M3", ... (safetensors spelling)
Result<DType> ParseDType(std::string_view name);
int64_t DTypeSize(DType d);  // bytes per element

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;     // empty for a scalar
  const uint8_t* data = nullptr;  // into the mapping
  int64_t size_bytes = 0;
  int64_t file_offset = 0;  // absolute byte offset of the data in its file
  std::string file;         // path of the file holding it

  int64_t numel() const;
  std::string ShapeString() const;  // "[320, 64]"
};

std::string ShapeString(const std::vector<int64_t>& shape);

class SafetensorsFile {
 public:
  static Result<SafetensorsFile> Open(const std::string& path);

  const std::string& path() const { return file_.path(); }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* Find(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const MappedFile& mapping() const { return file_; }
  // Byte ranges of the data section (absolute file offsets, [first, second))
  // that no tensor of the header covers. A well-formed file has none; a file
  // whose header lost a tensor's entry has its bytes here, and the loader
  // names the missing tensor and points at them instead of refusing the file
  // for the gap.
  const std::vector<std::pair<int64_t, int64_t>>& unindexed() const { return unindexed_; }

 private:
  MappedFile file_;
  std::vector<TensorInfo> tensors_;
  std::vector<std::pair<int64_t, int64_t>> unindexed_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

class CheckpointStore {
 public:
  // `dir` holds model.safetensors, or model.safetensors.index.json and shards.
  static Result<std::unique_ptr<CheckpointStore>> Open(const std::string& dir);

  const TensorInfo* Find(std::string_view name) const;
  std::vector<const TensorInfo*> tensors() const;
  int64_t total_bytes() const;
  const std::vector<SafetensorsFile>& files() const { return files_; }

 private:
  std::vector<SafetensorsFile> files_;
  std::map<std::string, const TensorInfo*, std::less<>> by_name_;
};

// Writes a safetensors file. Tensors are written in the order added (callers
// add the widest dtypes first to keep every tensor naturally aligned; Write
// reorders by element size, widest first, to guarantee it). Data passed by
// pointer must stay valid until Write returns.
class SafetensorsWriter {
 public:
  void SetMetadata(const std::string& key, const std::string& value);

  // Borrowed bytes (`bytes` must equal numel x dtype size).
  Status Add(const std::string& name, DType dtype, std::vector<int64_t> shape, const void* data,
             int64_t bytes);
  // Owned bytes.
  Status AddOwned(const std::string& name, DType dtype, std::vector<int64_t> shape,
                  std::vector<uint8_t> bytes);
  // Float data stored as F32, BF16 or F16 (converted here, round to nearest even).
  Status AddFloat(const std::string& name, std::vector<int64_t> shape, const float* data,
                  DType stored);

  int64_t data_bytes() const;
  size_t size() const { return entries_.size(); }

  // Streams header and data to "<path>.tmp.<pid>", fsyncs, renames over path.
  Status Write(const std::string& path) const;

 private:
  struct Entry {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    const uint8_t* data;
    int64_t bytes;
    std::shared_ptr<std::vector<uint8_t>> owned;
  };
  std::vector<Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace octet::engine
