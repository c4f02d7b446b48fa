// Figures the kernel publishes about this machine, read from /proc: memory,
// CPU time and per-interface byte counters. Each reader has a pure parser
// beside it so tests can feed it text from another machine.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "octet/base/mem_info.h"
#include "octet/base/status.h"

namespace octet::agent {

// Memory: MemInfo, ParseMemInfo and ReadMemInfo live in base (the engine
// reads them too).
using octet::MemInfo;
using octet::ParseMemInfo;
using octet::ReadMemInfo;

// Aggregate CPU time of all CPUs, in clock ticks, from the "cpu " line of /proc/stat.
struct CpuTimes {
  uint64_t busy = 0;   // user + nice + system + irq + softirq + steal
  uint64_t total = 0;  // busy + idle + iowait
};
Result<CpuTimes> ParseProcStat(std::string_view text);
Result<CpuTimes> ReadCpuTimes(const std::string& path = "/proc/stat");
// Fraction of all CPUs busy between two readings, 0..1 (0 when no time passed).
double CpuBusyFraction(const CpuTimes& earlier, const CpuTimes& later);

struct InterfaceByteCounters {
  std::string name;
  uint64_t rx_bytes = 0;
  uint64_t tx_bytes = 0;
};
// Parses /proc/net/dev text (two header lines, then "  eth0: rx_bytes ... tx_bytes ...").
Result<std::vector<InterfaceByteCounters>> ParseNetDev(std::string_view text);
Result<std::vector<InterfaceByteCounters>> ReadNetDev(const std::string& path = "/proc/net/dev");

// Resident memory (VmRSS) of one process, in bytes, from /proc/<pid>/status.
Result<uint64_t> ReadProcessRssBytes(pid_t pid);
// CPU time (user + system) a process has used, in seconds, from /proc/<pid>/stat.
Result<double> ReadProcessCpuSeconds(pid_t pid);

}  // namespace octet::agent
