#include "octet/base/mem_info.h"

#include <charconv>

#include "octet/base/file_util.h"

namespace octet {

Result<MemInfo> ParseMemInfo(std::string_view text) {
  MemInfo m;
  bool have_total = false;
  bool have_available = false;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    const std::string_view key = line.substr(0, colon);
    if (key != "MemTotal" && key != "MemAvailable") continue;
    size_t i = colon + 1;
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    uint64_t kib = 0;
    const auto r = std::from_chars(line.data() + i, line.data() + line.size(), kib);
    if (r.ec != std::errc() || r.ptr == line.data() + i) continue;
    if (key == "MemTotal") {
      m.total_bytes = kib * 1024;
      have_total = true;
    } else {
      m.available_bytes = kib * 1024;
      have_available = true;
    }
  }
  if (!have_total || !have_available) {
    return DataLossError("meminfo: MemTotal or MemAvailable missing");
  }
  return m;
}

Result<MemInfo> ReadMemInfo(const std::string& path) {
  OCTET_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  auto m = ParseMemInfo(text);
  if (!m.ok()) return m.status().WithContext(path);
  return m;
}

}  // namespace octet
