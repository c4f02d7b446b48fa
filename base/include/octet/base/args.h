// Command-line flags for `octet <command>` and the other programs.
//
//   ArgParser p("octet collbench", "Benchmark collectives like nccl-tests.");
//   p.Option("ranks", "N", "number of rank processes", "2");
//   p.Flag("check", "verify every result");
//   if (Status s = p.Parse(argc, argv); !s.ok()) ...   // argv[0] is skipped
//   int ranks = *p.GetInt("ranks");
//
// Accepts "--name value", "--name=value" and bare "--flag". An unknown flag, a
// missing value or a value of the wrong type is an error naming the flag (an
// unknown flag close to a known one: "did you mean --NAME?").
// "--help"/"-h" sets help_requested(); Usage() formats the flag table.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "octet/base/status.h"

namespace octet {

class ArgParser {
 public:
  ArgParser(std::string program, std::string description);

  // A boolean flag, false unless given.
  ArgParser& Flag(const std::string& name, const std::string& help);
  // An option taking a value; `default_value` empty means "no default".
  ArgParser& Option(const std::string& name, const std::string& metavar, const std::string& help,
                    std::optional<std::string> default_value = std::nullopt);
  // Free-form trailing words are accepted (and listed in the usage) only when
  // this is called.
  ArgParser& Positional(const std::string& metavar, const std::string& help);

  Status Parse(int argc, const char* const* argv);
  Status Parse(const std::vector<std::string>& args);  // without argv[0]

  bool help_requested() const { return help_; }
  std::string Usage() const;

  bool Has(const std::string& name) const;  // given on the command line, or defaulted
  bool Given(const std::string& name) const;  // given on the command line
  bool GetFlag(const std::string& name) const;
  std::string GetString(const std::string& name) const;  // "" when absent
  Result<int64_t> GetInt(const std::string& name) const;
  Result<double> GetDouble(const std::string& name) const;
  // "a,b,c" -> {"a","b","c"}; empty when absent.
  std::vector<std::string> GetList(const std::string& name) const;
  Result<std::vector<int64_t>> GetIntList(const std::string& name) const;
  // Accepts suffixes K, M, G, T (powers of 1024) and KiB/MiB/GiB/TiB, KB/MB/GB/TB (powers of 1000).
  Result<int64_t> GetBytes(const std::string& name) const;
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  struct Spec {
    std::string metavar;
    std::string help;
    bool is_flag = false;
    std::optional<std::string> default_value;
  };
  std::string program_;
  std::string description_;
  std::vector<std::string> order_;
  std::map<std::string, Spec> specs_;
  std::map<std::string, std::string> values_;
  std::vector<std::string> positional_;
  std::string positional_metavar_;
  std::string positional_help_;
  bool help_ = false;
};

// The candidate closest to `word` by edit distance (insertions, deletions,
// substitutions, swaps of neighbours) when it is close enough to be a typo
// (at most 1 edit for words up to 4 characters, 2 up to 8, else 3); "" when
// none is. For "did you mean --NAME?" on unknown flags and commands.
std::string ClosestMatch(const std::string& word, const std::vector<std::string>& candidates);

// "64M" -> 67108864, "128GiB" -> 137438953472, "1.5G", "4096". Error names the text.
Result<int64_t> ParseByteSize(const std::string& text);
// 1536 -> "1.5 KiB"; 137438953472 -> "128.0 GiB".
std::string FormatBytes(double bytes);

}  // namespace octet
