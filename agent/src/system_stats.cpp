#include "octet/agent/system_stats.h"

#include <unistd.h>

#include <charconv>

#include "octet/base/file_util.h"

namespace octet::agent {
namespace {

// The next whitespace-separated unsigned number in `s` from `*pos`; false when none.
bool NextNumber(std::string_view s, size_t* pos, uint64_t* out) {
  size_t i = *pos;
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
  size_t j = i;
  while (j < s.size() && s[j] >= '0' && s[j] <= '9') ++j;
  if (j == i) return false;
  auto r = std::from_chars(s.data() + i, s.data() + j, *out);
  if (r.ec != std::errc()) return false;
  *pos = j;
  return true;
}

std::string_view Line(std::string_view text, size_t* pos) {
  const size_t start = *pos;
  size_t end = text.find('\n', start);
  if (end == std::string_view::npos) end = text.size();
  *pos = end + 1;
  return text.substr(start, end - start);
}

}  // namespace

Result<CpuTimes> ParseProcStat(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    std::string_view line = Line(text, &pos);
    if (line.substr(0, 4) != "cpu ") continue;
    // user nice system idle iowait irq softirq steal [guest guest_nice]
    uint64_t v[8] = {};
    size_t p = 4;
    int n = 0;
    while (n < 8 && NextNumber(line, &p, &v[n])) ++n;
    if (n < 4) return DataLossError("stat: short 'cpu' line");
    CpuTimes t;
    t.busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
    t.total = t.busy + v[3] + v[4];
    return t;
  }
  return DataLossError("stat: no 'cpu' line");
}

Result<CpuTimes> ReadCpuTimes(const std::string& path) {
  OCTET_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  auto t = ParseProcStat(text);
  if (!t.ok()) return t.status().WithContext(path);
  return t;
}

double CpuBusyFraction(const CpuTimes& earlier, const CpuTimes& later) {
  if (later.total <= earlier.total || later.busy < earlier.busy) return 0.0;
  const double f = static_cast<double>(later.busy - earlier.busy) /
                   static_cast<double>(later.total - earlier.total);
  return f < 0 ? 0 : (f > 1 ? 1 : f);
}

Result<std::vector<InterfaceByteCounters>> ParseNetDev(std::string_view text) {
  std::vector<InterfaceByteCounters> out;
  size_t pos = 0;
  int line_no = 0;
  while (pos < text.size()) {
    std::string_view line = Line(text, &pos);
    ++line_no;
    if (line_no <= 2) continue;  // headers
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    std::string_view name = line.substr(0, colon);
    while (!name.empty() && name.front() == ' ') name.remove_prefix(1);
    // rx: bytes packets errs drop fifo frame compressed multicast; tx: bytes ...
    uint64_t v[9] = {};
    size_t p = colon + 1;
    int n = 0;
    while (n < 9 && NextNumber(line, &p, &v[n])) ++n;
    if (n < 9) return DataLossError("net/dev: short line " + std::to_string(line_no));
    out.push_back({std::string(name), v[0], v[8]});
  }
  return out;
}

Result<std::vector<InterfaceByteCounters>> ReadNetDev(const std::string& path) {
  OCTET_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  auto r = ParseNetDev(text);
  if (!r.ok()) return r.status().WithContext(path);
  return r;
}

Result<uint64_t> ReadProcessRssBytes(pid_t pid) {
  const std::string path = "/proc/" + std::to_string(pid) + "/status";
  OCTET_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  size_t pos = 0;
  while (pos < text.size()) {
    std::string_view line = Line(text, &pos);
    if (line.substr(0, 6) != "VmRSS:") continue;
    size_t p = 6;
    uint64_t kib = 0;
    if (!NextNumber(line, &p, &kib)) break;
    return kib * 1024;
  }
  return uint64_t{0};  // kernel threads and zombies have no VmRSS
}

Result<double> ReadProcessCpuSeconds(pid_t pid) {
  const std::string path = "/proc/" + std::to_string(pid) + "/stat";
  OCTET_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  // The command name (field 2) is in parentheses and may hold spaces: skip past the last ')'.
  const size_t close = text.rfind(')');
  if (close == std::string::npos) return DataLossError(path + ": no ')'");
  // Fields from 3 on, space separated: state(3) ... utime(14) stime(15).
  std::string_view rest = std::string_view(text).substr(close + 1);
  uint64_t utime = 0, stime = 0;
  int field = 2;
  size_t p = 0;
  while (p < rest.size() && field < 15) {
    while (p < rest.size() && rest[p] == ' ') ++p;
    ++field;
    if (field == 14 || field == 15) {
      uint64_t v = 0;
      if (!NextNumber(rest, &p, &v))
        return DataLossError(path + ": bad field " + std::to_string(field));
      (field == 14 ? utime : stime) = v;
    } else {
      while (p < rest.size() && rest[p] != ' ') ++p;
    }
  }
  if (field < 15) return DataLossError(path + ": short");
  const long ticks = ::sysconf(_SC_CLK_TCK);
  return static_cast<double>(utime + stime) / static_cast<double>(ticks > 0 ? ticks : 100);
}

}  // namespace octet::agent
