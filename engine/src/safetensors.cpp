#include "octet/engine/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include "octet/base/json.h"
#include "octet/kernels/weight.h"

namespace octet::engine {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the reference implementation's cap

struct DTypeEntry {
  DType dtype;
  const char* name;
  int64_t size;
};
constexpr DTypeEntry kDTypes[] = {
    {DType::kF64, "F64", 8},   {DType::kF32, "F32", 4},        {DType::kF16, "F16", 2},
    {DType::kBF16, "BF16", 2}, {DType::kI64, "I64", 8},        {DType::kI32, "I32", 4},
    {DType::kI16, "I16", 2},   {DType::kI8, "I8", 1},          {DType::kU64, "U64", 8},
    {DType::kU32, "U32", 4},   {DType::kU16, "U16", 2},        {DType::kU8, "U8", 1},
    {DType::kBool, "BOOL", 1}, {DType::kF8E4M3, "F8_E4M3", 1}, {DType::kF8E5M2, "F8_E5M2", 1},
};

std::string Errno(const std::string& what, const std::string& path) {
  return what + " '" + path + "': " + std::strerror(errno);
}

}  // namespace

std::string_view DTypeName(DType d) {
  for (const auto& e : kDTypes) {
    if (e.dtype == d) return e.name;
  }
  return "?";
}

Result<DType> ParseDType(std::string_view name) {
  for (const auto& e : kDTypes) {
    if (name == e.name) return e.dtype;
  }
  return InvalidArgumentError("unknown dtype '" + std::string(name) + "'");
}

int64_t DTypeSize(DType d) {
  for (const auto& e : kDTypes) {
    if (e.dtype == d) return e.size;
  }
  return 0;
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

std::string TensorInfo::ShapeString() const { return engine::ShapeString(shape); }

// ---- reader -----------------------------------------------------------------

Result<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  SafetensorsFile f;
  OCTET_ASSIGN_OR_RETURN(f.file_, MappedFile::Open(path));
  const uint64_t size = f.file_.size();
  if (size < 8) {
    return DataLossError(path + ": truncated safetensors file: " + std::to_string(size) +
                         " bytes, the header length at byte offset 0 needs 8");
  }
  uint64_t n;
  std::memcpy(&n, f.file_.data(), 8);  // little-endian hosts only (x86-64, aarch64)
  if (n > kMaxHeaderBytes) {
    return DataLossError(path + ": bad safetensors header: length " + std::to_string(n) +
                         " at byte offset 0 exceeds the " + std::to_string(kMaxHeaderBytes) +
                         "-byte cap");
  }
  if (8 + n > size) {
    return DataLossError(path + ": truncated safetensors file: the header (byte offsets 8.." +
                         std::to_string(8 + n) + ") runs past the end of the file (" +
                         std::to_string(size) + " bytes)");
  }
  const char* hbegin = reinterpret_cast<const char*>(f.file_.data() + 8);
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(hbegin, hbegin + n);
  } catch (const nlohmann::json::parse_error& e) {
    return DataLossError(path + ": bad safetensors header JSON at byte offset " +
                         std::to_string(8 + (e.byte > 0 ? e.byte - 1 : 0)) + ": " + e.what());
  } catch (const nlohmann::json::exception& e) {
    // Valid syntax the parser still refuses: a number beyond double's range.
    return DataLossError(path + ": unusable safetensors header JSON: " + e.what());
  }
  if (!header.is_object()) {
    return DataLossError(path + ": bad safetensors header at byte offset 8: not a JSON object");
  }
  const uint64_t data_start = 8 + n;
  const uint64_t data_size = size - data_start;
  struct Span {
    uint64_t begin, end;
    size_t index;
  };
  std::vector<Span> spans;
  try {
    for (auto it = header.begin(); it != header.end(); ++it) {
      const std::string& name = it.key();
      const nlohmann::json& v = it.value();
      if (name == "__metadata__") {
        if (!v.is_object()) return DataLossError(path + ": __metadata__ is not an object");
        for (auto m = v.begin(); m != v.end(); ++m) {
          f.metadata_[m.key()] =
              m.value().is_string() ? m.value().get<std::string>() : m.value().dump();
        }
        continue;
      }
      const std::string where = path + ": tensor '" + name + "'";
      if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") ||
          !v.contains("data_offsets")) {
        return DataLossError(where + ": header entry needs dtype, shape and data_offsets");
      }
      if (!v["dtype"].is_string()) return DataLossError(where + ": dtype is not a string");
      auto dt = ParseDType(v["dtype"].get<std::string>());
      if (!dt.ok()) return DataLossError(where + ": " + dt.status().message());
      TensorInfo t;
      t.name = name;
      t.dtype = *dt;
      t.file = path;
      if (!v["shape"].is_array()) return DataLossError(where + ": shape is not an array");
      for (const auto& d : v["shape"]) {
        if (!d.is_number_unsigned() || d.get<uint64_t>() > (uint64_t{1} << 48)) {
          return DataLossError(where + ": shape has an entry that is not a dimension");
        }
        t.shape.push_back(d.get<int64_t>());
      }
      const auto& off = v["data_offsets"];
      if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
          !off[1].is_number_unsigned()) {
        return DataLossError(where + ": data_offsets must be two unsigned integers");
      }
      const uint64_t b = off[0].get<uint64_t>(), e = off[1].get<uint64_t>();
      if (b > e) {
        return DataLossError(where + ": data_offsets [" + std::to_string(b) + ", " +
                             std::to_string(e) + ") end before they begin");
      }
      if (e > data_size) {
        return DataLossError(where + ": truncated file: data ends at byte offset " +
                             std::to_string(data_start + e) + " but the file has " +
                             std::to_string(size) + " bytes");
      }
      // numel x size without overflow: every dimension fits in the data size.
      uint64_t numel = 1;
      for (int64_t d : t.shape) {
        if (d != 0 && numel > data_size / static_cast<uint64_t>(d) + 1) {
          return DataLossError(where + ": shape " + t.ShapeString() + " is larger than the file");
        }
        numel *= static_cast<uint64_t>(d);
      }
      if (numel * DTypeSize(t.dtype) != e - b) {
        return DataLossError(where + ": " + std::to_string(e - b) + " bytes at byte offset " +
                             std::to_string(data_start + b) + " but shape " + t.ShapeString() +
                             " of " + std::string(DTypeName(t.dtype)) + " needs " +
                             std::to_string(numel * DTypeSize(t.dtype)));
      }
      t.data = f.file_.data() + data_start + b;
      t.size_bytes = static_cast<int64_t>(e - b);
      t.file_offset = static_cast<int64_t>(data_start + b);
      spans.push_back({b, e, f.tensors_.size()});
      f.tensors_.push_back(std::move(t));
    }
  } catch (const nlohmann::json::exception& e) {
    return DataLossError(path + ": bad safetensors header: " + e.what());
  }
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    return a.begin < b.begin || (a.begin == b.begin && a.end < b.end);
  });
  uint64_t expect = 0;
  for (const Span& s : spans) {
    const std::string& name = f.tensors_[s.index].name;
    if (s.begin < expect) {
      return DataLossError(path + ": tensor '" + name +
                           "' overlaps the previous tensor at byte offset " +
                           std::to_string(data_start + s.begin));
    }
    if (s.begin > expect) {  // bytes no header entry covers (Unindexed)
      f.unindexed_.push_back(
          {static_cast<int64_t>(data_start + expect), static_cast<int64_t>(data_start + s.begin)});
    }
    expect = s.end;
  }
  if (expect != data_size) {
    f.unindexed_.push_back(
        {static_cast<int64_t>(data_start + expect), static_cast<int64_t>(data_start + data_size)});
  }
  for (size_t i = 0; i < f.tensors_.size(); ++i) f.index_[f.tensors_[i].name] = i;
  return f;
}

const TensorInfo* SafetensorsFile::Find(std::string_view name) const {
  auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

Result<std::unique_ptr<CheckpointStore>> CheckpointStore::Open(const std::string& dir) {
  auto store = std::make_unique<CheckpointStore>();
  const std::string index_path = JoinPath(dir, "model.safetensors.index.json");
  const std::string single_path = JoinPath(dir, "model.safetensors");
  if (PathExists(index_path)) {
    OCTET_ASSIGN_OR_RETURN(std::string text, ReadFileToString(index_path));
    nlohmann::json index;
    try {
      index = nlohmann::json::parse(text);
    } catch (const nlohmann::json::parse_error& e) {
      return DataLossError(index_path + ": bad JSON at byte offset " + std::to_string(e.byte) +
                           ": " + e.what());
    } catch (const nlohmann::json::exception& e) {
      return DataLossError(index_path + ": unusable JSON: " + e.what());
    }
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
      return DataLossError(index_path + ": no \"weight_map\" object");
    }
    std::map<std::string, size_t> file_index;
    std::vector<std::pair<std::string, std::string>> wanted;
    for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
      if (!it.value().is_string())
        return DataLossError(index_path + ": weight_map values must be file names");
      const std::string file = it.value().get<std::string>();
      if (file.find('/') != std::string::npos || file == "..") {
        return DataLossError(index_path + ": shard name '" + file + "' must be a plain file name");
      }
      wanted.emplace_back(it.key(), file);
      if (!file_index.count(file)) {
        const size_t i = file_index.size();
        file_index[file] = i;
      }
    }
    store->files_.resize(file_index.size());
    for (const auto& [file, i] : file_index) {
      OCTET_ASSIGN_OR_RETURN(store->files_[i], SafetensorsFile::Open(JoinPath(dir, file)));
    }
    for (const auto& [name, file] : wanted) {
      const SafetensorsFile& f = store->files_[file_index[file]];
      const TensorInfo* t = f.Find(name);
      if (!t) {
        return DataLossError(index_path + ": tensor '" + name + "' is mapped to " + file +
                             " but that file does not hold it");
      }
      store->by_name_[name] = t;
    }
  } else if (PathExists(single_path)) {
    store->files_.resize(1);
    OCTET_ASSIGN_OR_RETURN(store->files_[0], SafetensorsFile::Open(single_path));
    for (const auto& t : store->files_[0].tensors()) store->by_name_[t.name] = &t;
  } else {
    return NotFoundError("no model.safetensors or model.safetensors.index.json in '" + dir + "'");
  }
  return store;
}

const TensorInfo* CheckpointStore::Find(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

std::vector<const TensorInfo*> CheckpointStore::tensors() const {
  std::vector<const TensorInfo*> out;
  for (const auto& [name, t] : by_name_) out.push_back(t);
  return out;
}

int64_t CheckpointStore::total_bytes() const {
  int64_t total = 0;
  for (const auto& [name, t] : by_name_) total += t->size_bytes;
  return total;
}

// ---- writer -----------------------------------------------------------------

void SafetensorsWriter::SetMetadata(const std::string& key, const std::string& value) {
  metadata_[key] = value;
}

Status SafetensorsWriter::Add(const std::string& name, DType dtype, std::vector<int64_t> shape,
                              const void* data, int64_t bytes) {
  if (name.empty() || name == "__metadata__")
    return InvalidArgumentError("bad tensor name '" + name + "'");
  for (const auto& e : entries_) {
    if (e.name == name) return AlreadyExistsError("tensor '" + name + "' added twice");
  }
  int64_t numel = 1;
  for (int64_t d : shape) {
    if (d < 0) return InvalidArgumentError("tensor '" + name + "': negative dimension");
    numel *= d;
  }
  if (numel * DTypeSize(dtype) != bytes) {
    return InvalidArgumentError("tensor '" + name + "': " + std::to_string(bytes) +
                                " bytes for shape " + ShapeString(shape) + " of " +
                                std::string(DTypeName(dtype)));
  }
  entries_.push_back(
      {name, dtype, std::move(shape), static_cast<const uint8_t*>(data), bytes, nullptr});
  return Status::Ok();
}

Status SafetensorsWriter::AddOwned(const std::string& name, DType dtype, std::vector<int64_t> shape,
                                   std::vector<uint8_t> bytes) {
  auto owned = std::make_shared<std::vector<uint8_t>>(std::move(bytes));
  OCTET_RETURN_IF_ERROR(
      Add(name, dtype, std::move(shape), owned->data(), static_cast<int64_t>(owned->size())));
  entries_.back().owned = std::move(owned);
  return Status::Ok();
}

Status SafetensorsWriter::AddFloat(const std::string& name, std::vector<int64_t> shape,
                                   const float* data, DType stored) {
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  std::vector<uint8_t> bytes(numel * DTypeSize(stored));
  switch (stored) {
    case DType::kF32:
      if (numel) std::memcpy(bytes.data(), data, numel * 4);
      break;
    case DType::kBF16:
    case DType::kF16:
      for (int64_t i = 0; i < numel; ++i) {
        const uint16_t h =
            stored == DType::kBF16 ? kernels::F32ToBf16(data[i]) : kernels::F32ToF16(data[i]);
        std::memcpy(bytes.data() + i * 2, &h, 2);
      }
      break;
    default:
      return InvalidArgumentError("tensor '" + name + "': AddFloat stores F32, BF16 or F16, not " +
                                  std::string(DTypeName(stored)));
  }
  return AddOwned(name, stored, std::move(shape), std::move(bytes));
}

int64_t SafetensorsWriter::data_bytes() const {
  int64_t total = 0;
  for (const auto& e : entries_) total += e.bytes;
  return total;
}

Status SafetensorsWriter::Write(const std::string& path) const {
  // Widest elements first keeps every tensor aligned to its element size.
  std::vector<const Entry*> order;
  for (const auto& e : entries_) order.push_back(&e);
  std::stable_sort(order.begin(), order.end(), [](const Entry* a, const Entry* b) {
    return DTypeSize(a->dtype) > DTypeSize(b->dtype);
  });
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata_.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata_) meta[k] = v;
    header["__metadata__"] = meta;
  }
  uint64_t offset = 0;
  for (const Entry* e : order) {
    header[e->name] = {{"dtype", std::string(DTypeName(e->dtype))},
                       {"shape", e->shape},
                       {"data_offsets", {offset, offset + static_cast<uint64_t>(e->bytes)}}};
    offset += e->bytes;
  }
  std::string text = header.dump();
  while ((8 + text.size()) % 8 != 0) text.push_back(' ');
  const uint64_t n = text.size();

  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return UnavailableError(Errno("cannot create", tmp));
  auto write_all = [&](const void* p, size_t len) -> bool {
    const uint8_t* b = static_cast<const uint8_t*>(p);
    while (len > 0) {
      const ssize_t w = ::write(fd, b, std::min<size_t>(len, 1 << 26));
      if (w < 0) {
        if (errno == EINTR) continue;
        return false;
      }
      b += w;
      len -= static_cast<size_t>(w);
    }
    return true;
  };
  bool ok = write_all(&n, 8) && write_all(text.data(), text.size());
  for (const Entry* e : order) {
    if (!ok) break;
    ok = write_all(e->data, static_cast<size_t>(e->bytes));
  }
  if (ok) ok = ::fsync(fd) == 0;
  const std::string err = ok ? "" : Errno("cannot write", tmp);
  ::close(fd);
  if (!ok) {
    ::unlink(tmp.c_str());
    return UnavailableError(err);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string e = Errno("cannot rename into", path);
    ::unlink(tmp.c_str());
    return UnavailableError(e);
  }
  return Status::Ok();
}

}  // namespace octet::engine
