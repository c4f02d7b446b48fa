// The cluster token: the shared secret every agent call carries.
//
// `octet cluster init` generates it (32 random bytes, 64 hex characters) and
// stores it 0600; agents read it from a file and refuse one that group or
// others can read. Clients send it as gRPC metadata
// "authorization: Bearer <token>"; the agent compares it in constant time.
// The same secret keys the HMACs of link beacons and link probes, so a beacon
// or probe from another cluster (or a forger) is ignored.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "octet/base/status.h"

namespace octet::agent {

inline constexpr char kAuthMetadataKey[] = "authorization";
inline constexpr char kBearerPrefix[] = "Bearer ";

// Cryptographically random bytes (getrandom); an error only when the kernel refuses.
Status FillRandom(void* data, size_t size);
// A new token: 64 lowercase hex characters.
Result<std::string> GenerateClusterToken();

// Reads a token file: surrounding whitespace is trimmed; an empty file, or one
// that group/others may read (mode & 077), is an error naming the path.
Result<std::string> ReadTokenFile(const std::string& path);
// Writes `token` to `path` with mode 0600 (atomically).
Status WriteTokenFile(const std::string& path, std::string_view token);

// Checks presented tokens against the cluster token in constant time: both are
// hashed (SHA-256) and the digests compared with CRYPTO_memcmp, so neither the
// content nor the length of the secret leaks through timing. Thread-safe (immutable).
class TokenVerifier {
 public:
  explicit TokenVerifier(std::string_view token);
  bool Matches(std::string_view presented) const;

 private:
  std::array<uint8_t, 32> digest_{};
};

// HMAC-SHA256 of `data` keyed with `key`, as 64 lowercase hex characters.
std::string HmacSha256Hex(std::string_view key, std::string_view data);
// The admin token of router job `job_id` (`octet deploy` routers): the HMAC
// of "octet-router-admin:" + job_id keyed with the cluster token, so whoever
// holds the cluster token (the deploying client) knows it and the router
// learns nothing of the cluster token. The agent hands it to the router in
// its environment (OCTET_ROUTER_ADMIN_TOKEN), never on its command line.
std::string RouterAdminToken(std::string_view cluster_token, std::string_view job_id);
inline constexpr char kRouterAdminTokenEnv[] = "OCTET_ROUTER_ADMIN_TOKEN";
// Constant-time equality of two strings of equal length (false when lengths differ).
bool ConstantTimeEquals(std::string_view a, std::string_view b);
std::string HexEncode(const void* data, size_t size);

}  // namespace octet::agent
