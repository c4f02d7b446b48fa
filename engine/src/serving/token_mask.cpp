// Token masks from the JSON automaton over a token trie (structured_output.h).
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <unordered_map>

#include "json_grammar_impl.h"
#include "octet/base/thread_annotations.h"
#include "octet/engine/tokenizer.h"

namespace octet::engine {

namespace {
constexpr size_t kMaxCachedMasks = 1024;  // per grammar and vocabulary
}  // namespace

// ---- TokenTrie --------------------------------------------------------------------------

std::shared_ptr<const TokenTrie> TokenTrie::FromPieces(std::vector<std::string> pieces) {
  auto t = std::make_shared<TokenTrie>();
  t->pieces_ = std::move(pieces);
  // Build with child maps, then flatten so that each node's tokens are contiguous.
  struct Tmp {
    std::map<uint8_t, uint32_t> children;
    std::vector<int32_t> tokens;
  };
  std::vector<Tmp> tmp(1);
  for (size_t id = 0; id < t->pieces_.size(); ++id) {
    const std::string& p = t->pieces_[id];
    if (p.empty()) continue;
    uint32_t n = 0;
    for (char ch : p) {
      const uint8_t c = static_cast<uint8_t>(ch);
      auto it = tmp[n].children.find(c);
      if (it == tmp[n].children.end()) {
        tmp.push_back({});
        const uint32_t child = static_cast<uint32_t>(tmp.size() - 1);
        tmp[n].children[c] = child;
        n = child;
      } else {
        n = it->second;
      }
    }
    tmp[n].tokens.push_back(static_cast<int32_t>(id));
  }
  t->nodes_.resize(tmp.size());
  for (size_t n = 0; n < tmp.size(); ++n) {
    Node& node = t->nodes_[n];
    node.tokens_begin = static_cast<uint32_t>(t->tokens_.size());
    t->tokens_.insert(t->tokens_.end(), tmp[n].tokens.begin(), tmp[n].tokens.end());
    node.tokens_end = static_cast<uint32_t>(t->tokens_.size());
    uint32_t prev = 0;
    for (const auto& [c, child] : tmp[n].children) {
      t->nodes_[child].byte = c;
      if (prev == 0) {
        node.first_child = child;
      } else {
        t->nodes_[prev].next_sibling = child;
      }
      prev = child;
    }
  }
  return t;
}

std::shared_ptr<const TokenTrie> TokenTrie::Build(const Tokenizer& tokenizer) {
  const TokenId n = tokenizer.vocab_size();
  std::vector<std::string> pieces(static_cast<size_t>(n));
  std::vector<bool> added(static_cast<size_t>(n), false);
  for (const AddedToken& a : tokenizer.added_tokens()) {
    if (a.id >= 0 && a.id < n) added[static_cast<size_t>(a.id)] = true;
  }
  for (TokenId id = 0; id < n; ++id) {
    if (added[static_cast<size_t>(id)] || tokenizer.IsSpecial(id)) continue;
    pieces[static_cast<size_t>(id)] = tokenizer.TokenBytes(id);
  }
  return FromPieces(std::move(pieces));
}

// ---- masks ------------------------------------------------------------------------------

namespace {

class MaskWalker {
 public:
  MaskWalker(const JsonGrammar& g, const TokenTrie& trie) : g_(g), trie_(trie) {}

  std::vector<uint64_t> Run(const GrammarState& start) {
    std::vector<uint64_t> bits(static_cast<size_t>((trie_.vocab() + 63) / 64), 0);
    bits_ = &bits;
    if (states_.empty()) states_.resize(8);
    states_[0] = start;
    Walk(0, 0);
    return bits;
  }

 private:
  void Walk(uint32_t node, size_t depth) {
    const auto& nodes = trie_.nodes();
    if (states_.size() < depth + 2) states_.resize(depth + 2);
    for (uint32_t c = nodes[node].first_child; c != 0; c = nodes[c].next_sibling) {
      StepState(g_, states_[depth], nodes[c].byte, &states_[depth + 1]);
      if (states_[depth + 1].empty()) continue;
      for (uint32_t k = nodes[c].tokens_begin; k < nodes[c].tokens_end; ++k) {
        const int32_t id = trie_.tokens()[k];
        (*bits_)[static_cast<size_t>(id) / 64] |= uint64_t{1} << (id % 64);
      }
      if (nodes[c].first_child != 0) Walk(c, depth + 1);
    }
  }

  const JsonGrammar& g_;
  const TokenTrie& trie_;
  std::vector<GrammarState> states_;
  std::vector<uint64_t>* bits_ = nullptr;
};

// Masks by state, shared by every request of one grammar over one vocabulary.
struct MaskCache {
  Mutex mu;
  std::unordered_map<std::string, std::shared_ptr<const std::vector<uint64_t>>> masks
      GUARDED_BY(mu);
};

std::shared_ptr<MaskCache> CacheFor(const JsonGrammar* g, const TokenTrie* t) {
  struct Caches {
    Mutex mu;
    std::map<std::pair<const JsonGrammar*, const TokenTrie*>, std::weak_ptr<MaskCache>> all
        GUARDED_BY(mu);
  };
  static Caches caches;
  MutexLock lock(caches.mu);
  auto& all = caches.all;
  for (auto it = all.begin(); it != all.end();) {
    it = it->second.expired() ? all.erase(it) : std::next(it);
  }
  auto& w = all[{g, t}];
  if (auto c = w.lock()) return c;
  auto c = std::make_shared<MaskCache>();
  w = c;
  return c;
}

}  // namespace

class GrammarConstraint final : public TokenConstraint {
 public:
  GrammarConstraint(std::shared_ptr<const JsonGrammar> g, std::shared_ptr<const TokenTrie> t)
      : grammar_(std::move(g)),
        trie_(std::move(t)),
        walker_(*grammar_, *trie_),
        cache_(CacheFor(grammar_.get(), trie_.get())) {
    state_ = InitialState(*grammar_);
  }

  void Mask(float* logits, int64_t vocab, std::span<const int32_t> stop_ids) override {
    const std::vector<uint64_t>& bits = Bits();
    const bool accepting = StateAccepting(*grammar_, state_);
    stop_values_.clear();
    for (int32_t id : stop_ids) stop_values_.push_back(id >= 0 && id < vocab ? logits[id] : 0.0f);
    constexpr float kNeg = -std::numeric_limits<float>::infinity();
    const int64_t n = std::min(vocab, trie_->vocab());
    bool any = false;
    for (int64_t i = 0; i < n; i += 64) {
      const uint64_t w = bits[static_cast<size_t>(i / 64)];
      const int64_t end = std::min(n, i + 64);
      if (w == 0) {  // most words of a mask outside strings: a fill the compiler vectorises
        std::fill(logits + i, logits + end, kNeg);
        continue;
      }
      any = true;
      if (w == ~uint64_t{0}) continue;
      for (int64_t k = i; k < end; ++k) {
        if (!((w >> (k - i)) & 1)) logits[k] = kNeg;
      }
    }
    for (int64_t k = n; k < vocab; ++k) logits[k] = kNeg;
    // Stop ids: in accepting states, and wherever nothing else is left.
    if (accepting || !any) {
      for (size_t j = 0; j < stop_ids.size(); ++j) {
        if (stop_ids[j] >= 0 && stop_ids[j] < vocab) logits[stop_ids[j]] = stop_values_[j];
      }
    }
  }

  bool Allows(int32_t id, std::span<const int32_t> stop_ids) override {
    if (id < 0) return false;
    if (std::find(stop_ids.begin(), stop_ids.end(), id) != stop_ids.end() &&
        StateAccepting(*grammar_, state_)) {
      return true;
    }
    // Otherwise as the mask's bit (a stop id in a dead end is refused: see
    // TokenConstraint::Allows).
    if (id >= trie_->vocab() || trie_->piece(id).empty()) return false;
    if (const std::vector<uint64_t>* bits = CachedBits()) {
      return ((*bits)[static_cast<size_t>(id) / 64] >> (id % 64)) & 1;
    }
    // The trie walk keeps a token iff every prefix of its bytes leaves a
    // stack alive: the same as feeding all of them.
    probe_ = state_;
    for (char c : trie_->piece(id)) {
      StepState(*grammar_, probe_, static_cast<uint8_t>(c), &probe_next_);
      if (probe_next_.empty()) return false;
      probe_.swap(probe_next_);
    }
    return true;
  }

  std::unique_ptr<TokenConstraint> Clone() const override {
    return std::make_unique<GrammarConstraint>(grammar_, trie_);
  }

  void Accept(int32_t id) override {
    if (id < 0 || id >= trie_->vocab()) return;
    const std::string& p = trie_->piece(id);
    if (!p.empty()) key_valid_ = false;
    GrammarState next;
    for (char c : p) {
      StepState(*grammar_, state_, static_cast<uint8_t>(c), &next);
      if (next.empty()) return;  // not from the mask (a stop id, a dead end): keep the state
      state_.swap(next);
    }
  }

 private:
  const std::string& Key() {
    if (!key_valid_) {
      key_ = StateKeyOf(state_);
      key_valid_ = true;
    }
    return key_;
  }

  // The current state's mask when this constraint or another request of the
  // grammar has computed it; null otherwise.
  const std::vector<uint64_t>* CachedBits() {
    const std::string& key = Key();
    if (key == last_key_ && last_) return last_.get();
    if (key == missed_key_) return nullptr;
    MutexLock lock(cache_->mu);
    if (auto it = cache_->masks.find(key); it != cache_->masks.end()) {
      last_ = it->second;
      last_key_ = key;
      return last_.get();
    }
    missed_key_ = key;
    return nullptr;
  }

  const std::vector<uint64_t>& Bits() {
    if (const std::vector<uint64_t>* bits = CachedBits()) return *bits;
    const std::string& key = Key();
    auto bits = std::make_shared<const std::vector<uint64_t>>(walker_.Run(state_));
    {
      MutexLock lock(cache_->mu);
      if (cache_->masks.size() >= kMaxCachedMasks) cache_->masks.clear();
      cache_->masks[key] = bits;
    }
    last_ = bits;
    last_key_ = key;
    missed_key_.clear();
    return *last_;
  }

  std::shared_ptr<const JsonGrammar> grammar_;
  std::shared_ptr<const TokenTrie> trie_;
  MaskWalker walker_;
  std::shared_ptr<MaskCache> cache_;
  GrammarState state_;
  std::string key_;  // StateKeyOf(state_) when key_valid_
  bool key_valid_ = false;
  std::string last_key_;
  std::string missed_key_;           // a state whose mask the cache did not hold when last asked
  GrammarState probe_, probe_next_;  // Allows' scratch
  std::shared_ptr<const std::vector<uint64_t>> last_;
  std::vector<float> stop_values_;
};

std::unique_ptr<TokenConstraint> MakeGrammarConstraint(std::shared_ptr<const JsonGrammar> grammar,
                                                       std::shared_ptr<const TokenTrie> vocab) {
  return std::make_unique<GrammarConstraint>(std::move(grammar), std::move(vocab));
}

std::vector<uint64_t> AllowedTokens(const JsonMatcher& matcher, const TokenTrie& vocab) {
  MaskWalker w(*matcher.grammar_, vocab);
  return w.Run(matcher.state_->s);
}

}  // namespace octet::engine
