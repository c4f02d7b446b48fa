// Routing policy YAML: any bytes give a policy or a list of errors, within
// bounded memory (aliases are refused past their expansion limit).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "octet/router/policy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view yaml(reinterpret_cast<const char*>(data), size);
  (void)octet::router::ParsePolicy(yaml, "fuzz/policy.yaml");
  return 0;
}
