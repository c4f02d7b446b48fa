#include "octet/agent/job_arguments.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string_view>

#include "octet/base/args.h"

namespace octet::agent {
namespace {

// The kinds of value a flag may take.
enum class Value {
  kNone,          // a bare flag
  kCount,         // a non-negative integer up to `max`
  kReal,          // a finite number
  kRealList,      // finite numbers separated by commas ("0.9,0.95")
  kChoice,        // one of `choices`
  kWord,          // [A-Za-z0-9._-]{1,64}: a backend, an optimizer (the program checks which)
  kName,          // a served model name: printable, no spaces, at most 256 bytes
  kText,          // free text (a prompt): at most 1 MiB, no NUL
  kIds,           // token ids: digits and commas
  kCpuList,       // "0,1" or "2-3"
  kByteSize,      // "4GiB", "25M", "4096"
  kPort,          // 0..65535
  kGrpcPort,      // a port, "auto" or "off"
  kLocalAddress,  // an address of this node
  kPathInRoots,   // a file or folder inside the model roots (replaced by its real path)
  kPresetOrPath,  // a trainer preset name ("tiny", "d12") or a file inside the roots
};

struct Flag {
  std::string_view name;  // without "--"
  Value value;
  uint64_t max = 0;  // kCount
  std::vector<std::string_view> choices = {};
};

constexpr uint64_t kMaxTimeoutMs = 86'400'000;  // a day

// Flags of `octet worker --job inference` (its instance, serving and one-shot
// generation flags) that a caller may set. Left out on purpose: --logits-out
// (writes a file), and what the agent wires: --job, --model, --world-size,
// --rank, --rendezvous, --transport, --algo.
const std::vector<Flag>& InferenceFlags() {
  static const std::vector<Flag> flags = {
      {"threads", Value::kCount, 4096},
      {"backend", Value::kWord},
      {"kv-dtype", Value::kChoice, 0, {"f32", "f16"}},
      {"nvfp4-tiles", Value::kChoice, 0, {"on", "off"}},
      {"quantize", Value::kChoice, 0, {"off", "nvfp4"}},
      {"peer-timeout-ms", Value::kCount, kMaxTimeoutMs},
      {"connect-timeout-ms", Value::kCount, kMaxTimeoutMs},
      {"cpus", Value::kCpuList},
      {"no-figures", Value::kNone},
      {"host", Value::kLocalAddress},
      {"port", Value::kPort},
      {"grpc-port", Value::kGrpcPort},
      {"served-model-name", Value::kName},
      {"context", Value::kCount, 1u << 24},
      {"slots", Value::kCount, 4096},
      {"kv-memory", Value::kByteSize},
      {"max-batch-tokens", Value::kCount, 1u << 24},
      {"max-queue", Value::kCount, 1u << 24},
      {"prompt", Value::kText},
      {"prompt-ids", Value::kIds},
      {"max-tokens", Value::kCount, 1u << 24},
      {"temperature", Value::kReal},
      {"top-k", Value::kCount, 1u << 24},
      {"top-p", Value::kReal},
      {"seed", Value::kCount, UINT64_MAX},
      {"chat", Value::kNone},
      {"system", Value::kText},
      {"think", Value::kNone},
      {"ignore-eos", Value::kNone},
      {"speculative", Value::kChoice, 0, {"off", "ngram", "mtp"}},
      {"draft-tokens", Value::kCount, 8},  // the worker checks the method's own range
      {"draft-length", Value::kChoice, 0, {"auto", "fixed"}},
      {"json", Value::kNone},
  };
  return flags;
}

// `octet train` flags a training rank may be given. The run's folder is the
// job's model (the worker passes it as --out); left out: --out, --init,
// --batch, --grads-out (other files), --ranks, --rank, --world-size,
// --rendezvous, --transport, --algo (wired).
const std::vector<Flag>& TrainingFlags() {
  static const std::vector<Flag> flags = {
      {"config", Value::kPresetOrPath},
      {"data", Value::kPathInRoots},
      {"steps", Value::kCount, 1ull << 40},
      {"seq-len", Value::kCount, 1u << 24},
      {"batch-size", Value::kCount, 1u << 20},
      {"total-batch-tokens", Value::kCount, 1ull << 40},
      {"warmup-steps", Value::kCount, 1ull << 40},
      {"warmdown-frac", Value::kReal},
      {"final-lr-frac", Value::kReal},
      {"grad-clip", Value::kReal},
      {"checkpoint-every", Value::kCount, 1ull << 40},
      {"keep-checkpoints", Value::kCount, 1u << 20},
      {"eval-every", Value::kCount, 1ull << 40},
      {"eval-batches", Value::kCount, 1u << 20},
      {"seed", Value::kCount, UINT64_MAX},
      {"bucket-size", Value::kByteSize},
      {"log-every", Value::kCount, 1ull << 40},
      {"peak-gflops", Value::kReal},
      {"optimizer", Value::kChoice, 0, {"adamw", "muon"}},
      {"lr", Value::kReal},
      {"betas", Value::kRealList},
      {"eps", Value::kReal},
      {"weight-decay", Value::kReal},
      {"matrix-lr", Value::kReal},
      {"embedding-lr", Value::kReal},
      {"unembedding-lr", Value::kReal},
      {"resume", Value::kNone},
      {"backend", Value::kWord},
      {"threads", Value::kCount, 4096},
      {"peer-timeout-ms", Value::kCount, kMaxTimeoutMs},
      {"port", Value::kPort},  // ignored by training ranks; the workbench sends it to every rank
      {"figures", Value::kNone},
  };
  return flags;
}

// `octet route` flags (the policy is the spec's own field).
const std::vector<Flag>& RouterFlags() {
  static const std::vector<Flag> flags = {
      {"host", Value::kLocalAddress},
      {"port", Value::kPort},
      {"threads", Value::kCount, 4096},
  };
  return flags;
}

const std::vector<Flag>& FlagsOf(JobKind kind) {
  switch (kind) {
    case JobKind::kInference:
      return InferenceFlags();
    case JobKind::kTraining:
      return TrainingFlags();
    case JobKind::kRouter:
      return RouterFlags();
  }
  return RouterFlags();
}

bool ParseCount(const std::string& s, uint64_t max, uint64_t* out) {
  if (s.empty() || s.size() > 20) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  errno = 0;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || v > max) return false;
  *out = v;
  return true;
}

bool IsReal(std::string_view s) {
  if (s.empty() || s.size() > 64) return false;
  const std::string t(s);
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(t.c_str(), &end);
  return errno == 0 && end == t.c_str() + t.size() && std::isfinite(v);
}

bool AllOf(std::string_view s, const char* allowed, size_t max_len) {
  if (s.empty() || s.size() > max_len) return false;
  return std::all_of(s.begin(), s.end(), [&](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || std::strchr(allowed, c) != nullptr;
  });
}

bool IsPresetName(std::string_view s) {
  if (s == "tiny") return true;
  return s.size() >= 2 && s.size() <= 4 && s[0] == 'd' &&
         std::all_of(s.begin() + 1, s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::string RealPath(const std::string& path) {
  char* r = ::realpath(path.c_str(), nullptr);
  if (!r) return "";
  std::string out(r);
  std::free(r);
  return out;
}

bool Inside(const std::string& real, const std::string& root) {
  return real == root || (real.size() > root.size() && real.compare(0, root.size(), root) == 0 &&
                          (root.back() == '/' || real[root.size()] == '/'));
}

// Checks one value; `out` gets what goes on the command line.
Status CheckValue(const Flag& f, const std::string& v, const std::vector<std::string>& roots,
                  std::string* out) {
  const std::string flag = "--" + std::string(f.name);
  auto bad = [&](const std::string& want) {
    // The value is the caller's own text, not a file's: quoting it is safe, but bounded.
    const std::string shown = v.size() > 64 ? v.substr(0, 64) + "..." : v;
    return InvalidArgumentError("extra argument " + flag + " '" + shown + "': " + want);
  };
  *out = v;
  uint64_t n = 0;
  switch (f.value) {
    case Value::kNone:
      return Status::Ok();
    case Value::kCount:
      if (!ParseCount(v, f.max, &n))
        return bad("must be an integer in 0.." + std::to_string(f.max));
      return Status::Ok();
    case Value::kReal:
      if (!IsReal(v)) return bad("must be a finite number");
      return Status::Ok();
    case Value::kRealList: {
      size_t start = 0;
      while (true) {
        const size_t comma = v.find(',', start);
        if (!IsReal(std::string_view(v).substr(start, comma - start)))
          return bad("must be numbers separated by commas");
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
      return Status::Ok();
    }
    case Value::kChoice:
      for (auto c : f.choices)
        if (v == c) return Status::Ok();
      {
        std::string list;
        for (auto c : f.choices) list += (list.empty() ? "" : ", ") + std::string(c);
        return bad("must be one of " + list);
      }
    case Value::kWord:
      if (!AllOf(v, "._-", 64)) return bad("must be a name of letters, digits, '.', '_', '-'");
      return Status::Ok();
    case Value::kName:
      if (v.empty() || v.size() > 256 ||
          !std::all_of(v.begin(), v.end(), [](char c) { return c > ' ' && c < 0x7f; }))
        return bad("must be 1-256 printable characters without spaces");
      return Status::Ok();
    case Value::kText:
      if (v.size() > (1u << 20) || v.find('\0') != std::string::npos)
        return bad("must be text of at most 1 MiB");
      return Status::Ok();
    case Value::kIds:
      if (!AllOf(v, ",", 1u << 20) || !std::all_of(v.begin(), v.end(), [](char c) {
            return c == ',' || (c >= '0' && c <= '9');
          }))
        return bad("must be token ids separated by commas");
      return Status::Ok();
    case Value::kCpuList:
      if (!std::all_of(v.begin(), v.end(),
                       [](char c) { return c == ',' || c == '-' || (c >= '0' && c <= '9'); }) ||
          v.empty() || v.size() > 4096)
        return bad("must be a CPU list such as 0,1 or 2-3");
      return Status::Ok();
    case Value::kByteSize: {
      if (v.size() > 32) return bad("must be a size such as 4GiB");
      auto size = ParseByteSize(v);
      if (!size.ok() || *size < 0) return bad("must be a size such as 4GiB");
      return Status::Ok();
    }
    case Value::kPort:
      if (!ParseCount(v, 65535, &n)) return bad("must be a port in 0..65535");
      return Status::Ok();
    case Value::kGrpcPort:
      if (v == "auto" || v == "off" || ParseCount(v, 65535, &n)) return Status::Ok();
      return bad("must be a port, auto or off");
    case Value::kLocalAddress:
      if (!IsAddressOfThisNode(v))
        return bad("must be an address of this node (loopback included; not a wildcard address)");
      return Status::Ok();
    case Value::kPresetOrPath:
      if (IsPresetName(v)) return Status::Ok();
      [[fallthrough]];
    case Value::kPathInRoots: {
      OCTET_ASSIGN_OR_RETURN(*out, ResolveInsideRoots(v, roots, flag));
      return Status::Ok();
    }
  }
  return bad("is not allowed");
}

}  // namespace

Result<std::string> ResolveInsideRoots(const std::string& path,
                                       const std::vector<std::string>& roots,
                                       const std::string& what) {
  if (roots.empty()) {
    return PermissionDeniedError(what + " '" + path +
                                 "' refused: this agent has no model roots configured "
                                 "(start it with --model-roots DIR,...)");
  }
  if (path.empty()) return InvalidArgumentError(what + " is empty");
  std::string list;
  for (const auto& root : roots) list += (list.empty() ? "" : ", ") + root;
  const std::string real = RealPath(path);
  if (real.empty()) {
    const int err = errno;
    // Only a path that would lie inside the roots is said not to exist: for
    // any other the answer is the same as for an existing one, so a caller
    // cannot probe which files exist elsewhere on the node.
    const std::string lexical =
        std::filesystem::absolute(std::filesystem::path(path)).lexically_normal().string();
    for (const auto& root : roots) {
      const std::string r = RealPath(root);
      const std::string lr =
          std::filesystem::absolute(std::filesystem::path(root)).lexically_normal().string();
      if ((!r.empty() && Inside(lexical, r)) || (!lr.empty() && Inside(lexical, lr))) {
        return NotFoundError(what + " '" + path +
                             "' not found on this node: " + std::strerror(err));
      }
    }
    return PermissionDeniedError(what + " '" + path + "' is outside this agent's model roots (" +
                                 list + ")");
  }
  for (const auto& root : roots) {
    const std::string r = RealPath(root);
    if (!r.empty() && Inside(real, r)) return real;
  }
  return PermissionDeniedError(what + " '" + path + "' (" + real +
                               ") is outside this agent's model roots (" + list + ")");
}

bool IsAddressOfThisNode(const std::string& host) {
  if (host == "localhost") return true;
  std::string h = host;
  if (h.size() > 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  in_addr a4{};
  in6_addr a6{};
  const bool v4 = ::inet_pton(AF_INET, h.c_str(), &a4) == 1;
  const bool v6 = !v4 && ::inet_pton(AF_INET6, h.c_str(), &a6) == 1;
  if (!v4 && !v6) {
    // A name: this node's own host name (what a workbench that reaches the
    // agent as "spark1:47100" passes), with or without its domain.
    char name[256] = {};
    if (::gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return false;
    auto lower = [](std::string s) {
      for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      return s;
    };
    const std::string self = lower(name), want = lower(h);
    const std::string self_short = self.substr(0, self.find('.'));
    return want == self || want == self_short;
  }
  if (v4 && a4.s_addr == htonl(INADDR_ANY)) return false;
  if (v6 && IN6_IS_ADDR_UNSPECIFIED(&a6)) return false;
  if (v4 && (ntohl(a4.s_addr) >> 24) == 127) return true;  // the whole loopback range
  if (v6 && IN6_IS_ADDR_LOOPBACK(&a6)) return true;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return false;
  bool found = false;
  for (ifaddrs* i = list; i && !found; i = i->ifa_next) {
    if (!i->ifa_addr) continue;
    if (v4 && i->ifa_addr->sa_family == AF_INET) {
      found = reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr == a4.s_addr;
    } else if (v6 && i->ifa_addr->sa_family == AF_INET6) {
      found = std::memcmp(&reinterpret_cast<sockaddr_in6*>(i->ifa_addr)->sin6_addr, &a6,
                          sizeof a6) == 0;
    }
  }
  ::freeifaddrs(list);
  return found;
}

Result<std::vector<std::string>> CheckExtraArgs(JobKind kind, const std::vector<std::string>& args,
                                                const std::vector<std::string>& model_roots,
                                                const std::vector<std::string>& owner_flags) {
  const std::vector<Flag>& flags = FlagsOf(kind);
  std::vector<std::string> out;
  out.reserve(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.size() < 3 || a.compare(0, 2, "--") != 0) {
      const std::string shown = a.size() > 64 ? a.substr(0, 64) + "..." : a;
      return InvalidArgumentError("extra argument '" + shown + "' is not a flag");
    }
    const size_t eq = a.find('=');
    const std::string name = a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    if (std::find(owner_flags.begin(), owner_flags.end(), name) != owner_flags.end()) {
      out.push_back(a);  // the node owner's program takes its own flags whole
      continue;
    }
    auto f =
        std::find_if(flags.begin(), flags.end(), [&](const Flag& x) { return x.name == name; });
    if (f == flags.end()) {
      const std::string shown = name.size() > 64 ? name.substr(0, 64) + "..." : name;
      return InvalidArgumentError("extra argument --" + shown + " is not allowed for " +
                                  std::string(JobKindName(kind)) +
                                  " jobs (the agent passes only flags it knows to be safe; "
                                  "wired settings go in the spec's own fields)");
    }
    std::string value;
    if (f->value == Value::kNone) {
      if (eq != std::string::npos)
        return InvalidArgumentError("extra argument --" + name + " takes no value");
      out.push_back("--" + name);
      continue;
    }
    if (eq != std::string::npos) {
      value = a.substr(eq + 1);
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      return InvalidArgumentError("extra argument --" + name + " needs a value");
    }
    std::string checked;
    OCTET_RETURN_IF_ERROR(CheckValue(*f, value, model_roots, &checked));
    // One word, so that no value (a prompt starting with "--") reads as a flag.
    out.push_back("--" + name + "=" + checked);
  }
  return out;
}

}  // namespace octet::agent
