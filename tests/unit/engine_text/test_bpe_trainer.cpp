// The BPE trainer: the textbook example's merges, a written tokenizer.json that
// our loader reads back and that round-trips any text, the requested vocabulary
// size, determinism, special tokens, GPT-4 split behaviour, and its errors.
#include <QtTest>
#include <chrono>
#include <random>

#include "octet/base/json.h"
#include "octet/engine/bpe_trainer.h"
#include "octet/engine/tokenizer.h"
#include "octet_test.h"

using namespace octet;
using namespace octet::engine;
using json = nlohmann::json;

namespace {

// Deterministic multi-script text with a Zipf-like word law.
std::string Corpus(size_t bytes, uint32_t seed) {
  static const char* kSyllables[] = {"ka", "to",  "ri",  "sen", "mo", "la",  "ter",
                                     "in", "ex",  "pro", "ba",  "ne", "sti", "ol",
                                     "ur", "gra", "ly",  "che", "vi", "dor"};
  static const char* kExtra[] = {
      "Привет мир. ", "你好，世界。",      "Καλημέρα. ",      "😀 ",
      "café ",        "x = f(3.14159);\n", "    return 0;\n", "It's 2024! "};
  std::mt19937 rng(seed);
  std::vector<std::string> lexicon;
  for (int i = 0; i < 20000; ++i) {
    std::string w;
    for (uint32_t k = 0, n = 1 + rng() % 4; k < n; ++k)
      w += kSyllables[rng() % std::size(kSyllables)];
    lexicon.push_back(w);
  }
  std::string out;
  std::uniform_real_distribution<double> unit(0, 1);
  while (out.size() < bytes) {
    const double r = std::exp(unit(rng) * std::log(20001.0)) - 1.0;
    out += lexicon[std::min<size_t>(lexicon.size() - 1, size_t(r))];
    out += (rng() % 12 == 0) ? ".\n" : " ";
    if (rng() % 40 == 0) out += kExtra[rng() % std::size(kExtra)];
  }
  return out;
}

}  // namespace

class TestBpeTrainer : public QObject {
  Q_OBJECT
 private slots:
  void textbookExample() {
    // Wikipedia's "aaabdaaabac": merge aa (4 times), then ab (2; it ties with
    // "aa a" and wins as the smaller pair), then aa+ab; every pair left is seen
    // once, below min_pair_count 2.
    BpeTrainerOptions o;
    o.vocab_size = 300;
    BpeTrainingStats stats;
    auto text = TrainBpeTokenizerJson("aaabdaaabac", o, &stats);
    QVERIFY2(text.ok(), text.status().ToString().c_str());
    const json j = json::parse(*text);
    QCOMPARE(j["model"]["merges"], json::parse(R"([["a","a"],["a","b"],["aa","ab"]])"));
    QCOMPARE(j["model"]["vocab"]["aaab"].get<int>(), 258);
    QCOMPARE(stats.vocab_size, 259);
    auto tok = Tokenizer::FromJson(*text);
    QVERIFY(tok.ok());
    QCOMPARE(tok->Encode("aaabdaaabac"), (std::vector<TokenId>{258, 'd', 258, 'a', 'c'}));
  }

  void writtenTokenizerRoundTrips() {
    const std::string corpus = Corpus(300'000, 1);
    BpeTrainerOptions o;
    o.vocab_size = 2048;
    o.special_tokens = {"<|endoftext|>", "<|pad|>"};
    BpeTrainingStats stats;
    auto text = TrainBpeTokenizerJson(corpus, o, &stats);
    QVERIFY2(text.ok(), text.status().ToString().c_str());
    QCOMPARE(stats.vocab_size, 2048);
    QCOMPARE(stats.merges, 2048 - 256 - 2);
    auto tok = Tokenizer::FromJson(*text);
    QVERIFY2(tok.ok(), tok.status().ToString().c_str());
    QCOMPARE(tok->vocab_size(), 2048);
    QCOMPARE(*tok->TokenToId("<|endoftext|>"), 2046);
    QCOMPARE(*tok->TokenToId("<|pad|>"), 2047);
    QVERIFY(tok->IsSpecial(2046));

    // The corpus compresses (a learned vocabulary, not bytes) and comes back.
    const std::vector<TokenId> ids = tok->Encode(corpus);
    QVERIFY2(ids.size() * 3 < corpus.size(), std::to_string(ids.size()).c_str());
    QCOMPARE(*tok->Decode(ids), corpus);
    // Unseen text, special tokens and invalid UTF-8 too.
    const std::string other = Corpus(20'000, 99) + "<|endoftext|>\xFF\xFE tail \xE2\x82";
    const std::vector<TokenId> other_ids = tok->Encode(other);
    QCOMPARE(*tok->DecodeBytes(other_ids), other);
    QVERIFY(std::find(other_ids.begin(), other_ids.end(), 2046) != other_ids.end());
  }

  void deterministicAndChunkingFree() {
    // The same text gives the same file, whether it comes in one piece with a
    // special token between documents or document by document.
    const std::string a = Corpus(50'000, 2), b = Corpus(50'000, 3);
    BpeTrainerOptions o;
    o.vocab_size = 700;
    o.special_tokens = {"<|endoftext|>"};
    BpeTrainer whole(o);
    QVERIFY(whole.AddText(a + "<|endoftext|>" + b).ok());
    BpeTrainer parts(o);
    QVERIFY(parts.AddText(a).ok());
    QVERIFY(parts.AddText(b).ok());
    auto x = whole.Train();
    auto y = parts.Train();
    QVERIFY(x.ok() && y.ok());
    QVERIFY(*x == *y);
    QVERIFY(*x == *TrainBpeTokenizerJson(a + "<|endoftext|>" + b, o));
    // Nothing learned crosses the special token: no vocabulary entry holds "<|".
    QVERIFY(x->find("\"<|\"") == std::string::npos);
  }

  void gpt4SplitPattern() {
    // tiktoken cl100k behaviour of the default split pattern.
    BpeTrainerOptions o;
    o.vocab_size = 256;
    auto text = TrainBpeTokenizerJson("", o);
    QVERIFY(text.ok());
    auto tok = Tokenizer::FromJson(*text);
    QVERIFY2(tok.ok(), tok.status().ToString().c_str());
    using V = std::vector<std::string>;
    QCOMPARE(tok->PreTokenize("Hello world"), (V{"Hello", " world"}));
    QCOMPARE(tok->PreTokenize("1234567"), (V{"123", "456", "7"}));
    QCOMPARE(tok->PreTokenize("don't DON'T"), (V{"don", "'t", " DON", "'T"}));
    QCOMPARE(tok->PreTokenize("\n\n  x"), (V{"\n\n", " ", " x"}));
    QCOMPARE(tok->PreTokenize("a  ...!\n\nb"), (V{"a", " ", " ...!\n\n", "b"}));
    // With only the 256 byte tokens, every byte is its own id.
    QCOMPARE(tok->Encode("Hi"), (std::vector<TokenId>{'H', 'i'}));
  }

  void stopsWhenPairsRunOut() {
    BpeTrainerOptions o;
    o.vocab_size = 5000;
    BpeTrainingStats stats;
    auto text = TrainBpeTokenizerJson("ab ab ab cd", o, &stats);
    QVERIFY(text.ok());
    QVERIFY(stats.vocab_size < 5000);
    QCOMPARE(Tokenizer::FromJson(*text)->vocab_size(), stats.vocab_size);
  }

  void errors() {
    BpeTrainerOptions small;
    small.vocab_size = 257;
    small.special_tokens = {"<a>", "<b>"};
    auto r = TrainBpeTokenizerJson("text", small);
    QVERIFY(!r.ok());
    QVERIFY(r.status().message().find("vocab_size 257") != std::string::npos);

    BpeTrainerOptions dup;
    dup.special_tokens = {"<a>", "<a>"};
    QVERIFY(!TrainBpeTokenizerJson("text", dup).ok());

    BpeTrainerOptions bad;
    bad.split_pattern = "(unclosed";
    BpeTrainer trainer(bad);
    QVERIFY(!trainer.AddText("x").ok());

    BpeTrainer once(BpeTrainerOptions{});
    QVERIFY(once.AddText("some text").ok());
    QVERIFY(once.Train().ok());
    QVERIFY(!once.Train().ok());
    QVERIFY(!once.AddText("more").ok());
  }

  void trainsAFewMegabytesQuickly() {
    // Not a timing assertion: prints the figure (the benchmark has the real one).
    const std::string corpus = Corpus(2'000'000, 5);
    BpeTrainerOptions o;
    o.vocab_size = 4096;
    o.special_tokens = {"<|endoftext|>"};
    const auto t0 = std::chrono::steady_clock::now();
    BpeTrainingStats stats;
    auto text = TrainBpeTokenizerJson(corpus, o, &stats);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    QVERIFY(text.ok());
    QCOMPARE(stats.vocab_size, 4096);
    qInfo("trained %d merges on %.1f MB (%lld distinct words) in %.2f s", stats.merges,
          stats.corpus_bytes / 1e6, static_cast<long long>(stats.distinct_words), s);
  }
};

QTEST_APPLESS_MAIN(TestBpeTrainer)
#include "test_bpe_trainer.moc"
