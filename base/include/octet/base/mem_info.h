// This machine's memory as the kernel reports it in /proc/meminfo: what the
// agent publishes, and what the engine may take for optional copies (the
// NVFP4 tile copy) without pushing the machine into swap or the OOM killer.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "octet/base/status.h"

namespace octet {

struct MemInfo {
  uint64_t total_bytes = 0;      // MemTotal
  uint64_t available_bytes = 0;  // MemAvailable (what can be allocated without swapping)
};
// Parses /proc/meminfo text ("MemTotal:  16318284 kB"); an error when MemTotal
// or MemAvailable is missing (never a guess).
Result<MemInfo> ParseMemInfo(std::string_view text);
Result<MemInfo> ReadMemInfo(const std::string& path = "/proc/meminfo");

}  // namespace octet
