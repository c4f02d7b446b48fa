#include "octet/base/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <atomic>
#include <poll.h>
#include <thread>

extern char** environ;

namespace octet {

std::string ExitStatus::ToString() const {
  if (exited) return "exit code " + std::to_string(code);
  const char* name = strsignal(signal);
  return "killed by signal " + std::to_string(signal) + (name ? std::string(" (") + name + ")" : "");
}

// Drains the child's output pipe on a thread. It stops at EOF (the child and
// every process that inherited the pipe are gone) or when told to through a
// self-pipe, so a grandchild that keeps the pipe open cannot block Wait().
struct Subprocess::Reader {
  int fd = -1;
  int stop_pipe[2] = {-1, -1};
  std::thread thread;
  std::atomic<bool> eof{false};
};

namespace {
ExitStatus Decode(int wstatus) {
  ExitStatus e;
  if (WIFEXITED(wstatus)) {
    e.exited = true;
    e.code = WEXITSTATUS(wstatus);
  } else if (WIFSIGNALED(wstatus)) {
    e.signal = WTERMSIG(wstatus);
  }
  return e;
}
}  // namespace

Result<std::unique_ptr<Subprocess>> Subprocess::Spawn(const SpawnOptions& o) {
  if (o.argv.empty()) return InvalidArgumentError("spawn: empty argv");

  // Everything the child needs is prepared before fork: after fork only
  // async-signal-safe calls are allowed.
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) {
    std::string_view kv(*e);
    const std::string_view key = kv.substr(0, kv.find('='));
    bool replaced = false;
    for (const auto& add : o.env) {
      if (std::string_view(add).substr(0, add.find('=')) == key) replaced = true;
    }
    if (!replaced) env_strings.emplace_back(kv);
  }
  for (const auto& add : o.env) env_strings.push_back(add);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = o.argv;
  std::vector<char*> argv;
  for (auto& s : argv_copy) argv.push_back(s.data());
  argv.push_back(nullptr);

  int pipefd[2] = {-1, -1};
  int outfd = -1;
  if (o.on_output) {
    if (::pipe2(pipefd, O_CLOEXEC) != 0) return UnavailableError(std::string("pipe: ") + std::strerror(errno));
  } else if (!o.output_file.empty()) {
    outfd = ::open(o.output_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (outfd < 0) {
      return UnavailableError("cannot open output file '" + o.output_file + "': " + std::strerror(errno));
    }
  }
  // An exec failure is reported through a CLOEXEC pipe: the parent reads errno.
  int errpipe[2];
  if (::pipe2(errpipe, O_CLOEXEC) != 0) return UnavailableError(std::string("pipe: ") + std::strerror(errno));

  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    int err = errno;
    for (int fd : {pipefd[0], pipefd[1], outfd, errpipe[0], errpipe[1]}) if (fd >= 0) ::close(fd);
    return ResourceExhaustedError(std::string("fork: ") + std::strerror(err));
  }
  if (pid == 0) {
    if (o.die_with_parent) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);
    }
    if (o.new_process_group) ::setpgid(0, 0);
    if (o.stdin_null) {
      int nul = ::open("/dev/null", O_RDONLY);
      if (nul >= 0) { ::dup2(nul, 0); ::close(nul); }
    }
    int target = pipefd[1] >= 0 ? pipefd[1] : outfd;
    if (target >= 0) {
      ::dup2(target, 1);
      ::dup2(target, 2);
    }
    if (!o.cwd.empty() && ::chdir(o.cwd.c_str()) != 0) {
      int err = errno;
      (void)!::write(errpipe[1], &err, sizeof err);
      ::_exit(127);
    }
    ::execvpe(argv[0], argv.data(), envp.data());
    int err = errno;
    (void)!::write(errpipe[1], &err, sizeof err);
    ::_exit(127);
  }
  ::close(errpipe[1]);
  if (pipefd[1] >= 0) ::close(pipefd[1]);
  if (outfd >= 0) ::close(outfd);
  int child_errno = 0;
  ssize_t n;
  do {
    n = ::read(errpipe[0], &child_errno, sizeof child_errno);
  } while (n < 0 && errno == EINTR);
  ::close(errpipe[0]);
  if (n == sizeof child_errno) {
    ::waitpid(pid, nullptr, 0);
    if (pipefd[0] >= 0) ::close(pipefd[0]);
    return NotFoundError("cannot run '" + o.argv[0] + "': " + std::strerror(child_errno));
  }

  std::unique_ptr<Subprocess> p(new Subprocess);
  p->pid_ = pid;
  p->group_ = o.new_process_group;
  if (pipefd[0] >= 0) {
    p->reader_ = std::make_unique<Reader>();
    Reader* rd = p->reader_.get();
    rd->fd = pipefd[0];
    if (::pipe2(rd->stop_pipe, O_CLOEXEC) != 0) {
      rd->stop_pipe[0] = rd->stop_pipe[1] = -1;
    }
    auto cb = o.on_output;
    rd->thread = std::thread([rd, cb] {
      char buf[8192];
      for (;;) {
        pollfd fds[2] = {{rd->fd, POLLIN, 0}, {rd->stop_pipe[0], POLLIN, 0}};
        int pr = ::poll(fds, rd->stop_pipe[0] >= 0 ? 2 : 1, -1);
        if (pr < 0 && errno == EINTR) continue;
        if (pr < 0) break;
        if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
          ssize_t r = ::read(rd->fd, buf, sizeof buf);
          if (r < 0 && errno == EINTR) continue;
          if (r <= 0) {
            rd->eof = true;
            break;
          }
          cb(std::string_view(buf, static_cast<size_t>(r)));
          continue;
        }
        if (rd->stop_pipe[0] >= 0 && (fds[1].revents & POLLIN)) break;
      }
    });
  }
  return p;
}

Subprocess::~Subprocess() {
  if (!exit_ && pid_ > 0) {
    Kill(SIGKILL);
    int st;
    while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {}
  }
  JoinReader();
}

void Subprocess::JoinReader() {
  if (!reader_ || !reader_->thread.joinable()) return;
  // Normally EOF follows the child's exit at once; give stragglers that still
  // hold the pipe a moment, then stop reading regardless.
  const Deadline d = Deadline::AfterMs(500);
  while (!reader_->eof && !d.expired()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (!reader_->eof && reader_->stop_pipe[1] >= 0) {
    char c = 1;
    (void)!::write(reader_->stop_pipe[1], &c, 1);
  }
  reader_->thread.join();
  for (int fd : {reader_->fd, reader_->stop_pipe[0], reader_->stop_pipe[1]}) {
    if (fd >= 0) ::close(fd);
  }
  reader_.reset();
}

std::optional<ExitStatus> Subprocess::Poll() {
  if (exit_) return exit_;
  int st;
  pid_t r = ::waitpid(pid_, &st, WNOHANG);
  if (r == pid_) {
    exit_ = Decode(st);
  }
  return exit_;
}

Result<ExitStatus> Subprocess::Wait(Deadline deadline) {
  for (;;) {
    if (auto e = Poll()) {
      JoinReader();
      return *e;
    }
    if (deadline.expired()) {
      return DeadlineExceededError("process " + std::to_string(pid_) + " still running at deadline");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

void Subprocess::Kill(int sig) {
  if (pid_ <= 0 || exit_) return;
  if (group_) ::kill(-pid_, sig);
  ::kill(pid_, sig);
}

ExitStatus Subprocess::Terminate(std::chrono::milliseconds grace) {
  if (auto e = Poll()) {
    JoinReader();
    return *e;
  }
  Kill(SIGTERM);
  auto r = Wait(Deadline::After(grace));
  if (r.ok()) return *r;
  Kill(SIGKILL);
  auto r2 = Wait(Deadline::AfterMs(10'000));
  return r2.ok() ? *r2 : ExitStatus{};
}

}  // namespace octet
