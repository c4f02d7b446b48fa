// The bench store's llama-benchy import (app/src/bench_report.cpp,
// ParseLlamaBenchyJson): any bytes give a run or an error with a message, and
// an imported run serialises again (the store keeps and shows it).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "octet/app/bench_store.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto run = octet::app::ParseLlamaBenchyJson(text, "fuzz.json");
  if (!run.ok()) {
    if (run.status().message().empty()) std::abort();
    return 0;
  }
  // What an import gives is stored and shown: it must serialise again.
  (void)octet::app::BenchRunToJson(*run);
  return 0;
}
