// The chat client's Server-Sent Events parser (app/src/chat_client.cpp,
// ChatStreamParser): any bytes from a server, cut into chunks at any points
// (the input's first byte seeds the cuts), give the same reply as the bytes
// fed at once, within bounded memory and without a crash.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "octet/app/chat_client.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const unsigned step = 1 + data[0] % 31;
  const std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  octet::app::ChatStreamParser whole, chunked;
  std::string pieces;
  const bool ok_whole = whole.Feed(in, nullptr);
  bool ok_chunked = true;
  for (size_t i = 0; i < in.size(); i += step) {
    ok_chunked &= chunked.Feed(in.substr(i, step), [&](const std::string& d) { pieces += d; });
  }
  if (ok_whole != ok_chunked && in.size() <= octet::app::ChatStreamParser::kMaxEventBytes) {
    std::abort();
  }
  // The chunking must not change what was understood.
  if (whole.reply().text != chunked.reply().text || chunked.reply().text != pieces ||
      whole.done() != chunked.done() ||
      whole.reply().finish_reason != chunked.reply().finish_reason ||
      whole.reply().prompt_tokens != chunked.reply().prompt_tokens ||
      whole.reply().completion_tokens != chunked.reply().completion_tokens) {
    std::abort();
  }
  if (whole.reply().prompt_tokens < 0 || whole.reply().completion_tokens < 0) std::abort();
  return 0;
}
