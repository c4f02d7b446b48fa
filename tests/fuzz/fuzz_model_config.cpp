// config.json (and the same parser's generation/quant keys): any bytes give a
// config or an error, never a crash, a hang or an allocation from an unbounded
// size.
#include <cstddef>
#include <cstdint>
#include <string>

#include "octet/engine/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto c = octet::engine::ParseModelConfig(text, "fuzz/config.json");
  if (c.ok()) {
    // What the loader computes from a config it accepted.
    (void)octet::engine::RopeInvFreq(*c);
  }
  return 0;
}
