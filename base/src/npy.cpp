#include "octet/base/npy.h"

#include <cstring>

#include "octet/base/file_util.h"

namespace octet {
namespace {

size_t ElementSize(const std::string& d) {
  if (d == "f4" || d == "i4" || d == "u4") return 4;
  if (d == "f8" || d == "i8" || d == "u8") return 8;
  if (d == "u1" || d == "i1" || d == "b1") return 1;
  if (d == "f2" || d == "i2" || d == "u2") return 2;
  return 0;
}

// Finds the value text after 'key': in the header dict.
bool FindValue(const std::string& h, const std::string& key, std::string* out) {
  size_t p = h.find("'" + key + "'");
  if (p == std::string::npos) return false;
  p = h.find(':', p);
  if (p == std::string::npos) return false;
  ++p;
  while (p < h.size() && h[p] == ' ') ++p;
  if (p >= h.size()) return false;
  size_t e;
  if (h[p] == '\'') {
    e = h.find('\'', p + 1);
    if (e == std::string::npos) return false;
    *out = h.substr(p + 1, e - p - 1);
  } else if (h[p] == '(') {
    e = h.find(')', p);
    if (e == std::string::npos) return false;
    *out = h.substr(p + 1, e - p - 1);
  } else {
    e = h.find_first_of(",}", p);
    if (e == std::string::npos) return false;
    *out = h.substr(p, e - p);
  }
  return true;
}

std::string Header(const std::string& descr, const std::vector<int64_t>& shape) {
  std::string dims;
  for (size_t i = 0; i < shape.size(); ++i) {
    dims += std::to_string(shape[i]);
    if (shape.size() == 1 || i + 1 < shape.size()) dims += ",";
    if (i + 1 < shape.size()) dims += " ";
  }
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" + dims + "), }";
  // magic(6) + version(2) + len(2) + dict + '\n' padded to a multiple of 64.
  size_t total = 10 + dict.size() + 1;
  size_t pad = (64 - total % 64) % 64;
  dict.append(pad, ' ');
  dict += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  const uint16_t len = static_cast<uint16_t>(dict.size());
  out += static_cast<char>(len & 0xff);
  out += static_cast<char>(len >> 8);
  out += dict;
  return out;
}

template <typename T>
T Load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

}  // namespace

int64_t NpyArray::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<float> NpyArray::AsFloat() const {
  const int64_t n = numel();
  std::vector<float> out(static_cast<size_t>(n));
  const size_t es = ElementSize(dtype);
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* p = data.data() + i * es;
    if (dtype == "f4") out[i] = Load<float>(p);
    else if (dtype == "f8") out[i] = static_cast<float>(Load<double>(p));
    else if (dtype == "i4") out[i] = static_cast<float>(Load<int32_t>(p));
    else if (dtype == "i8") out[i] = static_cast<float>(Load<int64_t>(p));
    else if (dtype == "u1") out[i] = static_cast<float>(*p);
    else out[i] = 0;
  }
  return out;
}

std::vector<int64_t> NpyArray::AsInt64() const {
  const int64_t n = numel();
  std::vector<int64_t> out(static_cast<size_t>(n));
  const size_t es = ElementSize(dtype);
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* p = data.data() + i * es;
    if (dtype == "i4") out[i] = Load<int32_t>(p);
    else if (dtype == "i8") out[i] = Load<int64_t>(p);
    else if (dtype == "u1") out[i] = *p;
    else if (dtype == "f4") out[i] = static_cast<int64_t>(Load<float>(p));
    else if (dtype == "f8") out[i] = static_cast<int64_t>(Load<double>(p));
    else out[i] = 0;
  }
  return out;
}

Result<NpyArray> ParseNpy(const std::string& b, const std::string& what) {
  if (b.size() < 10 || std::memcmp(b.data(), "\x93NUMPY", 6) != 0) {
    return DataLossError(what + ": not a .npy file (bad magic)");
  }
  const uint8_t major = static_cast<uint8_t>(b[6]);
  size_t header_len, header_start;
  if (major == 1) {
    header_len = static_cast<uint8_t>(b[8]) | (static_cast<size_t>(static_cast<uint8_t>(b[9])) << 8);
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (b.size() < 12) return DataLossError(what + ": truncated .npy header");
    header_len = 0;
    for (int i = 0; i < 4; ++i) header_len |= static_cast<size_t>(static_cast<uint8_t>(b[8 + i])) << (8 * i);
    header_start = 12;
  } else {
    return DataLossError(what + ": unsupported .npy version " + std::to_string(major));
  }
  if (header_start + header_len > b.size()) return DataLossError(what + ": truncated .npy header");
  const std::string h = b.substr(header_start, header_len);
  std::string descr, fortran, shape;
  if (!FindValue(h, "descr", &descr) || !FindValue(h, "fortran_order", &fortran) ||
      !FindValue(h, "shape", &shape)) {
    return DataLossError(what + ": malformed .npy header '" + h + "'");
  }
  if (fortran != "False") return InvalidArgumentError(what + ": Fortran-order .npy is not supported");
  if (descr.size() < 2 || descr[0] == '>') return InvalidArgumentError(what + ": big-endian .npy is not supported");
  NpyArray a;
  a.dtype = (descr[0] == '<' || descr[0] == '|' || descr[0] == '=') ? descr.substr(1) : descr;
  const size_t es = ElementSize(a.dtype);
  if (es == 0) return InvalidArgumentError(what + ": unsupported .npy dtype '" + descr + "'");
  size_t i = 0;
  while (i < shape.size()) {
    while (i < shape.size() && (shape[i] == ' ' || shape[i] == ',')) ++i;
    if (i >= shape.size()) break;
    size_t j = i;
    while (j < shape.size() && shape[j] >= '0' && shape[j] <= '9') ++j;
    if (j == i) return DataLossError(what + ": malformed .npy shape '(" + shape + ")'");
    a.shape.push_back(std::stoll(shape.substr(i, j - i)));
    i = j;
  }
  const size_t data_start = header_start + header_len;
  const size_t need = static_cast<size_t>(a.numel()) * es;
  if (b.size() - data_start < need) {
    return DataLossError(what + ": .npy data is " + std::to_string(b.size() - data_start) +
                         " bytes, the shape needs " + std::to_string(need));
  }
  a.data.assign(b.begin() + static_cast<std::ptrdiff_t>(data_start),
                b.begin() + static_cast<std::ptrdiff_t>(data_start + need));
  return a;
}

Result<NpyArray> ReadNpy(const std::string& path) {
  OCTET_ASSIGN_OR_RETURN(std::string bytes, ReadFileToString(path));
  return ParseNpy(bytes, path);
}

std::string NpyBytesF32(const std::vector<int64_t>& shape, const float* data) {
  std::string out = Header("<f4", shape);
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  out.append(reinterpret_cast<const char*>(data), static_cast<size_t>(n) * 4);
  return out;
}

std::string NpyBytesI32(const std::vector<int64_t>& shape, const int32_t* data) {
  std::string out = Header("<i4", shape);
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  out.append(reinterpret_cast<const char*>(data), static_cast<size_t>(n) * 4);
  return out;
}

Status WriteNpyF32(const std::string& path, const std::vector<int64_t>& shape, const float* data) {
  return WriteFileAtomic(path, NpyBytesF32(shape, data));
}

}  // namespace octet
