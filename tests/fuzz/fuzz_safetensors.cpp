// A safetensors file (header length, JSON header, tensor table, data): any
// bytes open as a checked file or give an error naming the problem. The file
// is handed to the reader as it meets files, through a path (an in-memory
// file, /proc/self/fd/N).
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "octet/engine/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int fd = memfd_create("fuzz.safetensors", 0);
  if (fd < 0) return 0;
  size_t done = 0;
  while (done < size) {
    const ssize_t n = write(fd, data + done, size - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  if (done == size) {
    auto f = octet::engine::SafetensorsFile::Open("/proc/self/fd/" + std::to_string(fd));
    if (f.ok()) {
      // Touch every tensor's first and last byte: offsets must lie in the file.
      volatile uint8_t sink = 0;
      for (const auto& t : f->tensors()) {
        if (t.size_bytes > 0) sink = sink ^ t.data[0] ^ t.data[t.size_bytes - 1];
      }
      (void)f->unindexed();
    }
  }
  close(fd);
  return 0;
}
