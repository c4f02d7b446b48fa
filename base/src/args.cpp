#include "octet/base/args.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>

namespace octet {

ArgParser::ArgParser(std::string program, std::string description)
    : program_(std::move(program)), description_(std::move(description)) {}

ArgParser& ArgParser::Flag(const std::string& name, const std::string& help) {
  order_.push_back(name);
  specs_[name] = Spec{"", help, true, std::nullopt};
  return *this;
}

ArgParser& ArgParser::Option(const std::string& name, const std::string& metavar,
                             const std::string& help, std::optional<std::string> default_value) {
  order_.push_back(name);
  specs_[name] = Spec{metavar, help, false, std::move(default_value)};
  return *this;
}

ArgParser& ArgParser::Positional(const std::string& metavar, const std::string& help) {
  positional_metavar_ = metavar;
  positional_help_ = help;
  return *this;
}

Status ArgParser::Parse(int argc, const char* const* argv) {
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  return Parse(args);
}

Status ArgParser::Parse(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      help_ = true;
      continue;
    }
    if (a.size() > 2 && a.compare(0, 2, "--") == 0) {
      std::string name = a.substr(2);
      std::optional<std::string> inline_value;
      if (size_t eq = name.find('='); eq != std::string::npos) {
        inline_value = name.substr(eq + 1);
        name = name.substr(0, eq);
      }
      auto it = specs_.find(name);
      if (it == specs_.end()) {
        std::vector<std::string> names;
        for (const auto& [n, spec] : specs_) names.push_back(n);
        const std::string near = ClosestMatch(name, names);
        return InvalidArgumentError(program_ + ": unknown flag --" + name +
                                    (near.empty() ? "" : "; did you mean --" + near + "?") +
                                    " (see --help)");
      }
      if (it->second.is_flag) {
        if (inline_value && *inline_value != "true" && *inline_value != "false") {
          return InvalidArgumentError(program_ + ": --" + name + " takes no value");
        }
        values_[name] = inline_value.value_or("true");
        continue;
      }
      if (inline_value) {
        values_[name] = *inline_value;
      } else {
        if (i + 1 >= args.size()) {
          return InvalidArgumentError(program_ + ": --" + name + " needs a value (" + it->second.metavar + ")");
        }
        values_[name] = args[++i];
      }
      continue;
    }
    if (positional_metavar_.empty()) {
      return InvalidArgumentError(program_ + ": unexpected argument '" + a + "' (see --help)");
    }
    positional_.push_back(a);
  }
  return Status::Ok();
}

std::string ArgParser::Usage() const {
  std::ostringstream o;
  o << "usage: " << program_ << " [flags]";
  if (!positional_metavar_.empty()) o << " " << positional_metavar_ << "...";
  o << "\n\n" << description_ << "\n\nflags:\n";
  for (const auto& name : order_) {
    const Spec& s = specs_.at(name);
    std::string left = "  --" + name + (s.is_flag ? "" : " " + s.metavar);
    o << left;
    if (left.size() < 28) o << std::string(28 - left.size(), ' ');
    else o << "\n" << std::string(28, ' ');
    o << s.help;
    if (s.default_value) o << " (default " << *s.default_value << ")";
    o << "\n";
  }
  if (!positional_metavar_.empty()) o << "  " << positional_metavar_ << "  " << positional_help_ << "\n";
  o << "  --help                    show this help\n";
  return o.str();
}

bool ArgParser::Given(const std::string& name) const { return values_.count(name) > 0; }

bool ArgParser::Has(const std::string& name) const {
  if (Given(name)) return true;
  auto it = specs_.find(name);
  return it != specs_.end() && it->second.default_value.has_value();
}

bool ArgParser::GetFlag(const std::string& name) const {
  auto it = values_.find(name);
  return it != values_.end() && it->second == "true";
}

std::string ArgParser::GetString(const std::string& name) const {
  if (auto it = values_.find(name); it != values_.end()) return it->second;
  if (auto it = specs_.find(name); it != specs_.end() && it->second.default_value) {
    return *it->second.default_value;
  }
  return "";
}

Result<int64_t> ArgParser::GetInt(const std::string& name) const {
  const std::string v = GetString(name);
  if (v.empty()) return InvalidArgumentError(program_ + ": --" + name + " is required");
  errno = 0;
  char* end = nullptr;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (errno != 0 || end == v.c_str() || *end != '\0') {
    return InvalidArgumentError(program_ + ": --" + name + " expects an integer, got '" + v + "'");
  }
  return static_cast<int64_t>(x);
}

Result<double> ArgParser::GetDouble(const std::string& name) const {
  const std::string v = GetString(name);
  if (v.empty()) return InvalidArgumentError(program_ + ": --" + name + " is required");
  errno = 0;
  char* end = nullptr;
  double x = std::strtod(v.c_str(), &end);
  if (errno != 0 || end == v.c_str() || *end != '\0' || !std::isfinite(x)) {
    return InvalidArgumentError(program_ + ": --" + name + " expects a number, got '" + v + "'");
  }
  return x;
}

std::vector<std::string> ArgParser::GetList(const std::string& name) const {
  std::vector<std::string> out;
  const std::string v = GetString(name);
  size_t i = 0;
  while (i <= v.size() && !v.empty()) {
    size_t j = v.find(',', i);
    if (j == std::string::npos) j = v.size();
    if (j > i) out.push_back(v.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

Result<std::vector<int64_t>> ArgParser::GetIntList(const std::string& name) const {
  std::vector<int64_t> out;
  for (const auto& item : GetList(name)) {
    errno = 0;
    char* end = nullptr;
    long long x = std::strtoll(item.c_str(), &end, 10);
    if (errno != 0 || end == item.c_str() || *end != '\0') {
      return InvalidArgumentError(program_ + ": --" + name + " expects integers separated by commas, got '" +
                                  item + "'");
    }
    out.push_back(x);
  }
  return out;
}

Result<int64_t> ArgParser::GetBytes(const std::string& name) const {
  auto r = ParseByteSize(GetString(name));
  if (!r.ok()) return r.status().WithContext(program_ + ": --" + name);
  return r;
}

Result<int64_t> ParseByteSize(const std::string& text) {
  if (text.empty()) return InvalidArgumentError("empty size");
  errno = 0;
  char* end = nullptr;
  double x = std::strtod(text.c_str(), &end);
  if (errno != 0 || end == text.c_str() || !(x >= 0) || !std::isfinite(x)) {
    return InvalidArgumentError("not a size: '" + text + "'");
  }
  std::string suffix(end);
  double mult = 1;
  if (suffix.empty() || suffix == "B") mult = 1;
  else if (suffix == "K" || suffix == "KiB" || suffix == "k") mult = 1024.0;
  else if (suffix == "M" || suffix == "MiB") mult = 1024.0 * 1024;
  else if (suffix == "G" || suffix == "GiB") mult = 1024.0 * 1024 * 1024;
  else if (suffix == "T" || suffix == "TiB") mult = 1024.0 * 1024 * 1024 * 1024;
  else if (suffix == "KB" || suffix == "kB") mult = 1e3;
  else if (suffix == "MB") mult = 1e6;
  else if (suffix == "GB") mult = 1e9;
  else if (suffix == "TB") mult = 1e12;
  else return InvalidArgumentError("unknown size suffix in '" + text + "' (use K, M, G, T, KiB.., KB..)");
  const double v = x * mult;
  if (v > 9.0e18) return OutOfRangeError("size too large: '" + text + "'");
  return static_cast<int64_t>(std::llround(v));
}

std::string FormatBytes(double bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  double v = bytes;
  while (std::fabs(v) >= 1024.0 && u < 5) {
    v /= 1024.0;
    ++u;
  }
  char buf[64];
  if (u == 0) std::snprintf(buf, sizeof buf, "%.0f B", v);
  else std::snprintf(buf, sizeof buf, "%.1f %s", v, kUnits[u]);
  return buf;
}

std::string ClosestMatch(const std::string& word, const std::vector<std::string>& candidates) {
  // Optimal string alignment distance (Damerau-Levenshtein without repeated edits).
  auto distance = [](const std::string& a, const std::string& b) {
    const size_t n = a.size(), m = b.size();
    std::vector<std::vector<size_t>> d(n + 1, std::vector<size_t>(m + 1, 0));
    for (size_t i = 0; i <= n; ++i) d[i][0] = i;
    for (size_t j = 0; j <= m; ++j) d[0][j] = j;
    for (size_t i = 1; i <= n; ++i) {
      for (size_t j = 1; j <= m; ++j) {
        const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
        d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
        if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
          d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
        }
      }
    }
    return d[n][m];
  };
  if (word.empty() || word.size() > 64) return "";
  const size_t limit = word.size() <= 4 ? 1 : word.size() <= 8 ? 2 : 3;
  std::string best;
  size_t best_d = limit + 1;
  for (const std::string& c : candidates) {
    if (c.size() > 64) continue;
    const size_t dist = distance(word, c);
    if (dist < best_d) {
      best_d = dist;
      best = c;
    }
  }
  return best;
}

}  // namespace octet
