#include "octet/router/request_features.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstring>

namespace octet::router {
namespace {

using nlohmann::json;

// Appends the text of a message "content" (string, or list of parts) to `out`;
// returns its byte count.
int64_t AppendContentText(const json& content, std::string* out) {
  int64_t bytes = 0;
  if (content.is_string()) {
    const auto& s = content.get_ref<const std::string&>();
    if (out) out->append(s);
    return static_cast<int64_t>(s.size());
  }
  if (content.is_array()) {
    for (const auto& part : content) {
      if (!part.is_object()) continue;
      auto it = part.find("text");
      if (it != part.end() && it->is_string()) {
        const auto& s = it->get_ref<const std::string&>();
        if (out) {
          if (!out->empty()) out->push_back('\n');
          out->append(s);
        }
        bytes += static_cast<int64_t>(s.size());
      }
    }
  }
  return bytes;
}

std::string Lower(std::string_view s) {
  std::string r(s);
  for (char& c : r) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

bool IsWordChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '+' || c == '#';
}

// True when `word` occurs in `text` with no word character on either side.
bool ContainsWord(std::string_view text, std::string_view word) {
  size_t pos = 0;
  while ((pos = text.find(word, pos)) != std::string_view::npos) {
    const bool left_ok = pos == 0 || !IsWordChar(text[pos - 1]);
    const size_t end = pos + word.size();
    const bool right_ok = end >= text.size() || !IsWordChar(text[end]);
    if (left_ok && right_ok) return true;
    pos += 1;
  }
  return false;
}

bool ContainsAny(std::string_view text, std::initializer_list<std::string_view> needles) {
  for (auto n : needles)
    if (text.find(n) != std::string_view::npos) return true;
  return false;
}

bool ContainsAnyWord(std::string_view text, std::initializer_list<std::string_view> words) {
  for (auto w : words)
    if (ContainsWord(text, w)) return true;
  return false;
}

// `text` is lower case.
bool LooksLikeCode(std::string_view text) {
  if (text.find("```") != std::string_view::npos) return true;
  if (ContainsAny(text, {"#include", "std::", "console.log", "printf(", "def ", "=>", "();",
                         "traceback (most recent", "segmentation fault", "stack trace",
                         "null pointer", "select * from", "import numpy", "fn main"}))
    return true;
  // Several lines that end like statements or blocks.
  int code_lines = 0;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back())))
      line.remove_suffix(1);
    if (!line.empty() && (line.back() == ';' || line.back() == '{' || line.back() == '}'))
      ++code_lines;
    start = end + 1;
  }
  if (code_lines >= 2) return true;
  const bool language = ContainsAnyWord(
      text, {"python", "javascript", "typescript", "c++", "rust", "golang", "java", "kotlin", "sql",
             "bash", "haskell", "c#", "cuda", "regex", "html", "css", "verilog"});
  const bool programming = ContainsAnyWord(
      text, {"function", "code",      "script",   "program", "class",     "compile",  "compiler",
             "bug",      "implement", "refactor", "debug",   "unit test", "library",  "query",
             "api",      "algorithm", "endpoint", "struct",  "thread",    "recursion"});
  return language && programming;
}

// `text` is lower case.
bool LooksLikeMath(std::string_view text) {
  if (ContainsAny(text, {"\\frac", "\\int", "\\sum", "\\sqrt", "$$", "\\lim", "\\prod", "\\binom",
                         "x^2", "^2", "∫", "∑", "√", "≤", "≥"}))
    return true;
  return ContainsAnyWord(
      text, {"prove",          "proof",         "integral",   "derivative",    "theorem",
             "lemma",          "equation",      "equations",  "probability",   "matrix",
             "eigenvalue",     "eigenvalues",   "polynomial", "modulo",        "prime",
             "primes",         "differentiate", "integrate",  "combinatorics", "inequality",
             "expected value", "variance",      "converge",   "converges"});
}

// Decodes one UTF-8 code point at s[i]; advances i. Invalid bytes yield U+FFFD.
uint32_t NextCodePoint(std::string_view s, size_t& i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  auto cont = [&](size_t k) -> int {
    if (i + k >= s.size()) return -1;
    const auto b = static_cast<unsigned char>(s[i + k]);
    return (b & 0xC0) == 0x80 ? (b & 0x3F) : -1;
  };
  if (b0 < 0x80) {
    i += 1;
    return b0;
  }
  if ((b0 & 0xE0) == 0xC0) {
    int c1 = cont(1);
    if (c1 >= 0) {
      i += 2;
      return ((b0 & 0x1Fu) << 6) | static_cast<uint32_t>(c1);
    }
  } else if ((b0 & 0xF0) == 0xE0) {
    int c1 = cont(1), c2 = cont(2);
    if (c1 >= 0 && c2 >= 0) {
      i += 3;
      return ((b0 & 0x0Fu) << 12) | (static_cast<uint32_t>(c1) << 6) | static_cast<uint32_t>(c2);
    }
  } else if ((b0 & 0xF8) == 0xF0) {
    int c1 = cont(1), c2 = cont(2), c3 = cont(3);
    if (c1 >= 0 && c2 >= 0 && c3 >= 0) {
      i += 4;
      return ((b0 & 0x07u) << 18) | (static_cast<uint32_t>(c1) << 12) |
             (static_cast<uint32_t>(c2) << 6) | static_cast<uint32_t>(c3);
    }
  }
  i += 1;
  return 0xFFFD;
}

enum Script {
  kLatin,
  kCjk,
  kCyrillic,
  kArabic,
  kDevanagari,
  kGreek,
  kHebrew,
  kThai,
  kHangul,
  kScriptCount
};
constexpr std::array<const char*, kScriptCount> kScriptNames = {
    "latin", "cjk", "cyrillic", "arabic", "devanagari", "greek", "hebrew", "thai", "hangul"};

int ScriptOf(uint32_t cp) {
  if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || (cp >= 0xC0 && cp <= 0x24F))
    return kLatin;
  if ((cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
      (cp >= 0x3040 && cp <= 0x30FF) || (cp >= 0xF900 && cp <= 0xFAFF))
    return kCjk;
  if (cp >= 0xAC00 && cp <= 0xD7AF) return kHangul;
  if (cp >= 0x0400 && cp <= 0x04FF) return kCyrillic;
  if (cp >= 0x0600 && cp <= 0x06FF) return kArabic;
  if (cp >= 0x0900 && cp <= 0x097F) return kDevanagari;
  if (cp >= 0x0370 && cp <= 0x03FF) return kGreek;
  if (cp >= 0x0590 && cp <= 0x05FF) return kHebrew;
  if (cp >= 0x0E00 && cp <= 0x0E7F) return kThai;
  return -1;
}

std::string DominantScript(std::string_view text) {
  std::array<int, kScriptCount> counts{};
  size_t i = 0;
  while (i < text.size()) {
    const int s = ScriptOf(NextCodePoint(text, i));
    if (s >= 0) ++counts[static_cast<size_t>(s)];
  }
  int best = -1, best_count = 0;
  for (int s = 0; s < kScriptCount; ++s) {
    // CJK text carries fewer characters per word: weigh it up so a Chinese
    // question with a few Latin identifiers still reads as CJK.
    const int weighted = counts[static_cast<size_t>(s)] * (s == kCjk || s == kHangul ? 3 : 1);
    if (weighted > best_count) {
      best = s;
      best_count = weighted;
    }
  }
  return best < 0 ? "none" : kScriptNames[static_cast<size_t>(best)];
}

int IntField(const json& request, const char* name) {
  auto it = request.find(name);
  if (it != request.end() && it->is_number_integer()) {
    const auto v = it->get<int64_t>();
    return static_cast<int>(std::clamp<int64_t>(v, 0, 1 << 30));
  }
  return 0;
}

}  // namespace

uint64_t Fnv1a64(std::string_view data, uint64_t seed) {
  uint64_t h = seed;
  for (unsigned char c : data) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

RequestFeatures ExtractFeatures(const json& request) {
  RequestFeatures f;
  if (!request.is_object()) return f;
  if (auto it = request.find("model"); it != request.end() && it->is_string())
    f.model = it->get<std::string>();
  if (auto it = request.find("stream"); it != request.end() && it->is_boolean())
    f.stream = it->get<bool>();
  f.max_tokens =
      std::max(IntField(request, "max_tokens"), IntField(request, "max_completion_tokens"));

  std::string last_user;
  auto messages = request.find("messages");
  if (messages != request.end() && messages->is_array()) {
    f.messages = static_cast<int>(messages->size());
    int depth = 0;
    for (const auto& m : *messages) {
      if (!m.is_object()) continue;
      std::string_view role;
      if (auto r = m.find("role"); r != m.end() && r->is_string())
        role = r->get_ref<const std::string&>();
      const json* content = nullptr;
      if (auto c = m.find("content"); c != m.end()) content = &*c;
      if (role == "user") {
        ++f.turns;
        depth = 0;
        last_user.clear();
        const int64_t n = content ? AppendContentText(*content, &last_user) : 0;
        f.prompt_bytes += n;
        f.last_user_bytes = n;
      } else {
        const int64_t n = content ? AppendContentText(*content, nullptr) : 0;
        f.prompt_bytes += n;
        if (role == "system" || role == "developer") f.system_bytes += n;
        if (role == "tool" || role == "function") ++f.tool_results;
        if (role == "assistant") {
          auto tc = m.find("tool_calls");
          const bool calls =
              (tc != m.end() && tc->is_array() && !tc->empty()) || m.contains("function_call");
          if (calls) {
            ++depth;
            if (tc != m.end() && tc->is_array()) {
              for (const auto& call : *tc) {
                if (!call.is_object()) continue;
                auto fn = call.find("function");
                if (fn == call.end() || !fn->is_object()) continue;
                auto args = fn->find("arguments");
                if (args != fn->end() && args->is_string())
                  f.prompt_bytes +=
                      static_cast<int64_t>(args->get_ref<const std::string&>().size());
              }
            }
          }
        }
      }
    }
    f.tool_call_depth = depth;
  } else if (auto prompt = request.find("prompt"); prompt != request.end()) {
    // /v1/completions: one turn of plain text.
    if (prompt->is_string()) {
      last_user = prompt->get<std::string>();
    } else if (prompt->is_array()) {
      for (const auto& p : *prompt)
        if (p.is_string()) {
          if (!last_user.empty()) last_user.push_back('\n');
          last_user.append(p.get_ref<const std::string&>());
        }
    }
    f.turns = last_user.empty() ? 0 : 1;
    f.messages = f.turns;
    f.prompt_bytes = static_cast<int64_t>(last_user.size());
    f.last_user_bytes = f.prompt_bytes;
  }

  auto collect_tools = [&](const json& list, bool wrapped) {
    for (const auto& t : list) {
      if (!t.is_object()) continue;
      const json* fn = &t;
      if (wrapped) {
        auto it = t.find("function");
        if (it == t.end() || !it->is_object()) continue;
        fn = &*it;
      }
      ++f.tools;
      if (auto n = fn->find("name"); n != fn->end() && n->is_string())
        f.tool_names.push_back(n->get<std::string>());
      if (auto d = fn->find("description"); d != fn->end() && d->is_string())
        f.prompt_bytes += static_cast<int64_t>(d->get_ref<const std::string&>().size());
    }
  };
  if (auto tools = request.find("tools"); tools != request.end() && tools->is_array())
    collect_tools(*tools, true);
  if (auto fns = request.find("functions"); fns != request.end() && fns->is_array())
    collect_tools(*fns, false);

  f.prompt_tokens = (f.prompt_bytes + 3) / 4;
  f.script = DominantScript(last_user);
  f.last_user_text = Lower(last_user);
  f.has_code = LooksLikeCode(f.last_user_text);
  f.has_math = LooksLikeMath(f.last_user_text);
  return f;
}

uint64_t ConversationPrefixHash(const json& request) {
  if (!request.is_object()) return 0;
  auto messages = request.find("messages");
  uint64_t h = Fnv1a64("octet-session");
  if (messages == request.end() || !messages->is_array()) {
    auto prompt = request.find("prompt");
    if (prompt == request.end() || !prompt->is_string()) return 0;
    return Fnv1a64(prompt->get_ref<const std::string&>(), h);
  }
  std::string text;
  for (const auto& m : *messages) {
    if (!m.is_object()) continue;
    std::string_view role;
    if (auto r = m.find("role"); r != m.end() && r->is_string())
      role = r->get_ref<const std::string&>();
    text.clear();
    if (auto c = m.find("content"); c != m.end()) AppendContentText(*c, &text);
    h = Fnv1a64(role, h);
    h = Fnv1a64(std::string_view("\x1f", 1), h);
    h = Fnv1a64(text, h);
    h = Fnv1a64(std::string_view("\x1e", 1), h);
    if (role == "user") return h == 0 ? 1 : h;
  }
  return 0;
}

}  // namespace octet::router
