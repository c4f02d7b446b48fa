// `octet tokenize --tokenizer PATH [--decode] [--add-special] [--json]`
//
// Reads one JSON array from stdin: strings to encode, or (with --decode) id
// arrays to decode, and prints one JSON array of the results on stdout: id
// arrays, or strings. PATH is a model folder or a tokenizer.json. No special
// tokens are added unless --add-special; special tokens written in the text
// are recognised unless --split-special. The output is JSON with or without
// --json (the flag is accepted for uniformity with the other commands).
// Exit codes: 2 for bad flags or bad input (not a JSON array of the right
// kind, an id outside the vocabulary), 1 when the tokenizer cannot be loaded.
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "command.h"
#include "octet/base/args.h"
#include "octet/base/json.h"
#include "octet/engine/tokenizer.h"

namespace octet::cli {
namespace {

using json = nlohmann::json;

int Fail(int code, const std::string& message) {
  std::cerr << WithProgram("octet tokenize", message) << "\n";
  return code;
}

}  // namespace

int RunTokenize(const std::vector<std::string>& args) {
  ArgParser parser("octet tokenize",
                   "Encode strings to token ids (or decode id arrays) with a Hugging Face "
                   "tokenizer.json. Reads a JSON array on stdin, prints a JSON array on stdout.");
  parser.Option("tokenizer", "PATH", "model folder or tokenizer.json")
      .Flag("decode", "input is an array of id arrays; print the decoded strings")
      .Flag("add-special", "encode: add the post-processor's special tokens (e.g. a BOS)")
      .Flag("split-special", "encode: treat special tokens written in the text as plain text")
      .Flag("skip-special", "decode: leave special tokens out of the text")
      .Flag("json", "print JSON (always the case; accepted for uniformity)");
  if (Status s = parser.Parse(args); !s.ok()) return ParseUsageError(s);
  if (parser.help_requested()) {
    std::cout << parser.Usage();
    return kExitOk;
  }
  const std::string path = parser.GetString("tokenizer");
  if (path.empty()) return Fail(kExitUsage, "--tokenizer PATH is required (see --help)");
  const bool decode = parser.GetFlag("decode");

  // Parse stdin before loading the tokenizer: bad input is reported fast.
  const std::string input((std::istreambuf_iterator<char>(std::cin)),
                          std::istreambuf_iterator<char>());
  json items;
  try {
    items = json::parse(input);
  } catch (const json::parse_error& e) {
    return Fail(kExitUsage, "stdin is not valid JSON (at byte " + std::to_string(e.byte) +
                                "); expected a JSON array of " +
                                (decode ? "id arrays" : "strings"));
  } catch (const json::exception& e) {  // a number beyond double's range (out_of_range.406)
    return Fail(kExitUsage, std::string("stdin is not usable JSON: ") + e.what());
  }
  if (!items.is_array()) {
    return Fail(kExitUsage,
                std::string("stdin must be a JSON array of ") + (decode ? "id arrays" : "strings"));
  }
  std::vector<std::vector<engine::TokenId>> id_lists;
  for (size_t i = 0; i < items.size(); ++i) {
    const json& item = items[i];
    if (!decode) {
      if (!item.is_string())
        return Fail(kExitUsage, "item " + std::to_string(i) + " is not a string");
      continue;
    }
    if (!item.is_array())
      return Fail(kExitUsage, "item " + std::to_string(i) + " is not an id array");
    std::vector<engine::TokenId> ids;
    for (size_t k = 0; k < item.size(); ++k) {
      const json& v = item[k];
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX) {
        return Fail(kExitUsage, "item " + std::to_string(i) + "[" + std::to_string(k) +
                                    "] is not a token id: " + v.dump());
      }
      ids.push_back(static_cast<engine::TokenId>(v.get<int64_t>()));
    }
    id_lists.push_back(std::move(ids));
  }

  auto tokenizer = engine::Tokenizer::Load(path);
  if (!tokenizer.ok()) return Fail(kExitFailure, tokenizer.status().ToString());

  json out = json::array();
  if (decode) {
    engine::DecodeOptions options;
    options.skip_special_tokens = parser.GetFlag("skip-special");
    for (size_t i = 0; i < id_lists.size(); ++i) {
      auto text = tokenizer->Decode(id_lists[i], options);
      if (!text.ok())
        return Fail(kExitUsage, "item " + std::to_string(i) + ": " + text.status().message());
      out.push_back(*std::move(text));
    }
  } else {
    engine::EncodeOptions options;
    options.add_special_tokens = parser.GetFlag("add-special");
    options.split_special_tokens = parser.GetFlag("split-special");
    for (const json& item : items) {
      out.push_back(tokenizer->Encode(item.get_ref<const std::string&>(), options));
    }
  }
  // Decoded text is valid UTF-8 (invalid sequences became U+FFFD); `replace`
  // only guards the dump itself.
  std::cout << out.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
  return std::cout.good() ? kExitOk : kExitFailure;
}

}  // namespace octet::cli
