// The trainer's token shard reader (trainer/src/token_shards.cpp): any file
// opens as a validated shard or is refused with a message; a shard that opens
// can be read whole, and every token it gives is below its vocabulary size.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "octet/trainer/token_shards.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/octet-fuzz-shard-" + std::to_string(::getpid()) + ".bin";
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  // Gone when this input is done (a replay run left one in /tmp each time).
  struct RemoveAfter {
    const std::string& file;
    ~RemoveAfter() { std::remove(file.c_str()); }
  } remove_after{path};
  auto shard = octet::trainer::TokenShard::Open(path);
  if (!shard.ok()) {
    if (shard.status().message().empty()) std::abort();
    return 0;
  }
  if (shard->size() < 0 || shard->vocab_size() <= 0) std::abort();
  std::vector<int32_t> tokens(4096);
  for (int64_t begin = 0; begin < shard->size(); begin += 4096) {
    const int64_t n = std::min<int64_t>(4096, shard->size() - begin);
    shard->Read(begin, n, tokens.data());
    for (int64_t i = 0; i < n; ++i) {
      if (tokens[i] < 0 || tokens[i] >= shard->vocab_size()) std::abort();
    }
  }
  return 0;
}
