#include "octet/engine/bpe_trainer.h"

#include <algorithm>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "octet/base/json.h"
#include "text/added_vocab.h"
#include "text/bpe_model.h"
#include "text/byte_level.h"
#include "text/split_regex.h"
#include "text/utf8.h"

namespace octet::engine {

using text::AddedMatch;
using text::MatchSpan;

struct BpeTrainer::State {
  BpeTrainerOptions options;
  BpeTrainingStats stats;
  Status pattern_status;
  std::unique_ptr<text::SplitRegex> regex;
  text::RegexScratch scratch;
  text::AddedTokenMatcher specials;
  std::vector<MatchSpan> spans;
  std::vector<AddedMatch> matches;
  // Distinct pre-token bytes -> how often it was seen.
  std::unordered_map<std::string, int64_t, text::StringHash, std::equal_to<>> words;
  bool trained = false;

  void Count(std::string_view word) {
    ++stats.pre_tokens;
    auto it = words.find(word);
    if (it == words.end()) {
      words.emplace(std::string(word), 1);
    } else {
      ++it->second;
    }
  }

  // Cuts valid UTF-8 with the split regex (Isolated: matches and the gaps
  // between them are pre-tokens), as the written tokenizer.json will.
  void CountValid(std::string_view valid) {
    spans.clear();
    regex->FindAll(valid, &scratch, &spans);
    size_t prev = 0;
    for (const MatchSpan& m : spans) {
      if (m.begin > prev) Count(valid.substr(prev, m.begin - prev));
      if (m.end > m.begin) Count(valid.substr(m.begin, m.end - m.begin));
      prev = std::max(prev, m.end);
    }
    if (prev < valid.size()) Count(valid.substr(prev));
  }

  void CountSegment(std::string_view segment) {
    text::ForEachUtf8Run(
        segment, [&](std::string_view valid) { CountValid(valid); },
        [&](std::string_view invalid) { Count(invalid); });
  }
};

BpeTrainer::BpeTrainer(BpeTrainerOptions options) : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.options = std::move(options);
  auto compiled = text::SplitRegex::Compile(s.options.split_pattern);
  if (compiled.ok()) {
    s.regex = *std::move(compiled);
  } else {
    s.pattern_status = compiled.status();
  }
  std::vector<AddedToken> specials;
  for (size_t i = 0; i < s.options.special_tokens.size(); ++i) {
    if (s.options.special_tokens[i].empty()) continue;
    AddedToken t;
    t.id = static_cast<TokenId>(i);
    t.content = s.options.special_tokens[i];
    t.special = true;
    specials.push_back(t);
  }
  s.specials.Build(specials);
}

BpeTrainer::~BpeTrainer() = default;

const BpeTrainingStats& BpeTrainer::stats() const { return state_->stats; }

Status BpeTrainer::AddText(std::string_view text) {
  State& s = *state_;
  OCTET_RETURN_IF_ERROR(s.pattern_status);
  if (s.trained) return FailedPreconditionError("BpeTrainer: AddText after Train");
  s.stats.corpus_bytes += static_cast<int64_t>(text.size());
  s.matches.clear();
  s.specials.FindAll(text, false, &s.matches);
  size_t prev = 0;
  for (const AddedMatch& m : s.matches) {
    if (m.begin > prev) s.CountSegment(text.substr(prev, m.begin - prev));
    prev = m.end;
  }
  if (prev < text.size()) s.CountSegment(text.substr(prev));
  return Status::Ok();
}

namespace {

uint64_t PairKey(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }
int32_t PairLeft(uint64_t k) { return int32_t(k >> 32); }
int32_t PairRight(uint64_t k) { return int32_t(uint32_t(k)); }

struct PairHash {
  size_t operator()(uint64_t k) const {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return static_cast<size_t>(k);
  }
};

struct Word {
  std::vector<int32_t> symbols;
  int64_t count;
};

struct HeapEntry {
  int64_t count;
  uint64_t pair;
  // Highest count first; among equal counts the smallest (left, right) pair.
  bool operator<(const HeapEntry& o) const {
    return count != o.count ? count < o.count : pair > o.pair;
  }
};

void AppendJsonString(std::string* out, std::string_view s) {
  *out += nlohmann::json(std::string(s)).dump();
}

}  // namespace

Result<std::string> BpeTrainer::Train() {
  State& s = *state_;
  OCTET_RETURN_IF_ERROR(s.pattern_status);
  if (s.trained) return FailedPreconditionError("BpeTrainer: Train called twice");
  s.trained = true;
  const BpeTrainerOptions& o = s.options;
  {
    std::unordered_set<std::string> seen;
    for (const std::string& t : o.special_tokens) {
      if (t.empty()) return InvalidArgumentError("BpeTrainer: empty special token");
      if (!text::IsValidUtf8(t)) {
        return InvalidArgumentError("BpeTrainer: special token is not valid UTF-8");
      }
      if (!seen.insert(t).second) {
        return InvalidArgumentError("BpeTrainer: special token '" + t + "' given twice");
      }
    }
  }
  const int32_t n_special = static_cast<int32_t>(o.special_tokens.size());
  if (o.vocab_size < 256 + n_special) {
    return InvalidArgumentError("BpeTrainer: vocab_size " + std::to_string(o.vocab_size) +
                                " is below 256 bytes + " + std::to_string(n_special) +
                                " special tokens");
  }
  const int32_t learned_target = o.vocab_size - n_special;  // ids 0..learned_target-1

  // Token bytes by id; ids 0..255 are the byte values.
  std::vector<std::string> token_bytes(256);
  std::unordered_map<std::string, int32_t, text::StringHash, std::equal_to<>> id_of_bytes;
  for (int b = 0; b < 256; ++b) {
    token_bytes[b] = std::string(1, static_cast<char>(b));
    id_of_bytes.emplace(token_bytes[b], b);
  }

  // Distinct words in a fixed order (sorted bytes) so training is deterministic.
  std::vector<std::pair<std::string_view, int64_t>> sorted;
  sorted.reserve(s.words.size());
  for (const auto& [w, c] : s.words) sorted.emplace_back(w, c);
  std::sort(sorted.begin(), sorted.end());
  std::vector<Word> words;
  words.reserve(sorted.size());
  for (const auto& [w, c] : sorted) {
    Word word;
    word.count = c;
    word.symbols.reserve(w.size());
    for (unsigned char b : w) word.symbols.push_back(b);
    words.push_back(std::move(word));
  }
  s.stats.distinct_words = static_cast<int64_t>(words.size());

  // Pair counts and the words each pair occurs in.
  std::unordered_map<uint64_t, int64_t, PairHash> pair_count;
  std::unordered_map<uint64_t, std::vector<int32_t>, PairHash> pair_words;
  for (size_t w = 0; w < words.size(); ++w) {
    const auto& sym = words[w].symbols;
    for (size_t i = 0; i + 1 < sym.size(); ++i) {
      const uint64_t k = PairKey(sym[i], sym[i + 1]);
      pair_count[k] += words[w].count;
      auto& list = pair_words[k];
      if (list.empty() || list.back() != static_cast<int32_t>(w))
        list.push_back(static_cast<int32_t>(w));
    }
  }
  std::priority_queue<HeapEntry> heap;
  for (const auto& [k, c] : pair_count) {
    if (c > 0) heap.push({c, k});
  }

  std::vector<std::pair<int32_t, int32_t>> merges;
  std::vector<int32_t> word_stamp(words.size(), -1);
  std::unordered_map<uint64_t, int64_t, PairHash> changed;
  const int32_t merges_wanted = learned_target - 256;
  int32_t next_progress = 0;
  while (static_cast<int32_t>(token_bytes.size()) < learned_target && !heap.empty()) {
    HeapEntry top = heap.top();
    heap.pop();
    auto current = pair_count.find(top.pair);
    const int64_t count = current == pair_count.end() ? 0 : current->second;
    if (count != top.count) {  // stale: counts only fall after a push, so re-queue
      if (count > 0) heap.push({count, top.pair});
      continue;
    }
    if (count < o.min_pair_count) break;
    const int32_t a = PairLeft(top.pair);
    const int32_t b = PairRight(top.pair);
    std::string merged_bytes = token_bytes[a] + token_bytes[b];
    int32_t new_id;
    if (auto it = id_of_bytes.find(merged_bytes); it != id_of_bytes.end()) {
      new_id = it->second;  // the same bytes already exist (built another way): reuse the id
    } else {
      new_id = static_cast<int32_t>(token_bytes.size());
      id_of_bytes.emplace(merged_bytes, new_id);
      token_bytes.push_back(std::move(merged_bytes));
    }
    const int32_t merge_index = static_cast<int32_t>(merges.size());
    merges.emplace_back(a, b);

    // Rewrite every word holding (a, b) and move the counts of its neighbours.
    changed.clear();
    auto add = [&](int32_t l, int32_t r, int64_t delta, int32_t w) {
      const uint64_t k = PairKey(l, r);
      pair_count[k] += delta;
      if (delta > 0) {
        changed[k] = 0;
        auto& list = pair_words[k];
        if (list.empty() || list.back() != w) list.push_back(w);
      }
    };
    std::vector<int32_t> where = std::move(pair_words[top.pair]);
    pair_words.erase(top.pair);
    for (int32_t w : where) {
      if (word_stamp[w] == merge_index) continue;
      word_stamp[w] = merge_index;
      auto& sym = words[w].symbols;
      const int64_t c = words[w].count;
      size_t out = 0;
      for (size_t i = 0; i < sym.size();) {
        if (i + 1 < sym.size() && sym[i] == a && sym[i + 1] == b) {
          if (out > 0) {
            add(sym[out - 1], a, -c, w);
            add(sym[out - 1], new_id, c, w);
          }
          if (i + 2 < sym.size()) {
            add(b, sym[i + 2], -c, w);
            add(new_id, sym[i + 2], c, w);
          }
          pair_count[top.pair] -= c;
          sym[out++] = new_id;
          i += 2;
        } else {
          sym[out++] = sym[i++];
        }
      }
      sym.resize(out);
    }
    pair_count.erase(top.pair);
    for (const auto& [k, unused] : changed) {
      const int64_t c = pair_count[k];
      if (c > 0) heap.push({c, k});
    }
    if (o.progress && merge_index >= next_progress) {
      o.progress(merge_index + 1, merges_wanted);
      next_progress = merge_index + std::max(1, merges_wanted / 100);
    }
  }
  if (o.progress) o.progress(static_cast<int32_t>(merges.size()), merges_wanted);

  // tokenizer.json
  const int32_t learned = static_cast<int32_t>(token_bytes.size());
  std::string json;
  json.reserve(static_cast<size_t>(learned) * 40 + merges.size() * 30 + 4096);
  json += "{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n";
  json += "  \"added_tokens\": [";
  for (int32_t i = 0; i < n_special; ++i) {
    json += i ? ",\n    " : "\n    ";
    json += "{\"id\": " + std::to_string(learned + i) + ", \"content\": ";
    AppendJsonString(&json, o.special_tokens[i]);
    json +=
        ", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, "
        "\"normalized\": false, \"special\": true}";
  }
  json += n_special ? "\n  ],\n" : "],\n";
  json += "  \"normalizer\": null,\n";
  json += "  \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [\n";
  json += "    {\"type\": \"Split\", \"pattern\": {\"Regex\": ";
  AppendJsonString(&json, o.split_pattern);
  json += "}, \"behavior\": \"Isolated\", \"invert\": false},\n";
  json +=
      "    {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, "
      "\"use_regex\": false}]},\n";
  json +=
      "  \"post_processor\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, "
      "\"trim_offsets\": false, \"use_regex\": false},\n";
  json +=
      "  \"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, "
      "\"trim_offsets\": true, \"use_regex\": false},\n";
  json +=
      "  \"model\": {\n    \"type\": \"BPE\", \"dropout\": null, \"unk_token\": null, "
      "\"continuing_subword_prefix\": null, \"end_of_word_suffix\": null, "
      "\"fuse_unk\": false, \"byte_fallback\": false, \"ignore_merges\": false,\n";
  json += "    \"vocab\": {";
  std::vector<std::string> level(learned);
  for (int32_t id = 0; id < learned; ++id) {
    level[id] = text::BytesToByteLevel(token_bytes[id]);
    json += id ? ",\n      " : "\n      ";
    AppendJsonString(&json, level[id]);
    json += ": " + std::to_string(id);
  }
  json += "\n    },\n    \"merges\": [";
  for (size_t i = 0; i < merges.size(); ++i) {
    json += i ? ",\n      [" : "\n      [";
    AppendJsonString(&json, level[merges[i].first]);
    json += ", ";
    AppendJsonString(&json, level[merges[i].second]);
    json += "]";
  }
  json += merges.empty() ? "]\n  }\n}\n" : "\n    ]\n  }\n}\n";

  s.stats.merges = static_cast<int32_t>(merges.size());
  s.stats.vocab_size = learned + n_special;
  return json;
}

Result<std::string> TrainBpeTokenizerJson(std::string_view corpus, const BpeTrainerOptions& options,
                                          BpeTrainingStats* stats) {
  BpeTrainer trainer(options);
  OCTET_RETURN_IF_ERROR(trainer.AddText(corpus));
  auto json = trainer.Train();
  if (stats) *stats = trainer.stats();
  return json;
}

}  // namespace octet::engine
