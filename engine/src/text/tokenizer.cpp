#include "octet/engine/tokenizer.h"

#include <algorithm>

#include "octet/base/file_util.h"
#include "octet/engine/chat_template.h"
#include "text/tokenizer_impl.h"
#include "text/utf8.h"

namespace octet::engine {

using text::AddedMatch;
using text::EncodeScratch;
using text::MatchSpan;
using text::PreTokenizeStep;
using text::SplitBehavior;

namespace {

// Borrows a scratch object from the tokenizer's pool for one call.
class ScratchLease {
 public:
  explicit ScratchLease(const Tokenizer::Impl& t) : t_(t) {
    MutexLock lock(t_.pool_mu);
    if (!t_.pool.empty()) {
      scratch_ = std::move(t_.pool.back());
      t_.pool.pop_back();
    }
    if (!scratch_) scratch_ = std::make_unique<EncodeScratch>();
  }
  ~ScratchLease() {
    MutexLock lock(t_.pool_mu);
    t_.pool.push_back(std::move(scratch_));
  }
  EncodeScratch* operator->() { return scratch_.get(); }
  EncodeScratch* get() { return scratch_.get(); }

 private:
  const Tokenizer::Impl& t_;
  std::unique_ptr<EncodeScratch> scratch_;
};

// Hugging Face's Split: the matches and the gaps between them, each marked as
// a match (after `invert`), combined according to `behavior`; empty pieces
// are dropped.
void SplitPiece(std::string_view piece, const PreTokenizeStep& step, EncodeScratch* scratch,
                std::vector<std::string_view>* out) {
  std::vector<MatchSpan>& spans = scratch->spans;
  spans.clear();
  if (step.regex) {
    step.regex->FindAll(piece, &scratch->regex, &spans);
  } else {
    size_t from = 0;
    while (true) {
      const size_t at = piece.find(step.literal, from);
      if (at == std::string_view::npos) break;
      spans.push_back({at, at + step.literal.size()});
      from = at + step.literal.size();
    }
  }
  if (spans.empty()) {  // the common case for short pieces: nothing to cut
    // The whole piece is one gap (one match when inverted).
    if (!(step.invert && step.behavior == SplitBehavior::kRemoved)) out->push_back(piece);
    return;
  }
  if (step.behavior == SplitBehavior::kIsolated) {  // every tokenizer we know: no merging
    size_t prev = 0;
    for (const MatchSpan& m : spans) {
      if (m.begin > prev) out->push_back(piece.substr(prev, m.begin - prev));
      if (m.end > m.begin) out->push_back(piece.substr(m.begin, m.end - m.begin));
      prev = std::max(prev, m.end);
    }
    if (prev < piece.size()) out->push_back(piece.substr(prev));
    return;
  }
  // (begin, end, is_match) covering the piece.
  using Part = text::SplitPart;
  std::vector<Part>& parts = scratch->parts;
  parts.clear();
  size_t prev = 0;
  for (const MatchSpan& m : spans) {
    if (m.begin > prev) parts.push_back({prev, m.begin, step.invert});
    parts.push_back({m.begin, m.end, !step.invert});
    prev = m.end;
  }
  if (prev < piece.size()) parts.push_back({prev, piece.size(), step.invert});

  std::vector<Part>& merged = scratch->merged_parts;
  merged.clear();
  switch (step.behavior) {
    case SplitBehavior::kIsolated:
      merged = parts;
      break;
    case SplitBehavior::kRemoved:
      for (const Part& p : parts) {
        if (!p.is_match) merged.push_back(p);
      }
      break;
    case SplitBehavior::kMergedWithPrevious: {
      bool previous_match = false;
      for (const Part& p : parts) {
        if (p.is_match && !previous_match && !merged.empty()) {
          merged.back().end = p.end;
        } else {
          merged.push_back(p);
        }
        previous_match = p.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool previous_match = false;
      for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
        if (it->is_match && !previous_match && !merged.empty()) {
          merged.back().begin = it->begin;
        } else {
          merged.push_back(*it);
        }
        previous_match = it->is_match;
      }
      std::reverse(merged.begin(), merged.end());
      break;
    }
    case SplitBehavior::kContiguous: {
      bool previous_match = false;
      for (const Part& p : parts) {
        if (p.is_match == previous_match && !merged.empty()) {
          merged.back().end = p.end;
        } else {
          merged.push_back(p);
        }
        previous_match = p.is_match;
      }
      break;
    }
  }
  for (const Part& p : merged) {
    if (p.end > p.begin) out->push_back(piece.substr(p.begin, p.end - p.begin));
  }
}

// Runs the pre-tokenizer steps on `segment` (valid UTF-8, normalized) and
// hands each pre-token to `emit`.
template <typename Emit>
void PreTokenizeSegment(const Tokenizer::Impl& t, std::string_view segment, EncodeScratch* scratch,
                        Emit&& emit) {
  std::vector<std::string_view>& pieces = scratch->pieces;
  std::vector<std::string_view>& next = scratch->next_pieces;
  pieces.clear();
  pieces.push_back(segment);
  for (const PreTokenizeStep& step : t.pre_tokenizer) {
    if (step.kind == PreTokenizeStep::Kind::kByteLevel) {
      if (step.add_prefix_space) {
        // Each piece that does not start with a space gets one (HF does this
        // per piece). ByteLevel is the last step, so this runs once per
        // segment; `owned` is reserved first so that it never reallocates and
        // the views into it stay valid.
        scratch->owned.clear();
        scratch->owned.reserve(pieces.size());
        for (std::string_view& p : pieces) {
          if (!p.empty() && p[0] == ' ') continue;
          scratch->owned.push_back(" " + std::string(p));
          p = scratch->owned.back();
        }
      }
      if (!step.regex) continue;
    }
    if (pieces.size() == 1 && pieces[0].empty()) break;
    next.clear();
    for (std::string_view p : pieces) SplitPiece(p, step, scratch, &next);
    pieces.swap(next);
  }
  for (std::string_view p : pieces) {
    if (!p.empty()) emit(p);
  }
}

}  // namespace

// ---- Loading ----

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Result<Tokenizer> Tokenizer::FromJson(std::string_view tokenizer_json, std::string_view config_json,
                                      std::string_view source) {
  OCTET_ASSIGN_OR_RETURN(auto impl, text::ParseTokenizerJson(tokenizer_json, source));
  if (!config_json.empty()) {
    OCTET_RETURN_IF_ERROR(
        text::ParseTokenizerConfig(config_json, "tokenizer_config.json", &impl->config));
  }
  impl->chat_template = ChatTemplate::Detect(impl->config.chat_template, impl->config.bos_token);
  return Tokenizer(std::move(impl));
}

Result<Tokenizer> Tokenizer::Load(const std::string& path) {
  std::string json_path = path;
  std::string dir;
  if (IsDirectory(path)) {
    dir = path;
    json_path = JoinPath(path, "tokenizer.json");
    if (!PathExists(json_path)) {
      return NotFoundError(path + ": no tokenizer.json in this folder");
    }
  } else {
    if (!PathExists(path)) return NotFoundError(path + ": no such file");
    dir = DirName(path);
  }
  OCTET_ASSIGN_OR_RETURN(std::string text, ReadFileToString(json_path));
  OCTET_ASSIGN_OR_RETURN(auto impl, text::ParseTokenizerJson(text, json_path));
  // The configs beside tokenizer.json, when present.
  const std::string config_path = JoinPath(dir, "tokenizer_config.json");
  if (PathExists(config_path)) {
    OCTET_ASSIGN_OR_RETURN(std::string config, ReadFileToString(config_path));
    OCTET_RETURN_IF_ERROR(text::ParseTokenizerConfig(config, config_path, &impl->config));
  }
  const std::string generation_path = JoinPath(dir, "generation_config.json");
  if (PathExists(generation_path)) {
    OCTET_ASSIGN_OR_RETURN(std::string gen, ReadFileToString(generation_path));
    OCTET_RETURN_IF_ERROR(text::ParseGenerationConfig(gen, generation_path, &impl->config));
  }
  impl->chat_template = ChatTemplate::Detect(impl->config.chat_template, impl->config.bos_token);
  return Tokenizer(std::move(impl));
}

// ---- Encoding ----

namespace {

// Encodes one run of valid UTF-8 text between raw added tokens.
void EncodeValidText(const Tokenizer::Impl& t, std::string_view text, bool split_special,
                     EncodeScratch* scratch, std::vector<TokenId>* ids) {
  std::string_view normalized = text;
  if (!t.normalizers.empty()) {
    for (const text::UnicodeNormalizer& n : t.normalizers) {
      if (n.IsNormalized(normalized)) continue;
      scratch->normalized_tmp.clear();
      n.Normalize(normalized, &scratch->normalized_tmp);
      scratch->normalized.swap(scratch->normalized_tmp);
      normalized = scratch->normalized;
    }
  }
  auto encode_piece = [&](std::string_view piece) {
    t.model.EncodeWord(piece, &scratch->cache, ids);
  };
  if (t.normalized_matcher.empty()) {
    PreTokenizeSegment(t, normalized, scratch, encode_piece);
    return;
  }
  // Added tokens that match normalized text.
  std::vector<AddedMatch> matches;
  t.normalized_matcher.FindAll(normalized, split_special, &matches);
  size_t prev = 0;
  for (const AddedMatch& m : matches) {
    if (m.begin > prev) {
      PreTokenizeSegment(t, normalized.substr(prev, m.begin - prev), scratch, encode_piece);
    }
    ids->push_back(m.id);
    prev = m.end;
  }
  if (prev < normalized.size()) {
    PreTokenizeSegment(t, normalized.substr(prev), scratch, encode_piece);
  }
}

void EncodeSegment(const Tokenizer::Impl& t, std::string_view segment, bool split_special,
                   EncodeScratch* scratch, std::vector<TokenId>* ids) {
  text::ForEachUtf8Run(
      segment,
      [&](std::string_view valid) { EncodeValidText(t, valid, split_special, scratch, ids); },
      [&](std::string_view invalid) { t.model.EncodeWord(invalid, &scratch->cache, ids); });
}

}  // namespace

std::vector<TokenId> Tokenizer::Encode(std::string_view text, const EncodeOptions& options) const {
  const Impl& t = *impl_;
  std::vector<TokenId> ids;
  ids.reserve(text.size() / 3 + 4);
  if (options.add_special_tokens) ids = t.post_prefix;
  ScratchLease scratch(t);
  std::vector<AddedMatch>& matches = scratch->added;
  matches.clear();
  t.raw_matcher.FindAll(text, options.split_special_tokens, &matches);
  size_t prev = 0;
  for (const AddedMatch& m : matches) {
    if (m.begin > prev) {
      EncodeSegment(t, text.substr(prev, m.begin - prev), options.split_special_tokens,
                    scratch.get(), &ids);
    }
    ids.push_back(m.id);
    prev = m.end;
  }
  if (prev < text.size()) {
    EncodeSegment(t, text.substr(prev), options.split_special_tokens, scratch.get(), &ids);
  }
  if (options.add_special_tokens) ids.insert(ids.end(), t.post_suffix.begin(), t.post_suffix.end());
  return ids;
}

std::vector<std::string> Tokenizer::PreTokenize(std::string_view text) const {
  const Impl& t = *impl_;
  std::vector<std::string> out;
  ScratchLease scratch(t);
  std::vector<AddedMatch> matches;
  t.raw_matcher.FindAll(text, false, &matches);
  auto segment = [&](std::string_view seg) {
    text::ForEachUtf8Run(
        seg,
        [&](std::string_view valid) {
          std::string normalized(valid);
          for (const text::UnicodeNormalizer& n : t.normalizers) {
            std::string tmp;
            n.Normalize(normalized, &tmp);
            normalized.swap(tmp);
          }
          std::vector<AddedMatch> nm;
          t.normalized_matcher.FindAll(normalized, false, &nm);
          size_t p = 0;
          auto emit = [&](std::string_view piece) { out.emplace_back(piece); };
          for (const AddedMatch& m : nm) {
            if (m.begin > p) {
              PreTokenizeSegment(t, std::string_view(normalized).substr(p, m.begin - p),
                                 scratch.get(), emit);
            }
            out.push_back(normalized.substr(m.begin, m.end - m.begin));
            p = m.end;
          }
          if (p < normalized.size()) {
            PreTokenizeSegment(t, std::string_view(normalized).substr(p), scratch.get(), emit);
          }
        },
        [&](std::string_view invalid) { out.emplace_back(invalid); });
  };
  size_t prev = 0;
  for (const AddedMatch& m : matches) {
    if (m.begin > prev) segment(text.substr(prev, m.begin - prev));
    out.emplace_back(text.substr(m.begin, m.end - m.begin));
    prev = m.end;
  }
  if (prev < text.size()) segment(text.substr(prev));
  return out;
}

// ---- Decoding ----

Result<std::string> Tokenizer::DecodeBytes(std::span<const TokenId> ids,
                                           const DecodeOptions& options) const {
  const Impl& t = *impl_;
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    const TokenId id = ids[i];
    if (id < 0 || static_cast<size_t>(id) >= t.id_flags.size() ||
        !(t.id_flags[id] & Impl::kExists)) {
      if (options.skip_unknown_ids) continue;
      return InvalidArgumentError("token id " + std::to_string(id) + " at position " +
                                  std::to_string(i) + " is not in the vocabulary (" +
                                  std::to_string(t.id_flags.size()) + " ids)");
    }
    if (options.skip_special_tokens && (t.id_flags[id] & Impl::kSpecial)) continue;
    out += t.id_bytes[id];
  }
  return out;
}

Result<std::string> Tokenizer::Decode(std::span<const TokenId> ids,
                                      const DecodeOptions& options) const {
  OCTET_ASSIGN_OR_RETURN(std::string bytes, DecodeBytes(ids, options));
  if (text::IsValidUtf8(bytes)) return bytes;
  std::string out;
  out.reserve(bytes.size() + 8);
  text::AppendUtf8Lossy(bytes, /*hold_incomplete_tail=*/false, &out);
  return out;
}

// ---- Vocabulary queries ----

TokenId Tokenizer::vocab_size() const { return static_cast<TokenId>(impl_->id_flags.size()); }

std::optional<TokenId> Tokenizer::TokenToId(std::string_view token) const {
  const std::string key(token);
  if (auto it = impl_->added_by_content.find(key); it != impl_->added_by_content.end()) {
    return it->second;
  }
  return impl_->vocab_by_string.Find(key);
}

std::string Tokenizer::IdToToken(TokenId id) const {
  if (id < 0 || static_cast<size_t>(id) >= impl_->id_string.size()) return "";
  return impl_->id_string[id];
}

std::string Tokenizer::TokenBytes(TokenId id) const {
  if (id < 0 || static_cast<size_t>(id) >= impl_->id_bytes.size()) return "";
  return impl_->id_bytes[id];
}

bool Tokenizer::IsSpecial(TokenId id) const {
  return id >= 0 && static_cast<size_t>(id) < impl_->id_flags.size() &&
         (impl_->id_flags[id] & Impl::kSpecial);
}

const std::vector<AddedToken>& Tokenizer::added_tokens() const { return impl_->added; }
const TokenizerConfig& Tokenizer::config() const { return impl_->config; }
std::string Tokenizer::Describe() const { return impl_->description; }

std::optional<TokenId> Tokenizer::bos_id() const {
  if (impl_->config.bos_token.empty()) return std::nullopt;
  return TokenToId(impl_->config.bos_token);
}

std::optional<TokenId> Tokenizer::eos_id() const {
  if (impl_->config.eos_token.empty()) return std::nullopt;
  return TokenToId(impl_->config.eos_token);
}

const ChatTemplate& Tokenizer::chat_template() const { return impl_->chat_template; }

std::vector<TokenId> Tokenizer::StopIds() const {
  std::vector<TokenId> ids;
  auto add = [&](TokenId id) {
    if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  };
  for (const std::string& token : chat_template().StopTokens()) {
    if (auto id = TokenToId(token)) add(*id);
  }
  if (auto id = eos_id()) add(*id);
  for (TokenId id : impl_->config.generation_eos_ids) {
    if (id >= 0 && id < vocab_size()) add(id);
  }
  return ids;
}

}  // namespace octet::engine
