#include "octet/base/log.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "octet/base/thread_annotations.h"

namespace octet {
namespace {

LogLevel LevelFromEnv() {
  LogLevel level = LogLevel::kInfo;
  if (const char* env = std::getenv("OCTET_LOG_LEVEL")) ParseLogLevel(env, &level);
  return level;
}

std::atomic<int> g_level{static_cast<int>(LevelFromEnv())};

struct SinkState {
  Mutex mu;
  std::string tag GUARDED_BY(mu);
  LogSink sink GUARDED_BY(mu);
};
SinkState& State() {
  static SinkState* s = new SinkState;  // never destroyed: logging works during exit
  return *s;
}

char LevelChar(LogLevel l) {
  switch (l) {
    case LogLevel::kDebug: return 'D';
    case LogLevel::kInfo: return 'I';
    case LogLevel::kWarning: return 'W';
    case LogLevel::kError: return 'E';
  }
  return '?';
}

}  // namespace

void SetLogLevel(LogLevel level) { g_level.store(static_cast<int>(level)); }
LogLevel GetLogLevel() { return static_cast<LogLevel>(g_level.load()); }

bool ParseLogLevel(std::string_view t, LogLevel* out) {
  if (t == "debug") *out = LogLevel::kDebug;
  else if (t == "info") *out = LogLevel::kInfo;
  else if (t == "warning" || t == "warn") *out = LogLevel::kWarning;
  else if (t == "error") *out = LogLevel::kError;
  else return false;
  return true;
}

void SetLogTag(std::string tag) {
  SinkState& s = State();
  MutexLock lock(s.mu);
  s.tag = std::move(tag);
}

void SetLogSink(LogSink sink) {
  SinkState& s = State();
  MutexLock lock(s.mu);
  s.sink = std::move(sink);
}

namespace internal {

bool LogEnabled(LogLevel level) { return static_cast<int>(level) >= g_level.load(std::memory_order_relaxed); }

LogMessage::LogMessage(LogLevel level, const char* file, int line) : level_(level) {
  using namespace std::chrono;
  const auto now = system_clock::now();
  const std::time_t t = system_clock::to_time_t(now);
  const int ms = static_cast<int>(duration_cast<milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm tm{};
  localtime_r(&t, &tm);
  char ts[32];
  std::snprintf(ts, sizeof ts, "%02d:%02d:%02d.%03d", tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
  const char* base = std::strrchr(file, '/');
  base = base ? base + 1 : file;
  stream_ << LevelChar(level) << ' ' << ts << ' ';
  {
    SinkState& s = State();
    MutexLock lock(s.mu);
    if (!s.tag.empty()) stream_ << '[' << s.tag << "] ";
  }
  stream_ << base << ':' << line << "] ";
}

LogMessage::~LogMessage() {
  stream_ << '\n';
  const std::string line = stream_.str();
  SinkState& s = State();
  MutexLock lock(s.mu);
  if (s.sink) {
    s.sink(level_, std::string_view(line).substr(0, line.size() - 1));
  } else {
    std::fwrite(line.data(), 1, line.size(), stderr);
    std::fflush(stderr);
  }
}

}  // namespace internal
}  // namespace octet
