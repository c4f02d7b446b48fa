// tokenizer.json (+ tokenizer_config.json, whose chat template is detected):
// the input is split at the first NUL byte into the two documents. A tokenizer
// that loads must encode and decode a fixed text.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "octet/engine/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view all(reinterpret_cast<const char*>(data), size);
  const size_t nul = all.find('\0');
  const std::string_view tok = all.substr(0, nul);
  const std::string_view cfg = nul == std::string_view::npos ? std::string_view() : all.substr(nul + 1);
  auto t = octet::engine::Tokenizer::FromJson(tok, cfg, "fuzz/tokenizer.json");
  if (!t.ok()) return 0;
  const auto ids = t->Encode("Hello, wörld! 12345 \t\n<|im_start|>user", {});
  (void)t->Decode(ids, {});
  return 0;
}
