// Test double for process supervision: stands in for `octet worker` / `octet
// route` in agent and session tests. It is not a product feature.
//
// It prints "fake-worker argv: <args...>" and "fake-worker env OCTET_JOB_ID=<id>",
// then follows the --fake-* words among its arguments, in order:
//   --fake-lines=N        print N numbered lines ("line 1" ..)
//   --fake-error=TEXT     print "error: TEXT"
//   --fake-figures=JSON   print "@octet-figures JSON"
//   --fake-ignore-term    ignore SIGTERM (the supervisor must escalate to SIGKILL)
//   --fake-sleep          sleep until killed
//   --fake-wait-ms=N      sleep N milliseconds
//   --fake-exit=CODE      exit with CODE (default 0 at the end)
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

int main(int argc, char** argv) {
  std::string all;
  for (int i = 1; i < argc; ++i) all += std::string(i > 1 ? " " : "") + argv[i];
  std::printf("fake-worker argv: %s\n", all.c_str());
  const char* job = std::getenv("OCTET_JOB_ID");
  std::printf("fake-worker env OCTET_JOB_ID=%s\n", job ? job : "");
  std::fflush(stdout);
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* prefix) { return a.substr(std::strlen(prefix)); };
    if (a.rfind("--fake-lines=", 0) == 0) {
      const int n = std::atoi(value("--fake-lines=").c_str());
      for (int k = 1; k <= n; ++k) std::printf("line %d\n", k);
    } else if (a.rfind("--fake-error=", 0) == 0) {
      std::printf("error: %s\n", value("--fake-error=").c_str());
    } else if (a.rfind("--fake-figures=", 0) == 0) {
      std::printf("@octet-figures %s\n", value("--fake-figures=").c_str());
    } else if (a == "--fake-ignore-term") {
      ::signal(SIGTERM, SIG_IGN);
    } else if (a.rfind("--fake-wait-ms=", 0) == 0) {
      std::fflush(stdout);
      ::usleep(static_cast<useconds_t>(std::atoi(value("--fake-wait-ms=").c_str())) * 1000);
    } else if (a == "--fake-sleep") {
      std::fflush(stdout);
      for (;;) ::pause();
    } else if (a.rfind("--fake-exit=", 0) == 0) {
      std::fflush(stdout);
      return std::atoi(value("--fake-exit=").c_str());
    }
    std::fflush(stdout);
  }
  return 0;
}
