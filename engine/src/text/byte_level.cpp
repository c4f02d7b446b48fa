#include "text/byte_level.h"

#include <array>

#include "text/utf8.h"

namespace octet::engine::text {
namespace {

struct Tables {
  std::array<uint32_t, 256> byte_to_cp{};
  std::array<int16_t, 0x144> cp_to_byte{};  // every mapped code point is < U+0144
  Tables() {
    cp_to_byte.fill(-1);
    uint32_t next_extra = 0x100;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      byte_to_cp[b] = printable ? static_cast<uint32_t>(b) : next_extra++;
      cp_to_byte[byte_to_cp[b]] = static_cast<int16_t>(b);
    }
  }
};

const Tables& GetTables() {
  static const Tables tables;
  return tables;
}

}  // namespace

uint32_t ByteToCodePoint(uint8_t byte) { return GetTables().byte_to_cp[byte]; }

int CodePointToByte(uint32_t cp) {
  const Tables& t = GetTables();
  return cp < t.cp_to_byte.size() ? t.cp_to_byte[cp] : -1;
}

std::string BytesToByteLevel(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) AppendUtf8(&out, ByteToCodePoint(b));
  return out;
}

std::optional<std::string> ByteLevelToBytes(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    uint32_t cp;
    const int len = DecodeUtf8Char(text.substr(i), &cp);
    if (len == 0) return std::nullopt;
    const int b = CodePointToByte(cp);
    if (b < 0) return std::nullopt;
    out.push_back(static_cast<char>(b));
    i += static_cast<size_t>(len);
  }
  return out;
}

}  // namespace octet::engine::text
