// Loading tokenizer.json / tokenizer_config.json / generation_config.json.
// nlohmann::json exceptions stop here: every failure becomes a Status whose
// message names the file and the JSON path ("model.merges[12]") or the byte
// offset of a syntax error.
#include <algorithm>
#include <cstdio>

#include "octet/base/json.h"
#include "text/byte_level.h"
#include "text/tokenizer_impl.h"
#include "text/utf8.h"

namespace octet::engine::text {
namespace {

using json = nlohmann::json;

class Loader {
 public:
  explicit Loader(std::string_view source) : source_(source) {}

  Status Error(const std::string& path, const std::string& what) const {
    return InvalidArgumentError(source_ + ": " + (path.empty() ? "" : path + ": ") + what);
  }
  Status Unsupported(const std::string& path, const std::string& type,
                     const std::string& supported) const {
    return Error(path, "unsupported type '" + type + "' (supported: " + supported + ")");
  }

  Result<json> Parse(std::string_view text) const {
    try {
      return json::parse(text.begin(), text.end());
    } catch (const json::parse_error& e) {
      std::string what = e.what();
      // nlohmann's message starts with "[json.exception.parse_error.101] "; keep the rest.
      const size_t bracket = what.find("] ");
      if (bracket != std::string::npos) what = what.substr(bracket + 2);
      return Error("", "not valid JSON at byte " + std::to_string(e.byte) + ": " + what);
    } catch (const json::exception& e) {
      // Valid syntax the parser still refuses: a number beyond double's range.
      return Error("", std::string("not usable JSON: ") + e.what());
    }
  }

  static std::string Key(const std::string& path, std::string_view key) {
    return path.empty() ? std::string(key) : path + "." + std::string(key);
  }
  static std::string Index(const std::string& path, size_t i) {
    return path + "[" + std::to_string(i) + "]";
  }

  // Optional typed fields: absent or null gives the fallback.
  Result<bool> Bool(const json& obj, const std::string& path, std::string_view key,
                    bool fallback) const {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return fallback;
    if (!it->is_boolean())
      return Error(Key(path, key), "expected true or false, found " + TypeName(*it));
    return it->get<bool>();
  }
  Result<std::string> String(const json& obj, const std::string& path, std::string_view key,
                             std::string fallback) const {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return fallback;
    if (!it->is_string()) return Error(Key(path, key), "expected a string, found " + TypeName(*it));
    return it->get<std::string>();
  }
  Result<const json*> Object(const json& obj, const std::string& path, std::string_view key,
                             bool required) const {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) {
      if (required) return Error(Key(path, key), "missing");
      return static_cast<const json*>(nullptr);
    }
    if (!it->is_object())
      return Error(Key(path, key), "expected an object, found " + TypeName(*it));
    return &*it;
  }
  Result<const json*> Array(const json& obj, const std::string& path, std::string_view key) const {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return Error(Key(path, key), "missing");
    if (!it->is_array()) return Error(Key(path, key), "expected an array, found " + TypeName(*it));
    return &*it;
  }
  // A tokenizer.json's ids index tables sized by the largest one, so such a
  // file may not name an id far beyond the tokens it lists (SetTokenCount):
  // one stray 10^9 would otherwise allocate gigabytes before any other check
  // ran. Real files number their tokens densely; the allowance leaves room for
  // reserved gaps. Other files (generation_config.json) only list ids, which
  // the model's vocabulary checks later: there the bound is 2^30.
  static constexpr int64_t kIdGapAllowance = 65536;
  void SetTokenCount(int64_t listed) { listed_ = listed; }

  Result<TokenId> Id(const json& v, const std::string& path) const {
    if (!v.is_number_integer()) return Error(path, "expected a token id, found " + TypeName(v));
    const int64_t id = v.get<int64_t>();
    const int64_t limit = listed_ >= 0 ? listed_ + kIdGapAllowance : int64_t{1} << 30;
    if (id < 0 || id >= limit) {
      std::string why = "token id " + std::to_string(id) + " is out of range";
      if (listed_ >= 0) {
        why += " (the file lists " + std::to_string(listed_) + " tokens; ids must be below " +
               std::to_string(limit) + ")";
      }
      return Error(path, why);
    }
    return static_cast<TokenId>(id);
  }
  static std::string TypeName(const json& v) {
    if (v.is_number_integer()) return "a number";
    if (v.is_number()) return "a number";
    if (v.is_string()) return "a string";
    if (v.is_array()) return "an array";
    if (v.is_object()) return "an object";
    if (v.is_boolean()) return "a boolean";
    return "null";
  }
  Result<std::string> Type(const json& obj, const std::string& path) const {
    auto it = obj.find("type");
    if (it == obj.end() || !it->is_string()) return Error(Key(path, "type"), "missing");
    return it->get<std::string>();
  }

  Status LoadModel(const json& root, Tokenizer::Impl* t);
  Status LoadAddedTokens(const json& root, Tokenizer::Impl* t);
  Status LoadNormalizer(const json& node, const std::string& path, Tokenizer::Impl* t);
  Status LoadPreTokenizer(const json& node, const std::string& path, Tokenizer::Impl* t);
  Status LoadPostProcessor(const json& node, const std::string& path, Tokenizer::Impl* t);
  Status LoadDecoder(const json& node, const std::string& path);

 private:
  std::string source_;
  int64_t listed_ = -1;  // tokens a tokenizer.json lists; -1: not one
};

// Grows the id tables to hold `id`.
void EnsureId(Tokenizer::Impl* t, TokenId id) {
  if (static_cast<size_t>(id) >= t->id_flags.size()) {
    t->id_flags.resize(id + 1, 0);
    t->id_string.resize(id + 1);
    t->id_bytes.resize(id + 1);
  }
}

// What Hugging Face's ByteLevel decoder gives for one token: the bytes its
// characters stand for, or the token's own UTF-8 when a character is not in
// the byte-level alphabet.
std::string DecodedBytes(const std::string& token) {
  auto bytes = ByteLevelToBytes(token);
  return bytes ? *std::move(bytes) : token;
}

Status Loader::LoadModel(const json& root, Tokenizer::Impl* t) {
  OCTET_ASSIGN_OR_RETURN(const json* model, Object(root, "", "model", /*required=*/true));
  const std::string path = "model";
  std::string type;
  if (auto it = model->find("type"); it != model->end() && it->is_string()) {
    type = it->get<std::string>();
  } else if (model->contains("merges")) {
    type = "BPE";  // older files omit the type; HF infers it from the fields
  }
  if (type != "BPE") {
    return Unsupported(Key(path, "type"), type.empty() ? "(none)" : type,
                       "BPE; WordPiece, WordLevel and Unigram models are not implemented");
  }
  if (auto it = model->find("dropout"); it != model->end() && !it->is_null()) {
    if (!it->is_number() || it->get<double>() > 0.0) {
      return Error(Key(path, "dropout"),
                   "BPE dropout is not supported (it is a training-time option)");
    }
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    OCTET_ASSIGN_OR_RETURN(std::string v, String(*model, path, key, ""));
    if (!v.empty()) {
      return Error(Key(path, key), "'" + v + "' is not supported (byte-level BPE does not use it)");
    }
  }
  BpeModel::Options options;
  OCTET_ASSIGN_OR_RETURN(options.ignore_merges, Bool(*model, path, "ignore_merges", false));
  OCTET_ASSIGN_OR_RETURN(options.byte_fallback, Bool(*model, path, "byte_fallback", false));
  OCTET_ASSIGN_OR_RETURN(options.fuse_unk, Bool(*model, path, "fuse_unk", false));
  OCTET_ASSIGN_OR_RETURN(std::string unk, String(*model, path, "unk_token", ""));

  // vocab: {"token": id}
  OCTET_ASSIGN_OR_RETURN(const json* vocab, Object(*model, path, "vocab", /*required=*/true));
  t->vocab_by_string.Reserve(vocab->size());
  t->model.ReserveTokens(vocab->size());
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    const std::string& token = it.key();
    const std::string vpath = Key(path, "vocab") + "[" + json(token).dump() + "]";
    OCTET_ASSIGN_OR_RETURN(TokenId id, Id(it.value(), vpath));
    if (!IsValidUtf8(token)) return Error(vpath, "token is not valid UTF-8");
    EnsureId(t, id);
    if (!(t->id_flags[id] & Tokenizer::Impl::kExists)) {
      t->id_flags[id] = Tokenizer::Impl::kExists;
      t->id_string[id] = token;
      t->id_bytes[id] = DecodedBytes(token);
    }
    t->vocab_by_string.Insert(token, id);
    if (auto bytes = ByteLevelToBytes(token)) t->model.AddToken(*bytes, id);
    // <0x41>-style byte tokens for byte_fallback.
    if (token.size() == 6 && token.compare(0, 3, "<0x") == 0 && token[5] == '>') {
      unsigned value = 0;
      if (std::sscanf(token.c_str() + 3, "%2X", &value) == 1) {
        t->model.SetByteFallbackToken(static_cast<uint8_t>(value), id);
      }
    }
  }
  if (!unk.empty()) {
    options.unk_id = t->vocab_by_string.Find(unk);
    if (!options.unk_id)
      return Error(Key(path, "unk_token"), "'" + unk + "' is not in model.vocab");
  }
  t->model.SetOptions(options);

  // merges: ["a b", ...] (tokenizers < 0.20) or [["a", "b"], ...]
  OCTET_ASSIGN_OR_RETURN(const json* merges, Array(*model, path, "merges"));
  MergeTable& table = t->model.merges();
  table.Reserve(merges->size());
  std::string left, right, joined;
  for (size_t i = 0; i < merges->size(); ++i) {
    const json& m = (*merges)[i];
    const std::string mpath = Index(Key(path, "merges"), i);
    if (m.is_string()) {
      const std::string& s = m.get_ref<const std::string&>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
        return Error(mpath,
                     "expected \"left right\" (two tokens and one space), found " + m.dump());
      }
      left.assign(s, 0, space);
      right.assign(s, space + 1, std::string::npos);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      left = m[0].get_ref<const std::string&>();
      right = m[1].get_ref<const std::string&>();
    } else {
      return Error(mpath, "expected \"left right\" or [\"left\", \"right\"], found " + TypeName(m));
    }
    joined.assign(left).append(right);
    const std::optional<TokenId> l = t->vocab_by_string.Find(left);
    const std::optional<TokenId> r = t->vocab_by_string.Find(right);
    const std::optional<TokenId> merged = t->vocab_by_string.Find(joined);
    if (!l) return Error(mpath, "'" + left + "' is not in model.vocab");
    if (!r) return Error(mpath, "'" + right + "' is not in model.vocab");
    if (!merged) return Error(mpath, "the merged token '" + joined + "' is not in model.vocab");
    table.Insert(*l, *r, {static_cast<int32_t>(i), *merged});
  }
  return Status::Ok();
}

Status Loader::LoadAddedTokens(const json& root, Tokenizer::Impl* t) {
  auto it = root.find("added_tokens");
  if (it == root.end() || it->is_null()) return Status::Ok();
  if (!it->is_array()) return Error("added_tokens", "expected an array, found " + TypeName(*it));
  std::vector<AddedToken> raw, normalized;
  for (size_t i = 0; i < it->size(); ++i) {
    const json& e = (*it)[i];
    const std::string path = Index("added_tokens", i);
    if (!e.is_object()) return Error(path, "expected an object, found " + TypeName(e));
    AddedToken tk;
    auto idv = e.find("id");
    if (idv == e.end()) return Error(Key(path, "id"), "missing");
    OCTET_ASSIGN_OR_RETURN(tk.id, Id(*idv, Key(path, "id")));
    OCTET_ASSIGN_OR_RETURN(tk.content, String(e, path, "content", ""));
    if (tk.content.empty()) return Error(Key(path, "content"), "missing or empty");
    if (!IsValidUtf8(tk.content)) return Error(Key(path, "content"), "not valid UTF-8");
    OCTET_ASSIGN_OR_RETURN(tk.special, Bool(e, path, "special", false));
    // HF's default: special tokens are not normalized, others are.
    OCTET_ASSIGN_OR_RETURN(tk.normalized, Bool(e, path, "normalized", !tk.special));
    OCTET_ASSIGN_OR_RETURN(tk.lstrip, Bool(e, path, "lstrip", false));
    OCTET_ASSIGN_OR_RETURN(tk.rstrip, Bool(e, path, "rstrip", false));
    OCTET_ASSIGN_OR_RETURN(tk.single_word, Bool(e, path, "single_word", false));
    EnsureId(t, tk.id);
    t->id_flags[tk.id] = Tokenizer::Impl::kExists | Tokenizer::Impl::kAdded |
                         (tk.special ? Tokenizer::Impl::kSpecial : 0);
    t->id_string[tk.id] = tk.content;
    t->id_bytes[tk.id] = DecodedBytes(tk.content);
    t->added_by_content[tk.content] = tk.id;
    (tk.normalized ? normalized : raw).push_back(tk);
    t->added.push_back(std::move(tk));
  }
  t->raw_matcher.Build(raw);
  // Normalized tokens are matched in normalized text, so match their normal form.
  for (AddedToken& tk : normalized) {
    for (const UnicodeNormalizer& n : t->normalizers) {
      std::string out;
      n.Normalize(tk.content, &out);
      tk.content = std::move(out);
    }
  }
  t->normalized_matcher.Build(normalized);
  return Status::Ok();
}

Status Loader::LoadNormalizer(const json& node, const std::string& path, Tokenizer::Impl* t) {
  if (node.is_null()) return Status::Ok();
  if (!node.is_object()) return Error(path, "expected an object, found " + TypeName(node));
  OCTET_ASSIGN_OR_RETURN(std::string type, Type(node, path));
  if (type == "Sequence") {
    OCTET_ASSIGN_OR_RETURN(const json* list, Array(node, path, "normalizers"));
    for (size_t i = 0; i < list->size(); ++i) {
      OCTET_RETURN_IF_ERROR(LoadNormalizer((*list)[i], Index(Key(path, "normalizers"), i), t));
    }
    return Status::Ok();
  }
  NormalForm form;
  if (type == "NFC") {
    form = NormalForm::kNFC;
  } else if (type == "NFD") {
    form = NormalForm::kNFD;
  } else if (type == "NFKC") {
    form = NormalForm::kNFKC;
  } else if (type == "NFKD") {
    form = NormalForm::kNFKD;
  } else {
    return Unsupported(path, type, "NFC, NFD, NFKC, NFKD, Sequence");
  }
  auto n = UnicodeNormalizer::Create(form);
  if (!n.ok()) return n.status().WithContext(source_ + ": " + path);
  t->normalizers.push_back(*n);
  return Status::Ok();
}

Status Loader::LoadPreTokenizer(const json& node, const std::string& path, Tokenizer::Impl* t) {
  if (!node.is_object()) return Error(path, "expected an object, found " + TypeName(node));
  OCTET_ASSIGN_OR_RETURN(std::string type, Type(node, path));
  if (!t->pre_tokenizer.empty() &&
      t->pre_tokenizer.back().kind == PreTokenizeStep::Kind::kByteLevel && type != "Sequence") {
    return Error(path, "a '" + type +
                           "' step after ByteLevel is not supported (it would see "
                           "byte-level characters, not text)");
  }
  if (type == "Sequence") {
    OCTET_ASSIGN_OR_RETURN(const json* list, Array(node, path, "pretokenizers"));
    for (size_t i = 0; i < list->size(); ++i) {
      OCTET_RETURN_IF_ERROR(LoadPreTokenizer((*list)[i], Index(Key(path, "pretokenizers"), i), t));
    }
    return Status::Ok();
  }
  PreTokenizeStep step;
  if (type == "Split") {
    step.kind = PreTokenizeStep::Kind::kSplit;
    OCTET_ASSIGN_OR_RETURN(const json* pattern, Object(node, path, "pattern", /*required=*/true));
    const std::string ppath = Key(path, "pattern");
    if (auto re = pattern->find("Regex"); re != pattern->end() && re->is_string()) {
      auto compiled = SplitRegex::Compile(re->get<std::string>());
      if (!compiled.ok()) return Error(Key(ppath, "Regex"), compiled.status().message());
      step.regex = *std::move(compiled);
    } else if (auto s = pattern->find("String"); s != pattern->end() && s->is_string()) {
      step.literal = s->get<std::string>();
      if (step.literal.empty()) return Error(Key(ppath, "String"), "empty pattern");
    } else {
      return Error(ppath, "expected {\"Regex\": \"...\"} or {\"String\": \"...\"}");
    }
    OCTET_ASSIGN_OR_RETURN(std::string behavior, String(node, path, "behavior", ""));
    if (behavior == "Isolated") {
      step.behavior = SplitBehavior::kIsolated;
    } else if (behavior == "Removed") {
      step.behavior = SplitBehavior::kRemoved;
    } else if (behavior == "MergedWithPrevious") {
      step.behavior = SplitBehavior::kMergedWithPrevious;
    } else if (behavior == "MergedWithNext") {
      step.behavior = SplitBehavior::kMergedWithNext;
    } else if (behavior == "Contiguous") {
      step.behavior = SplitBehavior::kContiguous;
    } else {
      return Error(Key(path, "behavior"),
                   "unknown behavior '" + behavior +
                       "' (Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous)");
    }
    OCTET_ASSIGN_OR_RETURN(step.invert, Bool(node, path, "invert", false));
  } else if (type == "ByteLevel") {
    step.kind = PreTokenizeStep::Kind::kByteLevel;
    // HF's defaults when the fields are absent: add_prefix_space and use_regex true.
    OCTET_ASSIGN_OR_RETURN(step.add_prefix_space, Bool(node, path, "add_prefix_space", true));
    OCTET_ASSIGN_OR_RETURN(bool use_regex, Bool(node, path, "use_regex", true));
    if (use_regex) {
      auto compiled = SplitRegex::Compile(kGpt2SplitPattern);
      if (!compiled.ok()) return compiled.status();
      step.regex = *std::move(compiled);
    }
  } else {
    return Unsupported(path, type, "Sequence, Split, ByteLevel");
  }
  t->pre_tokenizer.push_back(std::move(step));
  return Status::Ok();
}

Status Loader::LoadPostProcessor(const json& node, const std::string& path, Tokenizer::Impl* t) {
  if (node.is_null()) return Status::Ok();
  if (!node.is_object()) return Error(path, "expected an object, found " + TypeName(node));
  OCTET_ASSIGN_OR_RETURN(std::string type, Type(node, path));
  if (type == "ByteLevel") return Status::Ok();  // offsets only; ids unchanged
  if (type == "Sequence") {
    OCTET_ASSIGN_OR_RETURN(const json* list, Array(node, path, "processors"));
    for (size_t i = 0; i < list->size(); ++i) {
      OCTET_RETURN_IF_ERROR(LoadPostProcessor((*list)[i], Index(Key(path, "processors"), i), t));
    }
    return Status::Ok();
  }
  if (!t->post_prefix.empty() || !t->post_suffix.empty()) {
    return Error(path, "more than one post-processor adds tokens");
  }
  if (type == "TemplateProcessing") {
    // single: [{"SpecialToken": {"id": "<s>"}}, {"Sequence": {"id": "A"}}, ...]
    OCTET_ASSIGN_OR_RETURN(const json* single, Array(node, path, "single"));
    OCTET_ASSIGN_OR_RETURN(const json* specials, Object(node, path, "special_tokens", false));
    bool seen_sequence = false;
    for (size_t i = 0; i < single->size(); ++i) {
      const json& item = (*single)[i];
      const std::string ipath = Index(Key(path, "single"), i);
      if (item.is_object() && item.contains("Sequence")) {
        if (seen_sequence) return Error(ipath, "the sequence appears twice");
        seen_sequence = true;
        continue;
      }
      if (!item.is_object() || !item.contains("SpecialToken") ||
          !item["SpecialToken"].is_object() || !item["SpecialToken"].contains("id") ||
          !item["SpecialToken"]["id"].is_string()) {
        return Error(ipath, "expected {\"SpecialToken\": {\"id\": ...}} or {\"Sequence\": ...}");
      }
      const std::string name = item["SpecialToken"]["id"].get<std::string>();
      std::vector<TokenId> ids;
      const json* entry = nullptr;
      if (specials) {
        auto e = specials->find(name);
        if (e != specials->end()) entry = &*e;
      }
      if (entry && entry->is_object() && entry->contains("ids") && (*entry)["ids"].is_array()) {
        const json& list = (*entry)["ids"];
        for (size_t k = 0; k < list.size(); ++k) {
          OCTET_ASSIGN_OR_RETURN(
              TokenId id,
              Id(list[k], Index(Key(Key(Key(path, "special_tokens"), name), "ids"), k)));
          ids.push_back(id);
        }
      } else if (auto a = t->added_by_content.find(name); a != t->added_by_content.end()) {
        ids.push_back(a->second);
      } else {
        return Error(ipath, "special token '" + name + "' is not defined in special_tokens");
      }
      auto& dst = seen_sequence ? t->post_suffix : t->post_prefix;
      dst.insert(dst.end(), ids.begin(), ids.end());
    }
    if (!seen_sequence) return Error(Key(path, "single"), "has no {\"Sequence\": {\"id\": \"A\"}}");
    return Status::Ok();
  }
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    // {"cls": ["<s>", 0], "sep": ["</s>", 2]}: single = cls A sep.
    for (const char* key : {"cls", "sep"}) {
      auto it = node.find(key);
      if (it == node.end() || !it->is_array() || it->size() != 2) {
        return Error(Key(path, key), "expected [\"token\", id]");
      }
      OCTET_ASSIGN_OR_RETURN(TokenId id, Id((*it)[1], Index(Key(path, key), 1)));
      (std::string(key) == "cls" ? t->post_prefix : t->post_suffix).push_back(id);
    }
    return Status::Ok();
  }
  return Unsupported(path, type,
                     "ByteLevel, TemplateProcessing, RobertaProcessing, BertProcessing, Sequence");
}

Status Loader::LoadDecoder(const json& node, const std::string& path) {
  if (node.is_null()) {
    return Error(path, "missing (byte-level BPE needs a ByteLevel decoder)");
  }
  if (!node.is_object()) return Error(path, "expected an object, found " + TypeName(node));
  OCTET_ASSIGN_OR_RETURN(std::string type, Type(node, path));
  if (type == "ByteLevel") return Status::Ok();
  if (type == "Sequence") {
    OCTET_ASSIGN_OR_RETURN(const json* list, Array(node, path, "decoders"));
    for (size_t i = 0; i < list->size(); ++i) {
      OCTET_RETURN_IF_ERROR(LoadDecoder((*list)[i], Index(Key(path, "decoders"), i)));
    }
    return Status::Ok();
  }
  return Unsupported(path, type, "ByteLevel, Sequence of ByteLevel");
}

std::string Describe(const Tokenizer::Impl& t) {
  std::string d = "BPE, " + std::to_string(t.id_flags.size()) + " ids (" +
                  std::to_string(t.added.size()) + " added), " +
                  std::to_string(t.model.merges().size()) + " merges";
  for (const UnicodeNormalizer& n : t.normalizers) {
    static const char* kNames[] = {"NFC", "NFD", "NFKC", "NFKD"};
    d += ", ";
    d += kNames[static_cast<int>(n.form())];
  }
  for (const PreTokenizeStep& s : t.pre_tokenizer) {
    if (s.kind == PreTokenizeStep::Kind::kSplit) {
      d += s.regex ? (s.regex->jit() ? ", split regex (JIT)" : ", split regex") : ", split string";
    } else {
      d += ", byte-level";
      if (s.add_prefix_space) d += " (prefix space)";
      if (s.regex) d += " (GPT-2 regex)";
    }
  }
  if (!t.post_prefix.empty() || !t.post_suffix.empty()) d += ", template post-processor";
  return d;
}

}  // namespace

Result<std::unique_ptr<Tokenizer::Impl>> ParseTokenizerJson(std::string_view text,
                                                            std::string_view source) {
  Loader loader(source);
  OCTET_ASSIGN_OR_RETURN(json root, loader.Parse(text));
  if (!root.is_object()) return loader.Error("", "expected a JSON object at the top");
  auto t = std::make_unique<Tokenizer::Impl>();
  try {
    if (auto it = root.find("normalizer"); it != root.end()) {
      OCTET_RETURN_IF_ERROR(loader.LoadNormalizer(*it, "normalizer", t.get()));
    }
    auto pre = root.find("pre_tokenizer");
    if (pre == root.end() || pre->is_null()) {
      return loader.Error("pre_tokenizer", "missing (only byte-level BPE is supported)");
    }
    OCTET_RETURN_IF_ERROR(loader.LoadPreTokenizer(*pre, "pre_tokenizer", t.get()));
    if (t->pre_tokenizer.empty() ||
        t->pre_tokenizer.back().kind != PreTokenizeStep::Kind::kByteLevel) {
      return loader.Error("pre_tokenizer",
                          "has no ByteLevel step (only byte-level BPE is supported; "
                          "SentencePiece-style Metaspace tokenizers are not)");
    }
    {
      int64_t listed = 0;
      if (auto m = root.find("model"); m != root.end() && m->is_object()) {
        if (auto v = m->find("vocab"); v != m->end() && v->is_object()) listed += v->size();
      }
      if (auto a = root.find("added_tokens"); a != root.end() && a->is_array()) {
        listed += a->size();
      }
      loader.SetTokenCount(listed);
    }
    OCTET_RETURN_IF_ERROR(loader.LoadModel(root, t.get()));
    OCTET_RETURN_IF_ERROR(loader.LoadAddedTokens(root, t.get()));
    if (auto it = root.find("post_processor"); it != root.end()) {
      OCTET_RETURN_IF_ERROR(loader.LoadPostProcessor(*it, "post_processor", t.get()));
    }
    auto dec = root.find("decoder");
    OCTET_RETURN_IF_ERROR(loader.LoadDecoder(dec == root.end() ? json() : *dec, "decoder"));
    for (const auto* ids : {&t->post_prefix, &t->post_suffix}) {
      for (TokenId id : *ids) {
        if (static_cast<size_t>(id) >= t->id_flags.size() ||
            !(t->id_flags[id] & Tokenizer::Impl::kExists)) {
          return loader.Error("post_processor",
                              "adds token id " + std::to_string(id) + ", which is not a token");
        }
      }
    }
  } catch (const json::exception& e) {
    // Typed accessors above check before they read; this is a last line of defence.
    return loader.Error("", std::string("unexpected JSON content: ") + e.what());
  }
  t->description = Describe(*t);
  return t;
}

namespace {

// "bos_token": "<s>" or {"content": "<s>", ...} or null.
std::string TokenText(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object()) {
    auto it = v.find("content");
    if (it != v.end() && it->is_string()) return it->get<std::string>();
  }
  return "";
}

}  // namespace

Status ParseTokenizerConfig(std::string_view text, std::string_view source,
                            TokenizerConfig* config) {
  Loader loader(source);
  OCTET_ASSIGN_OR_RETURN(json root, loader.Parse(text));
  if (!root.is_object()) return loader.Error("", "expected a JSON object at the top");
  try {
    if (auto it = root.find("bos_token"); it != root.end()) config->bos_token = TokenText(*it);
    if (auto it = root.find("eos_token"); it != root.end()) config->eos_token = TokenText(*it);
    if (auto it = root.find("pad_token"); it != root.end()) config->pad_token = TokenText(*it);
    if (auto it = root.find("add_bos_token"); it != root.end() && it->is_boolean()) {
      config->add_bos_token = it->get<bool>();
    }
    if (auto it = root.find("chat_template"); it != root.end()) {
      if (it->is_string()) {
        config->chat_template = it->get<std::string>();
      } else if (it->is_array()) {
        // [{"name": "default", "template": "..."}, {"name": "tool_use", ...}]
        for (size_t i = 0; i < it->size(); ++i) {
          const json& e = (*it)[i];
          if (!e.is_object() || !e.contains("template") || !e["template"].is_string()) {
            return loader.Error(Loader::Index("chat_template", i),
                                "expected {\"name\": ..., \"template\": \"...\"}");
          }
          const bool is_default = e.contains("name") && e["name"] == "default";
          if (config->chat_template.empty() || is_default) {
            config->chat_template = e["template"].get<std::string>();
          }
        }
      } else if (!it->is_null()) {
        return loader.Error("chat_template", "expected a string or a list of named templates");
      }
    }
  } catch (const json::exception& e) {
    return loader.Error("", std::string("unexpected JSON content: ") + e.what());
  }
  return Status::Ok();
}

Status ParseGenerationConfig(std::string_view text, std::string_view source,
                             TokenizerConfig* config) {
  Loader loader(source);
  OCTET_ASSIGN_OR_RETURN(json root, loader.Parse(text));
  if (!root.is_object()) return loader.Error("", "expected a JSON object at the top");
  auto it = root.find("eos_token_id");
  if (it == root.end() || it->is_null()) return Status::Ok();
  if (it->is_array()) {
    for (size_t i = 0; i < it->size(); ++i) {
      OCTET_ASSIGN_OR_RETURN(TokenId id, loader.Id((*it)[i], Loader::Index("eos_token_id", i)));
      config->generation_eos_ids.push_back(id);
    }
  } else {
    OCTET_ASSIGN_OR_RETURN(TokenId id, loader.Id(*it, "eos_token_id"));
    config->generation_eos_ids.push_back(id);
  }
  return Status::Ok();
}

}  // namespace octet::engine::text
