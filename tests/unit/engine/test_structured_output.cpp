// Structured output (structured_output.h): the JSON-schema compiler's errors,
// the character automaton against documents known to be valid or not, the
// token mask against feeding every token's bytes one by one (real Qwen3 and
// Llama-3 vocabularies), generation under random logits whose every
// finished output must parse and validate — checked by a small validator
// written here, independent of the automaton — and the sampler's fast path
// (one token checked before any whole mask) against sampling the fully
// masked logits: the same ids for greedy and top-k, the masked softmax's
// frequencies for plain temperature; the server's streamed tool calls
// against the non-streamed parse.
#include <QtTest>
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "octet/base/json.h"
#include "octet/engine/generate.h"
#include "octet/engine/structured_output.h"
#include "octet/engine/tokenizer.h"
#include "octet/engine/tool_calls.h"
#include "octet_test.h"
#include "openai_structured.h"

using namespace octet;
using namespace octet::engine;
using json = nlohmann::ordered_json;  // schemas keep their property order

namespace {

std::shared_ptr<const JsonGrammar> Compile(const json& schema) {
  auto g = CompileJsonSchema(schema.dump());
  if (!g.ok()) qFatal("%s", g.status().ToString().c_str());
  return *g;
}

bool Matches(const std::shared_ptr<const JsonGrammar>& g, const std::string& text) {
  JsonMatcher m(g);
  return m.Feed(text) && m.Accepting();
}

// An independent validator for the keywords the compiler supports. Objects
// must list properties in schema order (what the automaton generates).
bool Valid(const json& v, const json& s, const json& root) {
  if (s.is_boolean()) return s.get<bool>();
  if (s.contains("$ref")) {
    const std::string ref = s["$ref"];
    return Valid(v, root.at(json::json_pointer(ref.substr(1))), root);
  }
  if (s.contains("const")) return v == s["const"];
  if (s.contains("enum")) {
    for (const json& e : s["enum"]) {
      if (v == e) return true;
    }
    return false;
  }
  for (const char* key : {"anyOf", "oneOf"}) {
    if (!s.contains(key)) continue;
    for (const json& alt : s[key]) {
      if (Valid(v, alt, root)) return true;
    }
    return false;
  }
  if (!s.contains("type")) return true;
  auto is_type = [&](const std::string& t) {
    if (t == "string") return v.is_string();
    if (t == "integer") return v.is_number_integer();
    if (t == "number") return v.is_number();
    if (t == "boolean") return v.is_boolean();
    if (t == "null") return v.is_null();
    if (t == "array") {
      if (!v.is_array()) return false;
      if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return false;
      if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return false;
      for (const json& e : v) {
        if (s.contains("items") && !Valid(e, s["items"], root)) return false;
      }
      return true;
    }
    if (t == "object") {
      if (!v.is_object()) return false;
      const json props = s.value("properties", json::object());
      for (const json& r : s.value("required", json::array())) {
        if (!v.contains(r.get<std::string>())) return false;
      }
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (props.contains(it.key())) {
          if (!Valid(it.value(), props[it.key()], root)) return false;
        } else if (s.contains("additionalProperties")) {
          if (!Valid(it.value(), s["additionalProperties"], root)) return false;
        }
      }
      return true;
    }
    return false;
  };
  if (s["type"].is_array()) {
    for (const json& t : s["type"]) {
      if (is_type(t)) return true;
    }
    return false;
  }
  return is_type(s["type"]);
}

// A small vocabulary: every printable ASCII character, some JSON-shaped
// multi-byte pieces, a two-byte UTF-8 character; the stop id is its size.
std::vector<std::string> SmallVocab() {
  std::vector<std::string> v;
  for (char c = ' '; c <= '~'; ++c) v.push_back(std::string(1, c));
  for (const char* p :
       {"{\"",     "\":", "\",",     "\"}",  "\"]",      "true",    "false",    "null",
        ", ",      ": ",  "\n",      "\n  ", "12",       "-0",      ".5",       "e+",
        "E-",      "\\n", "\\u00e9", "\\\"", "\"name\"", "\"age\"", "\"tags\"", "red",
        "\"red\"", "]}",  "}]",      "},",   "\xc3\xa9", "[\"",     "\t"}) {
    v.push_back(p);
  }
  return v;
}

// Generates under the constraint with random logits; the text, or nullopt
// when no stop came within `max_tokens`. Structural bytes get a bias so that
// strings and arrays end in a reasonable number of steps.
std::optional<std::string> Generate(TokenConstraint& c, const TokenTrie& trie, std::mt19937& rng,
                                    int max_tokens) {
  const int64_t vocab = trie.vocab() + 1;
  const int32_t stop = static_cast<int32_t>(trie.vocab());
  std::normal_distribution<float> noise(0.0f, 2.0f);
  std::vector<float> logits(static_cast<size_t>(vocab));
  std::string text;
  for (int t = 0; t < max_tokens; ++t) {
    for (int64_t i = 0; i < vocab; ++i) {
      float bias = 0;
      if (i < trie.vocab()) {
        const std::string& p = trie.piece(static_cast<int32_t>(i));
        if (p.find_first_of("\"]}") != std::string::npos) bias = 3.0f;
      } else {
        bias = 4.0f;
      }
      logits[static_cast<size_t>(i)] = noise(rng) + bias;
    }
    const int32_t stop_ids[] = {stop};
    c.Mask(logits.data(), vocab, stop_ids);
    int64_t best = 0;
    for (int64_t i = 1; i < vocab; ++i) {
      if (logits[static_cast<size_t>(i)] > logits[static_cast<size_t>(best)]) best = i;
    }
    if (!std::isfinite(logits[static_cast<size_t>(best)])) return std::nullopt;  // no choice left
    if (best == stop) return text;
    c.Accept(static_cast<int32_t>(best));
    text += trie.piece(static_cast<int32_t>(best));
  }
  return std::nullopt;
}

const char* kPersonSchema =
    "{\n"
    "  \"type\": \"object\",\n"
    "  \"properties\": {\n"
    "    \"name\": {\"type\": \"string\"},\n"
    "    \"age\": {\"type\": \"integer\"},\n"
    "    \"height\": {\"type\": \"number\"},\n"
    "    \"tags\": {\"type\": \"array\", \"items\": {\"type\": \"string\", \"enum\": [\"red\", "
    "\"green\", \"blue\"]},\n"
    "             \"minItems\": 1, \"maxItems\": 3},\n"
    "    \"pet\": {\"anyOf\": [{\"type\": \"null\"}, {\"$ref\": \"#/$defs/pet\"}]},\n"
    "    \"ok\": {\"type\": \"boolean\"},\n"
    "    \"kind\": {\"const\": \"person\"},\n"
    "    \"extra\": {\"type\": \"object\", \"additionalProperties\": {\"type\": [\"integer\", "
    "\"null\"]}}\n"
    "  },\n"
    "  \"required\": [\"name\", \"age\", \"tags\", \"kind\"],\n"
    "  \"additionalProperties\": false,\n"
    "  \"$defs\": {\"pet\": {\"type\": \"object\", \"properties\": {\"species\": {\"type\": "
    "\"string\"},\n"
    "                                                      \"friend\": {\"$ref\": "
    "\"#/$defs/pet\"}},\n"
    "                    \"required\": [\"species\"]}}\n"
    "}";

// A constraint as the sampler's filter, counting the whole masks it computes.
class Filter final : public TokenFilter {
 public:
  Filter(TokenConstraint& c, std::span<const int32_t> stop) : c_(c), stop_(stop) {}
  bool Allows(int32_t id) override { return c_.Allows(id, stop_); }
  void Mask(float* logits, int64_t vocab) override {
    ++masks;
    c_.Mask(logits, vocab, stop_);
  }
  int64_t masks = 0;

 private:
  TokenConstraint& c_;
  std::span<const int32_t> stop_;
};

std::unique_ptr<kernels::KernelBackend> ScalarOps() {
  auto b = kernels::CreateBackend("scalar", {1});
  if (!b.ok()) qFatal("%s", b.status().ToString().c_str());
  return std::move(*b);
}

// Random logits over the small vocabulary (and its stop id), with a bias
// towards closing bytes so that documents end.
void RandomLogits(const TokenTrie& trie, std::mt19937& rng, std::vector<float>* logits) {
  std::normal_distribution<float> noise(0.0f, 2.0f);
  logits->resize(static_cast<size_t>(trie.vocab() + 1));
  for (int64_t i = 0; i < trie.vocab() + 1; ++i) {
    float bias = 4.0f;
    if (i < trie.vocab()) {
      bias = trie.piece(static_cast<int32_t>(i)).find_first_of("\"]}") != std::string::npos ? 3.0f
                                                                                            : 0.0f;
    }
    (*logits)[static_cast<size_t>(i)] = noise(rng) + bias;
  }
}

}  // namespace

class TestStructuredOutput : public QObject {
  Q_OBJECT

 private slots:
  void schemaErrorsNameThePointer() {
    struct Case {
      const char* schema;
      const char* where;
    } cases[] = {
        {"{\"type\":\"object\",\"properties\":{\"age\":{\"type\":\"integer\",\"minimum\":0}}}",
         "/properties/age/minimum: "},
        {"{\"type\":\"strin\"}", "/type: "},
        {"{\"type\":\"array\",\"items\":{\"type\":\"string\",\"pattern\":\"a+\"}}",
         "/items/pattern: "},
        {"{\"$ref\":\"#/$defs/nope\"}", "/$ref: "},
        {"{\"$ref\":\"http://example.com/s.json\"}", "/$ref: "},
        {"{\"type\":\"object\",\"properties\":{\"a/b\":{\"format\":\"date\"}}}",
         "/properties/a~1b/format: "},
        {"{\"type\":\"object\",\"required\":[\"x\"]}", "/required: "},
        {"{\"anyOf\":[]}", "/anyOf: "},
        {"{\"type\":\"array\",\"minItems\":3,\"maxItems\":2}", "/maxItems: "},
    };
    for (const Case& c : cases) {
      auto g = CompileJsonSchema(c.schema);
      QVERIFY2(!g.ok(), c.schema);
      QVERIFY2(g.status().message().rfind(c.where, 0) == 0,
               (std::string(c.schema) + " -> " + g.status().message()).c_str());
    }
    QVERIFY(!CompileJsonSchema("{not json").ok());
    QVERIFY(CompileJsonSchema(kPersonSchema).ok());
  }

  void automatonAcceptsAndRefuses() {
    auto g = Compile(json::parse(kPersonSchema));
    const char* good[] = {
        "{\"name\":\"Ann\",\"age\":3,\"tags\":[\"red\"],\"kind\":\"person\"}",
        "{ \"name\" : \"A\\\"n\\u00e9\\n\" , \"age\" : -12, \"height\": 1.5e-3, \"tags\": "
        "[\"red\",\"blue\"], \"pet\": null, \"kind\": \"person\"}",
        "{\"name\":\"\",\"age\":0,\"tags\":[\"green\"],\"pet\":{\"species\":\"cat\",\"friend\":{"
        "\"species\":\"dog\"}},\"ok\":false,\"kind\":\"person\",\"extra\":{\"x\":1,\"y\":null}}",
        "{\n  \"name\": \"x\",\n  \"age\": 7,\n  \"tags\": [\"red\"],\n  \"kind\": \"person\"\n}",
    };
    for (const char* t : good) {
      QVERIFY2(json::accept(t) &&
                   Valid(json::parse(t), json::parse(kPersonSchema), json::parse(kPersonSchema)),
               t);
      QVERIFY2(Matches(g, t), t);
    }
    const char* bad[] = {
        "{\"age\":3,\"name\":\"Ann\",\"tags\":[\"red\"],\"kind\":\"person\"}",    // order
        "{\"name\":\"Ann\",\"tags\":[\"red\"],\"kind\":\"person\"}",              // age missing
        "{\"name\":\"Ann\",\"age\":3.5,\"tags\":[\"red\"],\"kind\":\"person\"}",  // not an integer
        "{\"name\":\"Ann\",\"age\":03,\"tags\":[\"red\"],\"kind\":\"person\"}",   // leading zero
        "{\"name\":\"Ann\",\"age\":3,\"tags\":[],\"kind\":\"person\"}",           // minItems
        "{\"name\":\"Ann\",\"age\":3,\"tags\":[\"red\",\"red\",\"red\",\"red\"],\"kind\":"
        "\"person\"}",                                                           // maxItems
        "{\"name\":\"Ann\",\"age\":3,\"tags\":[\"pink\"],\"kind\":\"person\"}",  // enum
        "{\"name\":\"Ann\",\"age\":3,\"tags\":[\"red\"],\"kind\":\"robot\"}",    // const
        "{\"name\":\"Ann\",\"age\":3,\"tags\":[\"red\"],\"kind\":\"person\",\"zzz\":1}",  // additional
        "{\"name\":\"Ann\",\"age\":3,\"tags\":[\"red\"],\"pet\":{},\"kind\":\"person\"}",  // pet.species
        "{\"name\":\"A\tn\",\"age\":3,\"tags\":[\"red\"],\"kind\":\"person\"}",  // raw tab in a
                                                                                 // string
        "{\"name\":\"\\x\",\"age\":3,\"tags\":[\"red\"],\"kind\":\"person\"}",   // bad escape
        "{\"name\":\"Ann\",\"age\":3,\"tags\":[\"red\"],\"kind\":\"person\"} ",  // trailing space
        " {\"name\":\"Ann\",\"age\":3,\"tags\":[\"red\"],\"kind\":\"person\"}",  // leading space
        "{\"name\":\"Ann\",\"age\":3,\"tags\":[\"red\"],\"kind\":\"person\",}",  // trailing comma
    };
    for (const char* t : bad) QVERIFY2(!Matches(g, t), t);
    // Prefixes of a valid document are alive but not accepting.
    JsonMatcher m(g);
    QVERIFY(m.Feed("{\"name\":\"Ann\",\"age\":3"));
    QVERIFY(!m.Accepting());
    // json_object: any object, nothing else.
    auto obj = AnyJsonObjectGrammar();
    QVERIFY(Matches(obj, "{\"a\":[1,{\"b\":null}],\"c\":\"d\",\"e\":-0.5E+2}"));
    QVERIFY(Matches(obj, "{}"));
    QVERIFY(!Matches(obj, "[1]"));
    QVERIFY(!Matches(obj, "\"s\""));
    // A top-level number ends with the input.
    auto num = Compile(json{{"type", "number"}});
    QVERIFY(Matches(num, "12.5"));
    QVERIFY(!Matches(num, "12."));
    // Whitespace runs are bounded.
    QVERIFY(Matches(obj, "{" + std::string(kMaxWhitespace, ' ') + "}"));
    QVERIFY(!Matches(obj, "{" + std::string(kMaxWhitespace + 1, ' ') + "}"));
  }

  // Every finished output under random logits parses and validates, and
  // nearly all runs finish.
  void randomGenerationValidates() {
    auto trie = TokenTrie::FromPieces(SmallVocab());
    std::mt19937 rng(1234);
    const json schemas[] = {
        json::parse(kPersonSchema),
        json{{"type", "object"}},
        json{{"type", "array"},
             {"items", {{"anyOf", json::array({{{"type", "integer"}}, {{"type", "boolean"}}})}}},
             {"maxItems", 4}},
        json{{"enum", json::array({"red", 12, nullptr, json{{"a", 1}}})}},
        json{{"type", "object"},
             {"properties", {{"a", {{"type", "number"}}}, {"b", {{"type", "string"}}}}},
             {"required", json::array({"b"})}},
    };
    for (const json& s : schemas) {
      auto g = Compile(s);
      auto proto = MakeGrammarConstraint(g, trie);
      int finished = 0;
      const int runs = 60;
      for (int r = 0; r < runs; ++r) {
        auto c = proto->Clone();
        auto text = Generate(*c, *trie, rng, 600);
        if (!text) continue;
        ++finished;
        QVERIFY2(json::accept(*text), (s.dump() + " gave " + *text).c_str());
        QVERIFY2(Valid(json::parse(*text), s, s), (s.dump() + " gave " + *text).c_str());
        QVERIFY2(Matches(g, *text), text->c_str());
      }
      QVERIFY2(finished >= runs * 8 / 10,
               (s.dump() + ": " + std::to_string(finished) + " finished").c_str());
    }
  }

  // The mask from the trie walk equals feeding each token's bytes to the
  // automaton, at several states, for the real vocabularies; special tokens
  // are never allowed; stop ids only where the document may end.
  void maskEqualsPerTokenFeed() {
    OCTET_REQUIRE_FIXTURES();
    for (const char* name : {"qwen3", "llama3"}) {
      auto tok = Tokenizer::Load(test::FixturesDir() + "/tokenizers/" + name + "/tokenizer.json");
      QVERIFY2(tok.ok(), tok.status().ToString().c_str());
      auto trie = TokenTrie::Build(*tok);
      auto g = Compile(json::parse(kPersonSchema));
      for (const char* prefix :
           {"", "{", "{\"name\":\"An", "{\"name\":\"Ann\",\"age\":1",
            "{\"name\":\"Ann\",\"age\":1,\"tags\":[",
            "{\"name\":\"Ann\",\"age\":1,\"tags\":[\"red\"],\"kind\":\"person\""}) {
        JsonMatcher m(g);
        QVERIFY(m.Feed(prefix));
        const std::vector<uint64_t> bits = AllowedTokens(m, *trie);
        int64_t allowed = 0;
        for (TokenId id = 0; id < tok->vocab_size(); ++id) {
          const bool bit = (bits[static_cast<size_t>(id) / 64] >> (id % 64)) & 1;
          JsonMatcher copy = m;
          const std::string bytes = tok->TokenBytes(id);
          const bool special = tok->IsSpecial(id) || trie->piece(id).empty();
          const bool feeds = !special && !bytes.empty() && copy.Feed(bytes);
          if (bit != feeds) {
            QFAIL(("token " + std::to_string(id) + " '" + bytes + "' after '" + prefix +
                   "': mask " + std::to_string(bit) + ", feed " + std::to_string(feeds))
                      .c_str());
          }
          allowed += bit;
        }
        QVERIFY(allowed > 0);
      }
      // Stop ids: masked until the document is complete.
      const std::vector<int32_t> stops = tok->StopIds();
      QVERIFY(!stops.empty());
      auto c = MakeGrammarConstraint(g, trie);
      std::vector<float> logits(static_cast<size_t>(tok->vocab_size()), 0.0f);
      c->Mask(logits.data(), static_cast<int64_t>(logits.size()), stops);
      QVERIFY(std::isinf(logits[static_cast<size_t>(stops[0])]));
      for (TokenId id :
           tok->Encode("{\"name\":\"Ann\",\"age\":3,\"tags\":[\"red\"],\"kind\":\"person\"}")) {
        c->Accept(id);
      }
      std::fill(logits.begin(), logits.end(), 0.0f);
      c->Mask(logits.data(), static_cast<int64_t>(logits.size()), stops);
      int64_t finite = 0;
      for (float x : logits) finite += std::isfinite(x);
      QCOMPARE(logits[static_cast<size_t>(stops[0])], 0.0f);
      QCOMPARE(finite, static_cast<int64_t>(stops.size()));  // nothing but the end
    }
  }

  // The sampler's fast path never returns a token the whole mask forbids;
  // greedy, top-k and top-p (together or alone, with a repetition penalty) give
  // exactly the ids and the random stream of sampling the masked logits, step
  // for step along whole documents; Allows agrees with the mask at every step.
  void fastPathEqualsMaskedSampling() {
    auto trie = TokenTrie::FromPieces(SmallVocab());
    const int32_t stop = static_cast<int32_t>(trie->vocab());
    const int32_t stops[] = {stop};
    const int64_t vocab = trie->vocab() + 1;
    auto ops = ScalarOps();
    auto g = Compile(json::parse(kPersonSchema));
    struct Case {
      float temperature;
      int64_t top_k;
      float top_p;
      float penalty;
    };
    const Case cases[] = {{0.0f, 0, 1.0f, 1.0f},  {0.0f, 0, 1.0f, 1.3f}, {0.8f, 5, 1.0f, 1.0f},
                          {1.0f, 20, 0.9f, 1.0f}, {0.7f, 3, 1.0f, 1.2f}, {1.0f, 0, 0.8f, 1.0f},
                          {0.8f, 0, 0.95f, 1.2f}, {1.3f, 0, 0.5f, 1.0f}};
    std::mt19937 rng(99);
    int64_t steps = 0, fast = 0;
    for (const Case& k : cases) {
      const int64_t case_steps = steps, case_fast = fast;
      for (int run = 0; run < 20; ++run) {
        SamplingParams sp;
        sp.temperature = k.temperature;
        sp.top_k = k.top_k;
        sp.top_p = k.top_p;
        sp.repetition_penalty = k.penalty;
        sp.seed = 7 + run;
        Sampler quick(sp), full(sp);
        const std::vector<int32_t> prompt = {3, 5, 60};
        quick.SetPrompt(prompt);
        full.SetPrompt(prompt);
        auto c = MakeGrammarConstraint(g, trie);
        Filter filter(*c, stops);
        std::vector<float> logits, masked;
        for (int t = 0; t < 300; ++t) {
          RandomLogits(*trie, rng, &logits);
          masked = logits;
          c->Mask(masked.data(), vocab, stops);
          int64_t allowed = 0;
          for (int64_t i = 0; i < vocab; ++i) allowed += std::isfinite(masked[size_t(i)]);
          QVERIFY(allowed > 0);
          for (int32_t i = 0; i < vocab; ++i) {
            if (c->Allows(i, stops) != static_cast<bool>(std::isfinite(masked[size_t(i)]))) {
              QFAIL(("Allows(" + std::to_string(i) + ") disagrees with the mask at step " +
                     std::to_string(t))
                        .c_str());
            }
          }
          const int64_t masks_before = filter.masks;
          const int32_t a = quick.Sample(logits.data(), vocab, *ops, filter);
          const int32_t b = full.Sample(masked.data(), vocab, *ops);
          QVERIFY2(std::isfinite(masked[size_t(a)]),
                   ("the fast path chose forbidden token " + std::to_string(a)).c_str());
          if (a != b) {
            QFAIL(("step " + std::to_string(t) + " (T " + std::to_string(k.temperature) +
                   ", top-k " + std::to_string(k.top_k) + ", top-p " + std::to_string(k.top_p) +
                   "): fast path " + std::to_string(a) + ", masked sampling " + std::to_string(b))
                      .c_str());
          }
          if (k.temperature == 0.0f && k.penalty == 1.0f) {  // the masked argmax, by hand
            int64_t best = 0;
            for (int64_t i = 1; i < vocab; ++i) {
              if (masked[size_t(i)] > masked[size_t(best)]) best = i;
            }
            QCOMPARE(a, static_cast<int32_t>(best));
          }
          ++steps;
          fast += filter.masks == masks_before;
          if (a == stop) break;
          c->Accept(a);
        }
      }
      // Top-p alone decides without the whole mask where the allowed ids lead.
      if (k.top_k == 0 && k.top_p < 1.0f) {
        QVERIFY2(fast - case_fast > (steps - case_steps) / 10,
                 ("top-p " + std::to_string(k.top_p) + ": " + std::to_string(fast - case_fast) +
                  " of " + std::to_string(steps - case_steps) + " steps without a mask")
                     .c_str());
      }
    }
    // The fast path is taken (not only the masks), and not always.
    QVERIFY2(
        fast > steps / 10 && fast < steps,
        (std::to_string(fast) + " of " + std::to_string(steps) + " steps without a mask").c_str());
  }

  // Plain temperature (no top-k/top-p): a draw is kept when allowed, else one
  // is drawn from the masked logits. The frequencies must be the masked
  // softmax's, at states where the allowed tokens hold little of the
  // unmasked mass and where they hold most of it.
  void fastPathTemperatureIsTheMaskedSoftmax() {
    auto trie = TokenTrie::FromPieces(SmallVocab());
    const int32_t stop = static_cast<int32_t>(trie->vocab());
    const int32_t stops[] = {stop};
    const int64_t vocab = trie->vocab() + 1;
    auto ops = ScalarOps();
    auto g = Compile(json::parse(kPersonSchema));
    std::mt19937 rng(5);
    for (const char* prefix :
         {"{\"name\":\"An", "{\"name\":\"Ann\"", "{\"name\":\"Ann\",\"age\":1"}) {
      auto c = MakeGrammarConstraint(g, trie);
      for (char ch : std::string(prefix)) {  // one-byte pieces: ' ' + offset
        c->Accept(static_cast<int32_t>(ch - ' '));
      }
      std::vector<float> logits;
      RandomLogits(*trie, rng, &logits);
      std::vector<float> masked = logits;
      c->Mask(masked.data(), vocab, stops);
      const float temperature = 0.9f;
      // The masked softmax, independently of the sampler.
      double mx = -INFINITY, z = 0, z_all = 0;
      for (float x : masked) mx = std::max<double>(mx, x);
      std::vector<double> p(size_t(vocab), 0.0);
      for (int64_t i = 0; i < vocab; ++i) {
        if (std::isfinite(masked[size_t(i)]))
          p[size_t(i)] = std::exp((masked[size_t(i)] - mx) / temperature);
        z += p[size_t(i)];
        z_all += std::exp((logits[size_t(i)] - mx) / temperature);
      }
      for (double& x : p) x /= z;
      SamplingParams sp;
      sp.temperature = temperature;
      sp.seed = 11;
      Sampler s(sp);
      Filter filter(*c, stops);
      const int n = 40000;
      std::vector<int> count(size_t(vocab), 0);
      for (int i = 0; i < n; ++i) {
        const int32_t id = s.Sample(logits.data(), vocab, *ops, filter);
        QVERIFY(p[size_t(id)] > 0);
        ++count[size_t(id)];
      }
      double worst = 0;
      for (int64_t i = 0; i < vocab; ++i) {
        const double f = double(count[size_t(i)]) / n;
        const double sd = std::sqrt(p[size_t(i)] * (1 - p[size_t(i)]) / n);
        worst = std::max(worst, std::abs(f - p[size_t(i)]) / std::max(sd, 1e-3));
      }
      // Five standard deviations for any token (a few dozen tokens tested).
      QVERIFY2(worst < 5.0, (std::string(prefix) + ": " + std::to_string(worst) +
                             " standard deviations off; allowed mass " + std::to_string(z / z_all) +
                             ", masks " + std::to_string(filter.masks))
                                .c_str());
      qInfo("%s: allowed mass %.3f, %lld whole masks in %d draws, worst %.2f sd", prefix, z / z_all,
            static_cast<long long>(filter.masks), n, worst);
    }
  }

  // The server's streamed tool calls (ToolCallStreamFilter), fed in pieces of
  // several sizes: each call's head (id, name, empty arguments) before any of
  // its arguments, the arguments in fragments as they come, and in the end
  // the calls and content the non-streamed reply (ParseToolCalls) has.
  void streamedToolCalls() {
    struct Case {
      std::string text;
      int calls;       // complete calls
      bool fragments;  // arguments streamed (not sent whole at the end)
    };
    const Case cases[] = {
        {"Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
         "\"Paris\", \"days\": 2}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", "
         "\"arguments\": {\"utc\": true}}\n</tool_call>\nDone.",
         2, true},
        {"<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\", "
         "\"nested\": {\"a\": [1, \"}]\\\"\"]}}}",
         1, true},
        {"  \n{\"name\": \"f\\u00e9\", \"parameters\": {}}", 1, false},
        {"{\"parameters\": {\"x\": 1}, \"name\": \"f\"}", 1, false},
        {"<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"x\\\": 1}\"}</tool_call>", 1, false},
        {"{\"answer\": 42}", 0, false},
        {"a < b and <tool> and <tool_ here", 0, false},
        {"Hm. <tool_call>not json</tool_call> after", 0, false},
        {"<|python_tag", 0, false},
    };
    auto squeeze = [](std::string s) {
      s.erase(std::remove_if(s.begin(), s.end(), [](char c) { return std::isspace(uint8_t(c)); }),
              s.end());
      return s;
    };
    for (const Case& k : cases) {
      const ParsedToolCalls whole = ParseToolCalls(k.text);
      QCOMPARE(static_cast<int>(whole.calls.size()), k.calls);
      for (size_t piece : {size_t{1}, size_t{2}, size_t{5}, size_t{13}, k.text.size()}) {
        const std::string where = "'" + k.text + "' in pieces of " + std::to_string(piece);
        ToolCallStreamFilter f(ToolMode{true, false});
        std::vector<nlohmann::json> deltas;
        for (size_t at = 0; at < k.text.size(); at += piece) {
          for (auto& d : f.Push(std::string_view(k.text).substr(at, piece))) deltas.push_back(d);
        }
        bool called = false;
        for (auto& d : f.Finish(&called)) deltas.push_back(d);
        std::string content;
        std::vector<std::pair<std::string, std::string>> calls;
        std::vector<int> frags;
        for (const nlohmann::json& d : deltas) {
          if (d.contains("content")) {
            content += d["content"].get<std::string>();
            continue;
          }
          const nlohmann::json& tc = d["tool_calls"][0];
          const size_t i = tc["index"].get<size_t>();
          if (tc.contains("id")) {
            QVERIFY2(i == calls.size(), where.c_str());
            QVERIFY2(tc["id"].get<std::string>().rfind("call_", 0) == 0, where.c_str());
            QVERIFY2(tc["function"]["arguments"] == "", where.c_str());
            calls.push_back({tc["function"]["name"], ""});
            frags.push_back(0);
          } else {
            QVERIFY2(i + 1 == calls.size() && !tc["function"].contains("name"), where.c_str());
            calls[i].second += tc["function"]["arguments"].get<std::string>();
            frags[i] += 1;
          }
        }
        QVERIFY2(called == (k.calls > 0), where.c_str());
        QVERIFY2(static_cast<int>(calls.size()) == k.calls, (where + ": " + content).c_str());
        for (size_t i = 0; i < calls.size(); ++i) {
          QVERIFY2(calls[i].first == whole.calls[i].name, where.c_str());
          QVERIFY2(json::parse(calls[i].second) == json::parse(whole.calls[i].arguments),
                   (where + ": " + calls[i].second).c_str());
          if (k.fragments && piece == 1) QVERIFY2(frags[i] > 3, where.c_str());
        }
        QVERIFY2(squeeze(content) == squeeze(whole.content),
                 (where + ": content '" + content + "' vs '" + whole.content + "'").c_str());
      }
    }
    // Cut off inside the arguments: the head and what came of them went out,
    // but no complete call (the reply's own finish reason stays).
    ToolCallStreamFilter f(ToolMode{true, false});
    auto d = f.Push("<tool_call>{\"name\": \"f\", \"arguments\": {\"x\": [1, ");
    bool called = true;
    f.Finish(&called);
    QVERIFY(!called);
    QVERIFY(d.size() == 2 && d[0]["tool_calls"][0]["function"]["name"] == "f");
    QCOMPARE(d[1]["tool_calls"][0]["function"]["arguments"].get<std::string>(),
             std::string("{\"x\": [1, "));
  }

  void toolCallsParse() {
    auto p = ParseToolCalls(
        "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
        "\"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"f\", \"arguments\": \"{\\\"x\\\": "
        "1}\"}\n</tool_call>");
    QCOMPARE(p.calls.size(), size_t(2));
    QCOMPARE(p.calls[0].name, std::string("get_weather"));
    QCOMPARE(json::parse(p.calls[0].arguments), json::parse("{\"city\":\"Paris\"}"));
    QCOMPARE(json::parse(p.calls[1].arguments), json::parse("{\"x\":1}"));
    QCOMPARE(p.content, std::string("Let me check."));
    auto l = ParseToolCalls("{\"name\": \"f\", \"parameters\": {\"a\": [1, 2]}}");
    QCOMPARE(l.calls.size(), size_t(1));
    QCOMPARE(l.content, std::string());
    auto none = ParseToolCalls("<tool_call>not json</tool_call> hi");
    QVERIFY(none.calls.empty());
    QCOMPARE(none.content, std::string("<tool_call>not json</tool_call> hi"));
    QCOMPARE(ToolCallHoldBack("abc <tool"), size_t(4));
    QCOMPARE(ToolCallHoldBack("abc <tool_call>{"), size_t(4));
    QCOMPARE(ToolCallHoldBack("abc"), size_t(3));
    // The forced-call schema: a call of the named tool, its parameters validated.
    const std::string tools =
        "[\n"
        "      "
        "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":"
        "\"object\",\n"
        "        "
        "\"properties\":{\"city\":{\"type\":\"string\"},\"unit\":{\"enum\":[\"c\",\"f\"]}},"
        "\"required\":[\"city\"]}}},\n"
        "      {\"type\":\"function\",\"function\":{\"name\":\"noop\"}}]";
    auto s = ToolCallSchema(tools, "get_weather");
    QVERIFY2(s.ok(), s.status().ToString().c_str());
    auto g = CompileJsonSchema(*s);
    QVERIFY2(g.ok(), g.status().ToString().c_str());
    QVERIFY(
        Matches(*g, "{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Oslo\",\"unit\":\"c\"}}"));
    QVERIFY(!Matches(*g, "{\"name\":\"noop\",\"arguments\":{}}"));
    auto any = ToolCallSchema(tools, "");
    QVERIFY(any.ok());
    QVERIFY(Matches(*CompileJsonSchema(*any), "{\"name\":\"noop\",\"arguments\":{}}"));
    QVERIFY(!ToolCallSchema(tools, "nope").ok());
    QVERIFY(!ToolCallSchema("[{\"type\":\"function\",\"function\":{}}]", "").ok());
  }
};

QTEST_GUILESS_MAIN(TestStructuredOutput)
#include "test_structured_output.moc"
