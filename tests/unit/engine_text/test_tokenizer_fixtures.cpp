// The Qwen3 and Llama-3 tokenizers against ../shared/fixtures/tokenizers: ids
// from Hugging Face `tokenizers` (Rust) for 195 strings, 7 rendered chat
// templates and 11 decode cases. Every case must match exactly, and
// decode(encode(s)) must give s back (NFC(s) for Qwen3).
#include <unicode/normalizer2.h>
#include <unicode/utf8.h>

#include <QtTest>

#include "octet/base/file_util.h"
#include "octet/base/json.h"
#include "octet/engine/chat_template.h"
#include "octet/engine/tokenizer.h"
#include "octet_test.h"

using namespace octet;
using namespace octet::engine;
using json = nlohmann::json;

namespace {

std::string TokDir(const std::string& name) { return test::FixturesDir() + "/tokenizers/" + name; }

json LoadCases(const std::string& file) {
  auto text = ReadFileToString(test::FixturesDir() + "/tokenizers/" + file);
  if (!text.ok()) qFatal("%s", text.status().ToString().c_str());
  return json::parse(*text);
}

std::string Ids(const std::vector<TokenId>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s + "]";
}

// NFC through ICU, independent of the tokenizer's own normalizer code path.
std::string Nfc(const std::string& s) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* n = icu::Normalizer2::getNFCInstance(status);
  icu::UnicodeString u = icu::UnicodeString::fromUTF8(s);
  icu::UnicodeString out = n->normalize(u, status);
  std::string r;
  out.toUTF8String(r);
  return r;
}

// Strict UTF-8 validity through ICU's decoder.
bool IsValidUtf8(const std::string& s) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const int32_t n = static_cast<int32_t>(s.size());
  int32_t i = 0;
  while (i < n) {
    UChar32 c;
    U8_NEXT(p, i, n, c);
    if (c < 0) return false;
  }
  return true;
}

}  // namespace

class TestTokenizerFixtures : public QObject {
  Q_OBJECT

  std::unique_ptr<Tokenizer> qwen_;
  std::unique_ptr<Tokenizer> llama_;

  const Tokenizer& Get(const std::string& name) { return name == "qwen3" ? *qwen_ : *llama_; }

 private slots:
  void initTestCase() {
    OCTET_REQUIRE_FIXTURES();
    auto q = Tokenizer::Load(TokDir("qwen3"));
    QVERIFY2(q.ok(), q.status().ToString().c_str());
    qwen_ = std::make_unique<Tokenizer>(*std::move(q));
    auto l = Tokenizer::Load(TokDir("llama3") + "/tokenizer.json");
    QVERIFY2(l.ok(), l.status().ToString().c_str());
    llama_ = std::make_unique<Tokenizer>(*std::move(l));
    qInfo("qwen3: %s", qwen_->Describe().c_str());
    qInfo("llama3: %s", llama_->Describe().c_str());
  }

  void vocabularyShape() {
    QCOMPARE(qwen_->vocab_size(), 151669);
    QCOMPARE(llama_->vocab_size(), 128256);
    QCOMPARE(qwen_->added_tokens().size(), size_t(26));
    QCOMPARE(llama_->added_tokens().size(), size_t(256));
    QCOMPARE(*qwen_->TokenToId("<|im_end|>"), 151645);
    QCOMPARE(*llama_->TokenToId("<|eot_id|>"), 128009);
    QCOMPARE(qwen_->IdToToken(9707), std::string("Hello"));
    QVERIFY(qwen_->IsSpecial(151644));
    QVERIFY(!qwen_->IsSpecial(151667));  // <think> is added but not special
  }

  void encodeEveryCase() {
    const json cases = LoadCases("cases.json");
    QCOMPARE(cases.size(), size_t(195));
    int failures = 0;
    for (const json& c : cases) {
      const std::string text = c["text"];
      for (const char* name : {"qwen3", "llama3"}) {
        const std::vector<TokenId> want = c[name].get<std::vector<TokenId>>();
        const std::vector<TokenId> got = Get(name).Encode(text);
        if (got != want) {
          ++failures;
          qWarning("%s [%s] %s\n  want %s\n  got  %s", name, c["cat"].get<std::string>().c_str(),
                   json(text).dump().c_str(), Ids(want).c_str(), Ids(got).c_str());
        }
      }
    }
    QCOMPARE(failures, 0);
  }

  void addSpecialTokensChangesNothingForTheseFiles() {
    // Both files' post-processors are ByteLevel only (see the fixture README).
    for (const char* name : {"qwen3", "llama3"}) {
      EncodeOptions with;
      with.add_special_tokens = true;
      QCOMPARE(Get(name).Encode("Hello world", with), Get(name).Encode("Hello world"));
    }
  }

  void decodeRoundTripsEveryCase() {
    const json cases = LoadCases("cases.json");
    int failures = 0;
    for (const json& c : cases) {
      const std::string text = c["text"];
      for (const char* name : {"qwen3", "llama3"}) {
        const std::vector<TokenId> ids = c[name].get<std::vector<TokenId>>();
        auto decoded = Get(name).Decode(ids);
        const std::string want = std::string(name) == "qwen3" ? Nfc(text) : text;
        if (!decoded.ok() || *decoded != want) {
          ++failures;
          qWarning(
              "%s decode %s gave %s", name, json(text).dump().c_str(),
              decoded.ok() ? json(*decoded).dump().c_str() : decoded.status().ToString().c_str());
        }
      }
    }
    QCOMPARE(failures, 0);
  }

  void chatTemplateCases() {
    const json cases = LoadCases("chat_cases.json");
    QCOMPARE(cases.size(), size_t(7));
    for (const json& c : cases) {
      const Tokenizer& tok = Get(c["tokenizer"]);
      const ChatTemplate tmpl = tok.chat_template();
      QVERIFY2(tmpl.warning().empty(), tmpl.warning().c_str());
      std::vector<ChatMessage> messages;
      for (const json& m : c["messages"]) messages.push_back({m["role"], m["content"]});
      ChatOptions options;
      options.add_generation_prompt = c["add_generation_prompt"];
      if (c["template_kwargs"].contains("enable_thinking")) {
        options.enable_thinking = c["template_kwargs"]["enable_thinking"].get<bool>();
      }
      auto text = tmpl.Apply(messages, options);
      QVERIFY2(text.ok(), text.status().ToString().c_str());
      const std::string label =
          c["tokenizer"].get<std::string>() + "/" + c["name"].get<std::string>();
      QVERIFY2(*text == c["text"].get<std::string>(),
               (label + ": got " + json(*text).dump()).c_str());
      QVERIFY2(tok.Encode(*text) == c["ids"].get<std::vector<TokenId>>(), label.c_str());
    }
  }

  void templateFamiliesAndStopIds() {
    QCOMPARE(qwen_->chat_template().family(), ChatFamily::kQwen3);
    QCOMPARE(llama_->chat_template().family(), ChatFamily::kLlama3);
    // Qwen3: <|im_end|> (also eos_token) and <|endoftext|>.
    QCOMPARE(qwen_->StopIds(), (std::vector<TokenId>{151645, 151643}));
    // Llama-3: <|eot_id|> and <|end_of_text|> (also eos_token). <|eom_id|> came
    // with Llama 3.1; in this file 128008 is still a reserved token.
    const std::vector<TokenId> stops = llama_->StopIds();
    QCOMPARE(stops.size(), size_t(2));
    QVERIFY(!llama_->TokenToId("<|eom_id|>").has_value());
    QVERIFY(std::find(stops.begin(), stops.end(), 128009) != stops.end());
    QVERIFY(std::find(stops.begin(), stops.end(), 128001) != stops.end());
    QCOMPARE(*llama_->bos_id(), 128000);
    QCOMPARE(*qwen_->eos_id(), 151645);
    QVERIFY(!qwen_->bos_id().has_value());
  }

  void decodeCases() {
    const json cases = LoadCases("decode_cases.json");
    QCOMPARE(cases.size(), size_t(11));
    for (const json& c : cases) {
      DecodeOptions options;
      options.skip_special_tokens = c["skip_special_tokens"];
      const std::vector<TokenId> ids = c["ids"].get<std::vector<TokenId>>();
      auto text = Get(c["tokenizer"]).Decode(ids, options);
      QVERIFY2(text.ok(), text.status().ToString().c_str());
      QVERIFY2(*text == c["text"].get<std::string>(),
               (c["tokenizer"].get<std::string>() + " " + Ids(ids) + " gave " + json(*text).dump())
                   .c_str());
    }
  }

  void streamingMatchesWholeDecode() {
    // Every fixture id list, fed one id at a time, gives the same text as one
    // Decode call, and no chunk ever ends inside a character.
    const json cases = LoadCases("cases.json");
    const json decode_cases = LoadCases("decode_cases.json");
    std::vector<std::pair<std::string, std::vector<TokenId>>> lists;
    for (const json& c : cases) {
      for (const char* name : {"qwen3", "llama3"})
        lists.emplace_back(name, c[name].get<std::vector<TokenId>>());
    }
    for (const json& c : decode_cases) {
      lists.emplace_back(c["tokenizer"], c["ids"].get<std::vector<TokenId>>());
    }
    for (const auto& [name, ids] : lists) {
      StreamDecoder stream(Get(name));
      std::string streamed;
      for (TokenId id : ids) {
        auto chunk = stream.Push(id);
        QVERIFY(chunk.ok());
        QVERIFY2(IsValidUtf8(*chunk), "a streamed chunk is not valid UTF-8");
        streamed += *chunk;
      }
      streamed += stream.Finish();
      QCOMPARE(streamed, *Get(name).Decode(ids));
    }
  }

  void streamingHoldsBackPartialCharacters() {
    // "😀" is 4 bytes; Llama-3 encodes it as [76460, 222]: the first id carries
    // 3 of the bytes, which must be held back.
    StreamDecoder stream(*llama_);
    auto first = stream.Push(76460);
    QVERIFY(first.ok());
    QCOMPARE(*first, std::string());
    QCOMPARE(stream.pending_bytes(), size_t(3));
    auto second = stream.Push(222);
    QCOMPARE(*second, std::string("\xF0\x9F\x98\x80"));
    QCOMPARE(stream.Finish(), std::string());
    // An unfinished character at the end becomes U+FFFD on Finish.
    QCOMPARE(*stream.Push(76460), std::string());
    QCOMPARE(stream.Finish(), std::string("\xEF\xBF\xBD"));
    // An unknown id is an error that leaves the stream as it was.
    QVERIFY(!stream.Push(999999).ok());
  }

  void invalidUtf8IsEncodedAsBytes() {
    // Bytes that are not UTF-8 are encoded, not rejected, and come back exactly.
    const std::string text = std::string("ok \xFF\xFE bad \xE2\x82 cut") + "\xC3";
    for (const Tokenizer* tok : {qwen_.get(), llama_.get()}) {
      const std::vector<TokenId> ids = tok->Encode(text);
      QVERIFY(!ids.empty());
      auto bytes = tok->DecodeBytes(ids);
      QVERIFY(bytes.ok());
      QCOMPARE(*bytes, text);
      auto lossy = tok->Decode(ids);
      QCOMPARE(*lossy, std::string("ok \xEF\xBF\xBD\xEF\xBF\xBD bad \xEF\xBF\xBD cut\xEF\xBF\xBD"));
    }
  }

  void emptyAndOutOfRange() {
    QVERIFY(qwen_->Encode("").empty());
    QCOMPARE(*qwen_->Decode({}), std::string());
    const std::vector<TokenId> bad = {9707, -1};
    auto r = qwen_->Decode(bad);
    QVERIFY(!r.ok());
    QVERIFY2(r.status().message().find("position 1") != std::string::npos,
             r.status().message().c_str());
    const std::vector<TokenId> too_big = {151669};
    QVERIFY(!qwen_->Decode(too_big).ok());
  }

  void splitSpecialTokensKeepsThemAsText() {
    EncodeOptions options;
    options.split_special_tokens = true;
    // Special tokens become text; the non-special <think> is still one token.
    const std::vector<TokenId> ids = qwen_->Encode("<|im_end|><think>", options);
    QVERIFY(std::find(ids.begin(), ids.end(), 151645) == ids.end());
    QCOMPARE(ids.back(), 151667);
    QCOMPARE(*qwen_->Decode(ids), std::string("<|im_end|><think>"));
  }

  void caseFoldedContractionLikeOniguruma() {
    // Oniguruma folds case over Unicode: "'ſ" (U+017F LONG S) matches "'s".
    const std::vector<std::string> pieces = qwen_->PreTokenize("'\xC5\xBFt");
    QCOMPARE(pieces.size(), size_t(2));
    QCOMPARE(pieces[0], std::string("'\xC5\xBF"));
    QCOMPARE(pieces[1], std::string("t"));
  }
};

QTEST_APPLESS_MAIN(TestTokenizerFixtures)
#include "test_tokenizer_fixtures.moc"
