// Little-endian serialisation of the small set-up messages exchanged over the
// control mesh (hello, roster, transport addresses, votes). A reader that runs
// past the end stays failed (ok() == false) and returns zeros.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace octet::collectives {

class WireWriter {
 public:
  WireWriter& U8(uint8_t v) { return Raw(&v, 1); }
  WireWriter& U32(uint32_t v) { return Raw(&v, 4); }
  WireWriter& U64(uint64_t v) { return Raw(&v, 8); }
  WireWriter& I64(int64_t v) { return Raw(&v, 8); }
  WireWriter& Str(std::string_view s) {
    U64(s.size());
    out_.append(s.data(), s.size());
    return *this;
  }
  WireWriter& Raw(const void* p, size_t n) {
    out_.append(static_cast<const char*>(p), n);  // hosts are little-endian (x86-64, aarch64)
    return *this;
  }
  const std::string& str() const { return out_; }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

class WireReader {
 public:
  explicit WireReader(std::string_view in) : in_(in) {}
  uint8_t U8() { return Get<uint8_t>(); }
  uint32_t U32() { return Get<uint32_t>(); }
  uint64_t U64() { return Get<uint64_t>(); }
  int64_t I64() { return Get<int64_t>(); }
  std::string Str() {
    const uint64_t n = U64();
    if (!ok_ || n > in_.size() - pos_) {
      ok_ = false;
      return {};
    }
    std::string s(in_.substr(pos_, n));
    pos_ += n;
    return s;
  }
  bool Raw(void* p, size_t n) {
    if (!ok_ || n > in_.size() - pos_) {
      ok_ = false;
      std::memset(p, 0, n);
      return false;
    }
    std::memcpy(p, in_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  bool ok() const { return ok_; }
  bool at_end() const { return pos_ == in_.size(); }

 private:
  template <typename T>
  T Get() {
    T v{};
    Raw(&v, sizeof v);
    return v;
  }
  std::string_view in_;
  size_t pos_ = 0;
  bool ok_ = true;
};

}  // namespace octet::collectives
