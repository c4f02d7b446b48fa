// Structured output: grammar-constrained sampling for OpenAI `response_format`
// (json_object, json_schema) and forced tool calls.
//
//   OCTET_ASSIGN_OR_RETURN(auto grammar, CompileJsonSchema(schema_text));
//   auto vocab = TokenTrie::Build(tokenizer);            // once per tokenizer
//   params.constraint = MakeGrammarConstraint(grammar, vocab);
//
// A JSON schema compiles into a character-level pushdown automaton
// (JsonGrammar): a stack of frames (object/array/string/number/literal/key),
// nondeterministic where the schema branches (anyOf, enum, optional
// properties), so the state is a small set of stacks. Objects are written
// with their properties in schema order (optional ones may be left out; an
// object without "properties" takes any keys); whitespace between tokens is
// allowed up to kMaxWhitespace bytes in a row; nothing may follow the
// top-level value (the stop token is then the only choice).
//
// Per step the sampler first asks about the one token it would choose (the
// argmax, its draw, the top k: Sampler::Sample with a TokenFilter) and a token
// is checked by feeding its bytes to the automaton; only when that cannot
// decide is the mask over the whole vocabulary computed: a walk of the token
// trie (every vocabulary token's bytes) from the current state, pruning a
// subtree as soon as its prefix is rejected. Masks are cached per state (the
// state inside a string, after a comma, ... recurs every few tokens), and a
// cached mask answers the one-token checks too. Special and added tokens are
// never allowed, except the request's stop ids, which are allowed exactly in
// accepting states.
//
// Supported keywords: type (a name or a list), properties, required,
// additionalProperties (false, true or a schema; used only without
// "properties"), items, minItems, maxItems, enum, const, anyOf, oneOf
// (treated as anyOf), $ref to "#/$defs/..." or "#/definitions/..." (recursion
// allowed), and the annotations title, description, default, examples,
// $schema, $id, $comment, strict. Anything else is refused with the JSON
// pointer of the keyword.
//
// Thread-safety: JsonGrammar and TokenTrie are immutable (share them); a
// TokenConstraint belongs to one request (the scheduler's thread).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "octet/base/status.h"

namespace octet::engine {

class Tokenizer;
class TokenTrie;

// What the scheduler asks of a request's constraint at each token.
class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Sets the logits of tokens that may not come next to -infinity. The
  // `stop_ids` end the reply: left alone in accepting states, masked elsewhere.
  virtual void Mask(float* logits, int64_t vocab, std::span<const int32_t> stop_ids) = 0;
  // Whether `id` may come next, as Mask would leave it (one id: cheap; no mask
  // is computed when the state's is not cached). It may refuse every id where
  // Mask allows only a stop id outside an accepting state (a dead end).
  virtual bool Allows(int32_t id, std::span<const int32_t> stop_ids) = 0;
  // The token chosen (a stop id ends the output).
  virtual void Accept(int32_t id) = 0;
  // A fresh constraint of the same grammar, at the start (each sequence of a
  // request gets its own).
  virtual std::unique_ptr<TokenConstraint> Clone() const = 0;
};

constexpr int kMaxWhitespace = 12;   // whitespace bytes in a row between JSON tokens
constexpr int kMaxNumberChars = 24;  // characters of one number (also: <= 15 integer
                                     // digits, <= 2 exponent digits)

class JsonGrammar;  // compiled schema (json_schema_grammar.cpp)

// Compiles a JSON schema (JSON text). InvalidArgument errors name the JSON
// pointer of what is wrong or unsupported: "/properties/age/minimum: keyword
// not supported".
Result<std::shared_ptr<const JsonGrammar>> CompileJsonSchema(std::string_view schema_json);
// Any JSON object (response_format json_object).
std::shared_ptr<const JsonGrammar> AnyJsonObjectGrammar();

// The character-level automaton over a grammar: for tests, and the building
// block of the token mask.
class JsonMatcher {
 public:
  explicit JsonMatcher(std::shared_ptr<const JsonGrammar> grammar);
  ~JsonMatcher();
  JsonMatcher(const JsonMatcher&);
  JsonMatcher& operator=(const JsonMatcher&);
  // Feeds bytes; false (and the state unchanged) when any of them is refused.
  bool Feed(std::string_view bytes);
  // The bytes so far are a complete value (the output may end here).
  bool Accepting() const;
  // A key identifying the state (equal keys: equal futures).
  std::string StateKey() const;

 private:
  friend class GrammarConstraint;
  friend std::vector<uint64_t> AllowedTokens(const JsonMatcher& matcher, const TokenTrie& vocab);
  struct State;
  std::shared_ptr<const JsonGrammar> grammar_;
  std::unique_ptr<State> state_;
};

// Every vocabulary token's bytes in a trie (added and special tokens left out).
class TokenTrie {
 public:
  static std::shared_ptr<const TokenTrie> Build(const Tokenizer& tokenizer);
  // pieces[i] is token i's bytes; an empty piece is never allowed.
  static std::shared_ptr<const TokenTrie> FromPieces(std::vector<std::string> pieces);
  int64_t vocab() const { return static_cast<int64_t>(pieces_.size()); }
  const std::string& piece(int32_t id) const { return pieces_[static_cast<size_t>(id)]; }

  struct Node {
    uint32_t first_child = 0;   // 0: none (the root is node 0)
    uint32_t next_sibling = 0;  // 0: none
    uint32_t tokens_begin = 0;  // tokens_[tokens_begin, tokens_end) end here
    uint32_t tokens_end = 0;
    uint8_t byte = 0;
  };
  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<int32_t>& tokens() const { return tokens_; }

 private:
  std::vector<std::string> pieces_;
  std::vector<Node> nodes_;
  std::vector<int32_t> tokens_;
};

// The token constraint of a grammar over a vocabulary.
std::unique_ptr<TokenConstraint> MakeGrammarConstraint(std::shared_ptr<const JsonGrammar> grammar,
                                                       std::shared_ptr<const TokenTrie> vocab);

// The allowed-token bitset of a matcher's state (bit i of word i/64), for tests
// and benchmarks: what Mask leaves finite, stop ids aside.
std::vector<uint64_t> AllowedTokens(const JsonMatcher& matcher, const TokenTrie& vocab);

}  // namespace octet::engine
