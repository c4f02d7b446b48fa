// Small file-system helpers with Status errors that name the path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "octet/base/status.h"

namespace octet {

Result<std::string> ReadFileToString(const std::string& path);

// Writes `data` to `path` so that a reader sees either the old file or the
// whole new one, never a torn file: write to "<path>.tmp.<pid>", fsync, rename
// over `path`, fsync the directory. `mode` is the new file's permission bits
// (0600 for secrets). A full disk gives an error and leaves `path` untouched.
Status WriteFileAtomic(const std::string& path, std::string_view data, unsigned mode = 0644);

// Creates `path` and missing parents (like mkdir -p).
Status MakeDirs(const std::string& path, unsigned mode = 0755);

bool PathExists(const std::string& path);
bool IsDirectory(const std::string& path);
std::string JoinPath(std::string_view a, std::string_view b);
std::string DirName(std::string_view path);
std::string BaseName(std::string_view path);

// Absolute path of the running executable (/proc/self/exe).
Result<std::string> SelfExecutablePath();

// A read-only memory mapping of a whole file. Movable, not copyable; unmaps on
// destruction. An empty file maps to data() == nullptr, size() == 0.
class MappedFile {
 public:
  MappedFile() = default;
  ~MappedFile();
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  static Result<MappedFile> Open(const std::string& path);

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Asks the kernel to read the range ahead (MADV_WILLNEED); a hint only.
  void Prefetch(size_t offset, size_t length) const;

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

}  // namespace octet
