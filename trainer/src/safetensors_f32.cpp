#include "safetensors_f32.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "octet/base/file_util.h"

namespace octet::trainer::internal {

Result<std::map<std::string, F32Tensor>> ReadSafetensorsF32(const std::string& path) {
  OCTET_ASSIGN_OR_RETURN(MappedFile file, MappedFile::Open(path));
  const uint8_t* bytes = file.data();
  const uint64_t size = file.size();
  if (size < 8)
    return DataLossError(path + ": " + std::to_string(size) +
                         " bytes, too short for a safetensors header");
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];
  constexpr uint64_t kMaxHeader = 100'000'000;
  if (header_len > kMaxHeader || header_len > size - 8) {
    return DataLossError(path + ": header length " + std::to_string(header_len) +
                         " does not fit the file (" + std::to_string(size) + " bytes)");
  }
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(reinterpret_cast<const char*>(bytes + 8),
                                   reinterpret_cast<const char*>(bytes + 8 + header_len));
  } catch (const nlohmann::json::exception& e) {
    return DataLossError(path + ": header at byte 8 is not valid JSON: " + e.what());
  }
  if (!header.is_object()) return DataLossError(path + ": header is not a JSON object");
  const uint64_t data_start = 8 + header_len;
  const uint64_t data_len = size - data_start;

  struct Span {
    uint64_t begin, end;
    std::string name;
  };
  std::vector<Span> spans;
  std::map<std::string, F32Tensor> out;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const std::string& name = it.key();
    const auto& e = it.value();
    const std::string where = path + ": tensor '" + name + "'";
    if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") ||
        !e.contains("data_offsets")) {
      return DataLossError(where + ": needs dtype, shape and data_offsets");
    }
    if (e["dtype"] != "F32") {
      return InvalidArgumentError(where + " has dtype " + e["dtype"].dump() +
                                  "; this reader takes F32 only");
    }
    F32Tensor t;
    int64_t numel = 1;
    if (!e["shape"].is_array()) return DataLossError(where + ": shape is not an array");
    for (const auto& d : e["shape"]) {
      if (!d.is_number_unsigned()) return DataLossError(where + ": bad dimension " + d.dump());
      t.shape.push_back(d.get<int64_t>());
      numel *= t.shape.back();
    }
    const auto& off = e["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
        !off[1].is_number_unsigned()) {
      return DataLossError(where + ": data_offsets must be [begin, end]");
    }
    const uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    if (begin > end || end > data_len) {
      return DataLossError(where + ": data_offsets [" + std::to_string(begin) + ", " +
                           std::to_string(end) + ") outside the " + std::to_string(data_len) +
                           " data bytes");
    }
    if (end - begin != static_cast<uint64_t>(numel) * 4) {
      return DataLossError(where + ": " + std::to_string(end - begin) + " bytes for " +
                           std::to_string(numel) + " F32 elements");
    }
    t.data.resize(numel);
    if (numel > 0) std::memcpy(t.data.data(), bytes + data_start + begin, numel * 4);
    spans.push_back({begin, end, name});
    out.emplace(name, std::move(t));
  }
  std::sort(spans.begin(), spans.end(),
            [](const Span& a, const Span& b) { return a.begin < b.begin; });
  uint64_t expect = 0;
  for (const auto& s : spans) {
    if (s.begin != expect) {
      return DataLossError(path + ": tensor '" + s.name + "' starts at data byte " +
                           std::to_string(s.begin) + ", expected " + std::to_string(expect) +
                           " (hole or overlap)");
    }
    expect = s.end;
  }
  if (expect != data_len) {
    return DataLossError(path + ": " + std::to_string(data_len - expect) +
                         " trailing bytes after the last tensor");
  }
  return out;
}

std::string SafetensorsBytesF32(const std::vector<F32TensorRef>& tensors,
                                const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header;
  nlohmann::ordered_json meta = {{"format", "pt"}};
  for (const auto& [k, v] : metadata) meta[k] = v;
  header["__metadata__"] = meta;
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    int64_t numel = 1;
    for (int64_t d : t.shape) numel *= d;
    header[t.name] = {{"dtype", "F32"},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + static_cast<uint64_t>(numel) * 4}}};
    offset += static_cast<uint64_t>(numel) * 4;
  }
  std::string json = header.dump();
  while (json.size() % 8 != 0) json.push_back(' ');
  std::string out;
  out.reserve(8 + json.size() + offset);
  const uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  out += json;
  for (const auto& t : tensors) {
    int64_t numel = 1;
    for (int64_t d : t.shape) numel *= d;
    out.append(reinterpret_cast<const char*>(t.data), numel * 4);
  }
  return out;
}

}  // namespace octet::trainer::internal
