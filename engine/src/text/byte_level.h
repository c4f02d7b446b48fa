// The GPT-2 byte-level alphabet: every byte value is written as one printable
// Unicode character so that a vocabulary of byte strings can be stored as JSON
// text. Bytes 0x21..0x7E, 0xA1..0xAC and 0xAE..0xFF stand for themselves
// (U+0021.., U+00A1.., U+00AE..); the other 68 bytes (controls, space, 0x7F..0xA0,
// 0xAD) map to U+0100.. U+0143 in byte order ("Ġ" = U+0120 is the space 0x20).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace octet::engine::text {

// The code point that stands for `byte`.
uint32_t ByteToCodePoint(uint8_t byte);
// The byte that code point `cp` stands for; -1 when `cp` is not in the alphabet.
int CodePointToByte(uint32_t cp);

// "hello world" -> "helloĠworld" (UTF-8 of the mapped characters).
std::string BytesToByteLevel(std::string_view bytes);
// The inverse: the bytes a byte-level string stands for, or nullopt when some
// character of `text` is not in the alphabet (or `text` is not valid UTF-8).
std::optional<std::string> ByteLevelToBytes(std::string_view text);

}  // namespace octet::engine::text
