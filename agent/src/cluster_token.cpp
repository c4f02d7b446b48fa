#include "octet/agent/cluster_token.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>
#include <sys/random.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "octet/base/file_util.h"

namespace octet::agent {

Status FillRandom(void* data, size_t size) {
  auto* p = static_cast<uint8_t*>(data);
  while (size > 0) {
    const ssize_t n = ::getrandom(p, size, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return UnavailableError(std::string("getrandom: ") + std::strerror(errno));
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
  return Status::Ok();
}

std::string HexEncode(const void* data, size_t size) {
  static const char kHex[] = "0123456789abcdef";
  const auto* p = static_cast<const uint8_t*>(data);
  std::string out(size * 2, '0');
  for (size_t i = 0; i < size; ++i) {
    out[2 * i] = kHex[p[i] >> 4];
    out[2 * i + 1] = kHex[p[i] & 15];
  }
  return out;
}

Result<std::string> GenerateClusterToken() {
  uint8_t bytes[32];
  OCTET_RETURN_IF_ERROR(FillRandom(bytes, sizeof bytes));
  return HexEncode(bytes, sizeof bytes);
}

Result<std::string> ReadTokenFile(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return NotFoundError("no token file '" + path + "'");
    return UnavailableError("cannot stat token file '" + path + "': " + std::strerror(errno));
  }
  if ((st.st_mode & 077) != 0) {
    return PermissionDeniedError("token file '" + path +
                                 "' is readable by group or others; run: chmod 600 " + path);
  }
  OCTET_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  size_t b = 0, e = text.size();
  while (b < e && std::isspace(static_cast<unsigned char>(text[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(text[e - 1]))) --e;
  if (b == e) return InvalidArgumentError("token file '" + path + "' is empty");
  return text.substr(b, e - b);
}

Status WriteTokenFile(const std::string& path, std::string_view token) {
  return WriteFileAtomic(path, std::string(token) + "\n", 0600);
}

TokenVerifier::TokenVerifier(std::string_view token) {
  SHA256(reinterpret_cast<const unsigned char*>(token.data()), token.size(), digest_.data());
}

bool TokenVerifier::Matches(std::string_view presented) const {
  std::array<uint8_t, 32> d{};
  SHA256(reinterpret_cast<const unsigned char*>(presented.data()), presented.size(), d.data());
  return CRYPTO_memcmp(d.data(), digest_.data(), d.size()) == 0;
}

std::string HmacSha256Hex(std::string_view key, std::string_view data) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), mac, &len);
  return HexEncode(mac, len);
}

std::string RouterAdminToken(std::string_view cluster_token, std::string_view job_id) {
  return HmacSha256Hex(cluster_token, "octet-router-admin:" + std::string(job_id));
}

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace octet::agent
