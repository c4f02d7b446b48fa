// See yaml_checker.h.
#include "octet/router/yaml_checker.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <utility>

namespace octet::router {

std::string YamlError::ToString() const {
  return file + ":" + std::to_string(line) + ":" + std::to_string(column) + ": " + message;
}

SourceLocation YamlLocation(const YAML::Node& node) {
  const YAML::Mark m = node.Mark();
  if (m.is_null() || m.line < 0 || m.column < 0) return {};
  return {m.line + 1, m.column + 1};
}

namespace {

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string JoinNames(const std::vector<std::string>& names) {
  std::string list;
  for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
  return list;
}

}  // namespace

std::string DidYouMean(std::string_view word, const std::vector<std::string>& candidates) {
  std::string lower(word);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  size_t best = SIZE_MAX;
  const std::string* best_name = nullptr;
  for (const auto& c : candidates) {
    const size_t d = EditDistance(lower, c);
    if (d < best) {
      best = d;
      best_name = &c;
    }
  }
  if (best_name == nullptr || best > std::max<size_t>(2, word.size() / 3)) return "";
  return " (did you mean '" + *best_name + "'?)";
}

std::string QuoteValue(std::string_view v) {
  const bool token = !v.empty() && v.size() <= 64 && std::all_of(v.begin(), v.end(), [](char ch) {
    return std::isalnum(static_cast<unsigned char>(ch)) || std::strchr("_-.:/@+%[]", ch);
  });
  if (token) return "'" + std::string(v) + "'";
  return v.empty() ? "an empty string" : "a value of " + std::to_string(v.size()) + " characters";
}

std::string DescribeNode(const YAML::Node& n) {
  if (n.IsMap()) return "a map";
  if (n.IsSequence()) return "a list";
  if (n.IsNull()) return "nothing";
  return QuoteValue(n.Scalar());
}

const YamlField* FindField(const std::map<std::string, YamlField>& fields, std::string_view key) {
  auto it = fields.find(std::string(key));
  return it == fields.end() ? nullptr : &it->second;
}

void YamlChecker::Error(SourceLocation loc, std::string message) {
  errors_.push_back(YamlError{file_, loc.line, loc.column, std::move(message)});
}

std::vector<YamlError> YamlChecker::TakeErrors() {
  std::stable_sort(errors_.begin(), errors_.end(), [](const YamlError& a, const YamlError& b) {
    return a.line != b.line ? a.line < b.line : a.column < b.column;
  });
  return std::exchange(errors_, {});
}

bool YamlChecker::ReadMap(const YAML::Node& node, SourceLocation where, const std::string& what,
                          const std::vector<std::string>& allowed,
                          std::map<std::string, YamlField>* out) {
  if (!node.IsMap()) {
    const SourceLocation at = YamlLocation(node);
    Error(at.line ? at : where, what + " must be a map, got " + DescribeNode(node));
    return false;
  }
  for (auto it = node.begin(); it != node.end(); ++it) {
    const SourceLocation key_loc = YamlLocation(it->first);
    if (!it->first.IsScalar()) {
      Error(key_loc, "a key in " + what + " must be a plain name");
      continue;
    }
    const std::string name = it->first.Scalar();
    if (std::find(allowed.begin(), allowed.end(), name) == allowed.end()) {
      std::string hint = DidYouMean(name, allowed);
      if (hint.empty()) hint = " (known keys: " + JoinNames(allowed) + ")";
      Error(key_loc, "unknown key " + QuoteValue(name) + " in " + what + hint);
      continue;
    }
    if (auto prev = out->find(name); prev != out->end()) {
      Error(key_loc, "duplicate key '" + name + "' in " + what + " (first at line " +
                         std::to_string(prev->second.key_loc.line) + ")");
      continue;
    }
    YamlField f;
    f.value = it->second;
    f.key_loc = key_loc;
    const SourceLocation vl = YamlLocation(it->second);
    f.loc = vl.line ? vl : key_loc;
    f.name = name;
    (*out)[name] = std::move(f);
  }
  return true;
}

void YamlChecker::Missing(SourceLocation where, const std::string& key, const std::string& what) {
  Error(where, "missing required key '" + key + "' in " + what);
}

bool YamlChecker::String(const YamlField& f, std::string* out) {
  if (!f.value.IsScalar()) {
    Error(f.loc, "'" + f.name + "' must be a string, got " + DescribeNode(f.value));
    return false;
  }
  *out = f.value.Scalar();
  return true;
}

bool YamlChecker::NonEmptyString(const YamlField& f, std::string* out) {
  if (!String(f, out)) return false;
  if (out->empty()) {
    Error(f.loc, "'" + f.name + "' must not be empty");
    return false;
  }
  return true;
}

bool YamlChecker::Name(const YamlField& f, std::string* out, size_t max_len, bool allow_dots) {
  if (!NonEmptyString(f, out)) return false;
  for (char c : *out) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' ||
          (allow_dots && c == '.'))) {
      Error(f.loc, "'" + f.name + "' must use only letters, digits, '_'" +
                       std::string(allow_dots ? ", '-' and '.'" : " and '-'") + ", got " +
                       QuoteValue(*out));
      return false;
    }
  }
  if (out->size() > max_len) {
    Error(f.loc, "'" + f.name + "' must be at most " + std::to_string(max_len) +
                     " characters, got " + std::to_string(out->size()));
    return false;
  }
  return true;
}

bool YamlChecker::Number(const YamlField& f, double* out, double lo, double hi,
                         const char* range_text) {
  if (!f.value.IsScalar()) {
    Error(f.loc, "'" + f.name + "' must be a number, got " + DescribeNode(f.value));
    return false;
  }
  const std::string& s = f.value.Scalar();
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || errno == ERANGE || !std::isfinite(v)) {
    Error(f.loc, "'" + f.name + "' must be a number, got " + QuoteValue(s));
    return false;
  }
  if (v < lo || v > hi) {
    Error(f.loc, "'" + f.name + "' must be in " + range_text + ", got " + s);  // a number
    return false;
  }
  *out = v;
  return true;
}

bool YamlChecker::Integer(const YamlField& f, int64_t* out, int64_t lo, int64_t hi) {
  if (!f.value.IsScalar()) {
    Error(f.loc, "'" + f.name + "' must be an integer, got " + DescribeNode(f.value));
    return false;
  }
  const std::string& s = f.value.Scalar();
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || end != s.c_str() + s.size() || errno == ERANGE) {
    Error(f.loc, "'" + f.name + "' must be an integer, got " + QuoteValue(s));
    return false;
  }
  if (v < lo || v > hi) {
    Error(f.loc, "'" + f.name + "' must be in " + std::to_string(lo) + ".." + std::to_string(hi) +
                     ", got " + s);  // a number
    return false;
  }
  *out = v;
  return true;
}

bool YamlChecker::Bool(const YamlField& f, bool* out) {
  if (f.value.IsScalar()) {
    std::string s = f.value.Scalar();
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (s == "true" || s == "yes" || s == "on") {
      *out = true;
      return true;
    }
    if (s == "false" || s == "no" || s == "off") {
      *out = false;
      return true;
    }
  }
  Error(f.loc, "'" + f.name + "' must be true or false, got " + DescribeNode(f.value));
  return false;
}

bool YamlChecker::Enum(const YamlField& f, const std::vector<std::string>& names, size_t* index) {
  std::string s;
  if (!String(f, &s)) return false;
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == s) {
      *index = i;
      return true;
    }
  }
  Error(f.loc, "'" + f.name + "' must be one of " + JoinNames(names) + ", got " + QuoteValue(s) +
                   DidYouMean(s, names));
  return false;
}

bool YamlChecker::Choice(const YamlField& f, const std::vector<std::string>& names,
                         std::string* out) {
  size_t index = 0;
  if (!Enum(f, names, &index)) return false;
  *out = names[index];
  return true;
}

bool YamlChecker::StringList(const YamlField& f, std::vector<std::string>* out) {
  if (f.value.IsScalar()) {
    out->push_back(f.value.Scalar());
    return true;
  }
  if (!f.value.IsSequence()) {
    Error(f.loc, "'" + f.name + "' must be a list of strings, got " + DescribeNode(f.value));
    return false;
  }
  bool ok = true;
  for (const auto& item : f.value) {
    if (!item.IsScalar()) {
      const SourceLocation l = YamlLocation(item);
      Error(l.line ? l : f.loc,
            "items of '" + f.name + "' must be strings, got " + DescribeNode(item));
      ok = false;
      continue;
    }
    out->push_back(item.Scalar());
  }
  return ok;
}

}  // namespace octet::router
