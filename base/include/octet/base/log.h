// Logging shared by every library and program.
//
//   OCTET_LOG(INFO) << "loaded " << n << " tensors from " << path;
//
// One line per message on stderr: "I 20:43:01.123 [tag] file.cpp:42] text".
// The level threshold comes from OCTET_LOG_LEVEL (debug|info|warning|error,
// default info) or SetLogLevel(). A process tag ("rank 2", "agent n3") set with
// SetLogTag() tells multi-process logs apart. A sink can replace stderr (the
// GUI and tests capture lines this way). Thread-safe: a line is formatted in
// the calling thread and written whole under one mutex.
#pragma once

#include <functional>
#include <sstream>
#include <string>
#include <string_view>

namespace octet {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
// Parses "debug", "info", "warning"/"warn", "error"; false when unknown.
bool ParseLogLevel(std::string_view text, LogLevel* out);
void SetLogTag(std::string tag);

using LogSink = std::function<void(LogLevel level, std::string_view line)>;
// Replaces the stderr sink; an empty function restores it.
void SetLogSink(LogSink sink);

namespace internal {
class LogMessage {
 public:
  LogMessage(LogLevel level, const char* file, int line);
  ~LogMessage();
  LogMessage(const LogMessage&) = delete;
  LogMessage& operator=(const LogMessage&) = delete;
  std::ostream& stream() { return stream_; }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};
bool LogEnabled(LogLevel level);
}  // namespace internal

}  // namespace octet

#define OCTET_LOG_LEVEL_DEBUG ::octet::LogLevel::kDebug
#define OCTET_LOG_LEVEL_INFO ::octet::LogLevel::kInfo
#define OCTET_LOG_LEVEL_WARNING ::octet::LogLevel::kWarning
#define OCTET_LOG_LEVEL_ERROR ::octet::LogLevel::kError

#define OCTET_LOG(severity)                                          \
  if (!::octet::internal::LogEnabled(OCTET_LOG_LEVEL_##severity)) {  \
  } else                                                             \
    ::octet::internal::LogMessage(OCTET_LOG_LEVEL_##severity, __FILE__, __LINE__).stream()
