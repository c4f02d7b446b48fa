// Test double for process supervision: stands in for `octet worker` / `octet
// route` in agent and session tests. It is not a product feature.
//
// It prints "fake-worker argv: <args...>" and "fake-worker env OCTET_JOB_ID=<id>"
// (and "fake-worker env NCCL_IB_HCA=<v>" when that is set),
// for each "PORT:FD" in OCTET_RENDEZVOUS_FDS (a rendezvous socket handed to
// rank 0) "fake-worker rendezvous PORT listening=1|0" (1: FD is a listening
// socket bound to PORT), then follows the --fake-* words among its arguments, in order:
//   --fake-lines=N        print N numbered lines ("line 1" ..)
//   --fake-error=TEXT     print "error: TEXT"
//   --fake-figures=JSON   print "@octet-figures JSON"
//   --fake-ignore-term    ignore SIGTERM (the supervisor must escalate to SIGKILL)
//   --fake-sleep          sleep until killed
//   --fake-wait-ms=N      sleep N milliseconds
//   --fake-exit=CODE      exit with CODE (default 0 at the end)
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
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
  if (const char* hca = std::getenv("NCCL_IB_HCA"))
    std::printf("fake-worker env NCCL_IB_HCA=%s\n", hca);
  if (const char* fds = std::getenv("OCTET_RENDEZVOUS_FDS")) {
    std::string list = fds;
    size_t start = 0;
    while (start < list.size()) {
      const size_t end = std::min(list.find(',', start), list.size());
      const std::string entry = list.substr(start, end - start);
      start = end + 1;
      const size_t colon = entry.find(':');
      if (colon == std::string::npos) continue;
      const int port = std::atoi(entry.substr(0, colon).c_str());
      const int fd = std::atoi(entry.substr(colon + 1).c_str());
      int listening = 0;
      socklen_t len = sizeof listening;
      sockaddr_in a{};
      socklen_t alen = sizeof a;
      const bool ok = ::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) == 0 &&
                      listening && ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &alen) == 0 &&
                      ntohs(a.sin_port) == port;
      std::printf("fake-worker rendezvous %d listening=%d\n", port, ok ? 1 : 0);
    }
  }
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
