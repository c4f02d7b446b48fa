#include "octet/base/file_util.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

namespace octet {
namespace {
std::string Errno(const std::string& what, const std::string& path) {
  return what + " '" + path + "': " + std::strerror(errno);
}
}  // namespace

Result<std::string> ReadFileToString(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return NotFoundError("no such file '" + path + "'");
    return UnavailableError(Errno("cannot open", path));
  }
  std::string out;
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      Status s = DataLossError(Errno("cannot read", path));
      ::close(fd);
      return s;
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

Status WriteFileAtomic(const std::string& path, std::string_view data, unsigned mode) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return UnavailableError(Errno("cannot create", tmp));
  const char* p = data.data();
  size_t left = data.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      Status s = ResourceExhaustedError(Errno("cannot write", tmp));
      ::close(fd);
      ::unlink(tmp.c_str());
      return s;
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    Status s = ResourceExhaustedError(Errno("cannot fsync", tmp));
    ::close(fd);
    ::unlink(tmp.c_str());
    return s;
  }
  ::fchmod(fd, mode);  // O_CREAT's mode is filtered by umask; secrets need exact bits
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    Status s = UnavailableError(Errno("cannot rename onto", path));
    ::unlink(tmp.c_str());
    return s;
  }
  const std::string dir = DirName(path);
  int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return Status::Ok();
}

Status MakeDirs(const std::string& path, unsigned mode) {
  if (path.empty()) return Status::Ok();
  std::string cur;
  size_t i = 0;
  while (i <= path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string::npos) j = path.size();
    cur = path.substr(0, j);
    if (!cur.empty() && ::mkdir(cur.c_str(), mode) != 0 && errno != EEXIST) {
      return UnavailableError(Errno("cannot create directory", cur));
    }
    i = j + 1;
  }
  if (!IsDirectory(path)) return FailedPreconditionError("'" + path + "' exists and is not a directory");
  return Status::Ok();
}

bool PathExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

bool IsDirectory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string JoinPath(std::string_view a, std::string_view b) {
  if (a.empty()) return std::string(b);
  if (!b.empty() && b.front() == '/') return std::string(b);
  std::string r(a);
  if (r.back() != '/') r += '/';
  r += b;
  return r;
}

std::string DirName(std::string_view path) {
  const size_t p = path.rfind('/');
  if (p == std::string_view::npos) return "";
  if (p == 0) return "/";
  return std::string(path.substr(0, p));
}

std::string BaseName(std::string_view path) {
  const size_t p = path.rfind('/');
  return std::string(p == std::string_view::npos ? path : path.substr(p + 1));
}

Result<std::string> SelfExecutablePath() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return InternalError(std::string("readlink /proc/self/exe: ") + std::strerror(errno));
  return std::string(buf, static_cast<size_t>(n));
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

MappedFile::MappedFile(MappedFile&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)), path_(std::move(o.path_)) {}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    path_ = std::move(o.path_);
  }
  return *this;
}

Result<MappedFile> MappedFile::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return NotFoundError("no such file '" + path + "'");
    return UnavailableError(Errno("cannot open", path));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    Status s = UnavailableError(Errno("cannot stat", path));
    ::close(fd);
    return s;
  }
  MappedFile m;
  m.path_ = path;
  m.size_ = static_cast<size_t>(st.st_size);
  if (m.size_ > 0) {
    void* p = ::mmap(nullptr, m.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      Status s = ResourceExhaustedError(Errno("cannot mmap", path));
      ::close(fd);
      return s;
    }
    m.data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
  return m;
}

void MappedFile::Prefetch(size_t offset, size_t length) const {
  if (!data_ || offset >= size_) return;
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t begin = offset / page * page;
  const size_t end = std::min(size_, offset + length);
  ::madvise(const_cast<uint8_t*>(data_) + begin, end - begin, MADV_WILLNEED);
}

}  // namespace octet
