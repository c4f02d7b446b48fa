// Internals of the JSON-schema automaton shared by json_schema_grammar.cpp
// and token_mask.cpp (see structured_output.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "octet/engine/structured_output.h"

namespace octet::engine {

enum class NodeKind : uint8_t {
  kAny,  // any JSON value
  kObject,
  kArray,
  kString,
  kNumber,
  kInteger,
  kLiterals,  // one of literals (serialized JSON): enum, const, true/false, null
  kAnyOf,
};

struct GrammarNode {
  NodeKind kind = NodeKind::kAny;
  std::vector<uint32_t> alts;  // kAnyOf
  struct Prop {
    std::string key;  // the key as JSON text, quotes included
    uint32_t node = 0;
    bool required = false;
  };
  std::vector<Prop> props;  // kObject, in schema order
  int64_t additional = -1;  // kObject without props: the value node of any key; -1 none
  uint32_t items = 0;       // kArray
  uint32_t min_items = 0;
  int64_t max_items = -1;             // -1: no limit
  uint32_t count_cap = 0;             // kArray: counts above this are equivalent
  std::vector<std::string> literals;  // kLiterals
};

class JsonGrammar {
 public:
  std::vector<GrammarNode> nodes;
  uint32_t root = 0;
  // Nodes every grammar has: kAny, its object, its array, number, true/false/null.
  uint32_t any = 0, any_object = 0, any_array = 0, number = 0, tfn = 0;
};

enum class FrameKind : uint8_t { kTop, kValue, kObject, kArray, kString, kNumber, kLiteral, kKey };

struct Frame {
  FrameKind kind = FrameKind::kTop;
  uint8_t st = 0;
  uint8_t ws = 0;     // whitespace bytes in a row
  uint8_t flags = 0;  // kString: 1 = an object key
  uint32_t node = 0;
  uint32_t a = 0;
  uint32_t b = 0;
  bool operator==(const Frame&) const = default;
};

using Stack = std::vector<Frame>;
// The automaton's state: the stacks still alive (usually one).
using GrammarState = std::vector<Stack>;

GrammarState InitialState(const JsonGrammar& g);
// Feeds one byte to every stack of `in`; `out` gets the survivors (deduplicated).
void StepState(const JsonGrammar& g, const GrammarState& in, uint8_t c, GrammarState* out);
bool StateAccepting(const JsonGrammar& g, const GrammarState& s);
std::string StateKeyOf(const GrammarState& s);

struct JsonMatcher::State {
  GrammarState s;
};

}  // namespace octet::engine
