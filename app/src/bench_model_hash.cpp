// ModelContentHash (bench_store.h): a run's model_hash, over a model
// folder's config, safetensors index and safetensors headers.
#include <openssl/evp.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "octet/app/bench_store.h"

namespace octet::app {

Result<std::string> ModelContentHash(const std::string& dir) {
  namespace fs = std::filesystem;
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) {
    return InternalError("cannot start a SHA-256 digest");
  }
  auto add = [&](const std::string& tag, const std::string& bytes) {
    // Each part is named and sized, so that moving bytes between parts changes the hash.
    const std::string head = tag + "\n" + std::to_string(bytes.size()) + "\n";
    EVP_DigestUpdate(ctx.get(), head.data(), head.size());
    EVP_DigestUpdate(ctx.get(), bytes.data(), bytes.size());
  };
  auto read_all = [&](const std::string& name) -> Result<std::string> {
    std::ifstream f(dir + "/" + name, std::ios::binary);
    if (!f) return NotFoundError("cannot read " + dir + "/" + name);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  OCTET_ASSIGN_OR_RETURN(std::string config, read_all("config.json"));
  add("config.json", config);
  std::vector<std::string> shards;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name == "model.safetensors.index.json") {
      OCTET_ASSIGN_OR_RETURN(std::string index, read_all(name));
      add(name, index);
    } else if (name.size() > 12 && name.compare(name.size() - 12, 12, ".safetensors") == 0) {
      shards.push_back(name);
    }
  }
  if (ec) return NotFoundError("cannot list " + dir + ": " + ec.message());
  std::sort(shards.begin(), shards.end());
  for (const std::string& name : shards) {
    std::ifstream f(dir + "/" + name, std::ios::binary);
    uint8_t len_bytes[8] = {};
    if (!f.read(reinterpret_cast<char*>(len_bytes), 8)) {
      return DataLossError(dir + "/" + name + ": shorter than a safetensors header");
    }
    uint64_t len = 0;
    for (int i = 7; i >= 0; --i) len = (len << 8) | len_bytes[i];
    if (len > (uint64_t(100) << 20)) {
      return DataLossError(dir + "/" + name + ": safetensors header of " + std::to_string(len) +
                           " bytes is implausible");
    }
    std::string header(static_cast<size_t>(len), '\0');
    if (!f.read(header.data(), static_cast<std::streamsize>(len))) {
      return DataLossError(dir + "/" + name + ": truncated safetensors header");
    }
    add(name, header);
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (EVP_DigestFinal_ex(ctx.get(), md, &n) != 1) return InternalError("SHA-256 failed");
  static const char* kHex = "0123456789abcdef";
  std::string out = "sha256:";
  for (unsigned int i = 0; i < n; ++i) {
    out += kHex[md[i] >> 4];
    out += kHex[md[i] & 15];
  }
  return out;
}

}  // namespace octet::app
