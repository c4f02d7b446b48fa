// The schema walk that octet's YAML parsers share: a map's keys against the
// allowed ones (unknown keys name the nearest known key, or list them all),
// scalars against a type and range, every error kept with its line and column
// so one pass reports all of them, sorted by place.
//
// Values are quoted back only when they are short tokens (names, numbers,
// URLs); anything else is described by its length, so an error never echoes a
// file's content (a path pointed at some other file would otherwise have its
// lines printed to whoever reads the error, e.g. through the agent's job log).
//
// Needs yaml-cpp; parsers link it themselves.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "octet/router/yaml_error.h"

namespace octet::router {

// The node's place (1-based), or {0, 0} when yaml-cpp has none.
SourceLocation YamlLocation(const YAML::Node& node);

// " (did you mean 'x'?)" for the candidate nearest to `word` (case-insensitive,
// within max(2, |word| / 3) edits), else "".
std::string DidYouMean(std::string_view word, const std::vector<std::string>& candidates);

// 'value' for a short token, else "a value of N characters" / "an empty string".
std::string QuoteValue(std::string_view value);

// "a map", "a list", "nothing" or QuoteValue of the scalar.
std::string DescribeNode(const YAML::Node& node);

// One key of a map as ReadMap found it.
struct YamlField {
  YAML::Node value;
  SourceLocation key_loc;
  SourceLocation loc;  // the value's place (the key's when the value has none)
  std::string name;
};

const YamlField* FindField(const std::map<std::string, YamlField>& fields, std::string_view key);

class YamlChecker {
 public:
  explicit YamlChecker(std::string file) : file_(std::move(file)) {}

  const std::string& file() const { return file_; }
  void Error(SourceLocation loc, std::string message);
  // The errors so far, sorted by line and column (stable), and forgotten.
  std::vector<YamlError> TakeErrors();
  bool has_errors() const { return !errors_.empty(); }

  // Reads a map's keys into `out`, reporting unknown and duplicate keys.
  // Returns false (and reports) when `node` is not a map; `where` places that
  // error when the node has no place of its own.
  bool ReadMap(const YAML::Node& node, SourceLocation where, const std::string& what,
               const std::vector<std::string>& allowed, std::map<std::string, YamlField>* out);
  void Missing(SourceLocation where, const std::string& key, const std::string& what);

  // Each reads one field's value, or reports why it cannot and returns false.
  bool String(const YamlField& f, std::string* out);  // any scalar, "" included
  bool NonEmptyString(const YamlField& f, std::string* out);
  // Letters, digits, '_', '-' and (with allow_dots) '.', at most max_len of them.
  bool Name(const YamlField& f, std::string* out, size_t max_len = SIZE_MAX,
            bool allow_dots = true);
  bool Number(const YamlField& f, double* out, double lo, double hi, const char* range_text);
  bool Integer(const YamlField& f, int64_t* out, int64_t lo, int64_t hi);
  template <typename Int>
  bool Integer(const YamlField& f, Int* out, int64_t lo, int64_t hi) {
    int64_t v = 0;
    if (!Integer(f, &v, lo, hi)) return false;
    *out = static_cast<Int>(v);
    return true;
  }
  bool Bool(const YamlField& f, bool* out);  // true/false, yes/no, on/off
  bool Enum(const YamlField& f, const std::vector<std::string>& names, size_t* index);
  bool Choice(const YamlField& f, const std::vector<std::string>& names, std::string* out);
  // A list of strings; a single string is taken as a one-element list.
  bool StringList(const YamlField& f, std::vector<std::string>* out);

 private:
  std::string file_;
  std::vector<YamlError> errors_;
};

}  // namespace octet::router
