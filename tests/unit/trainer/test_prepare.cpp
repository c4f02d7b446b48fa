// octet train prepare's library side: text files become shards whose
// documents decode back to the files exactly (BOS before each), the
// validation split takes whole documents (or the tail of a lone one), the
// tokenizer is trained or taken as given, token_bytes.npy matches the
// tokenizer, and bad inputs are refused.
#include <QtTest>

#include "octet/base/file_util.h"
#include "octet/base/npy.h"
#include "octet/engine/tokenizer.h"
#include "octet/trainer/prepare.h"
#include "octet/trainer/token_shards.h"
#include "octet_test.h"

using namespace octet;
using namespace octet::trainer;

namespace {

std::string Text(int i) {
  std::string s = "Document " + std::to_string(i) + ": ";
  for (int k = 0; k < 20 + i % 7; ++k) {
    s += (k % 3 == 0   ? "the quick brown fox "
          : k % 3 == 1 ? "jumps over the lazy dog. "
                       : "Ünïcödé, 42! ");
  }
  return s + "\n";
}

// Splits a token stream at BOS into documents (the first token must be BOS).
std::vector<std::vector<int32_t>> SplitAtBos(const std::vector<int32_t>& ids, int32_t bos) {
  std::vector<std::vector<int32_t>> docs;
  for (int32_t id : ids) {
    if (id == bos) {
      docs.emplace_back();
    } else {
      if (docs.empty()) qFatal("stream does not start with BOS");
      docs.back().push_back(id);
    }
  }
  return docs;
}

std::vector<int32_t> ReadAll(const std::string& dir, const std::string& split) {
  auto ds = TokenDataset::Open(dir, split);
  if (!ds.ok()) qFatal("%s", ds.status().ToString().c_str());
  std::vector<int32_t> ids((*ds)->size());
  (*ds)->Read(0, (*ds)->size(), ids.data());
  return ids;
}

}  // namespace

class TestPrepare : public QObject {
  Q_OBJECT
 private slots:
  void documentsDecodeBackExactlyWithBosBetween() {
    QTemporaryDir tmp;
    const std::string root = tmp.path().toStdString();
    QVERIFY(MakeDirs(root + "/text/sub").ok());
    std::vector<std::string> texts;
    for (int i = 0; i < 20; ++i) {
      char name[64];
      std::snprintf(name, sizeof(name), "%s/%s/doc%02d.txt", (root + "/text").c_str(),
                    i < 10 ? "" : "sub", i);
      texts.push_back(Text(i));
      QVERIFY(WriteFileAtomic(name, texts.back()).ok());
    }
    QVERIFY(WriteFileAtomic(root + "/text/.hidden", "not a document").ok());
    PrepareOptions o;
    o.inputs = {root + "/text"};
    o.out_dir = root + "/data";
    o.vocab_size = 320;
    o.val_fraction = 0.1;
    o.shard_tokens = 200;  // several shards
    auto r = PrepareData(o);
    QVERIFY2(r.ok(), r.status().ToString().c_str());
    QCOMPARE(r->documents, int64_t{20});
    QCOMPARE(r->val_documents, int64_t{2});  // documents 9 and 19 (sorted order)
    QVERIFY(r->trained_tokenizer);
    QVERIFY(r->train_shards > 1);
    auto tok = engine::Tokenizer::Load(o.out_dir + "/tokenizer.json");
    QVERIFY2(tok.ok(), tok.status().ToString().c_str());
    QCOMPARE(tok->vocab_size(), r->vocab_size);
    QCOMPARE(*tok->TokenToId("<|bos|>"), r->bos_id);
    // A prompt encoded with special tokens starts the way every training
    // document does (with BOS), and the folder's tokenizer_config.json names
    // BOS as bos and eos (a base model's text ends where a new document begins).
    QCOMPARE(tok->bos_id(), std::optional<engine::TokenId>(r->bos_id));
    QCOMPARE(tok->config().bos_token, std::string("<|bos|>"));
    QCOMPARE(tok->config().eos_token, std::string("<|bos|>"));
    const auto with_bos = tok->Encode("the quick brown fox", {.add_special_tokens = true});
    const auto plain = tok->Encode("the quick brown fox");
    QCOMPARE(with_bos.size(), plain.size() + 1);
    QCOMPARE(with_bos[0], r->bos_id);
    QCOMPARE(std::vector<engine::TokenId>(with_bos.begin() + 1, with_bos.end()), plain);

    // Sorted paths: <root>/text/doc00..09 then <root>/text/sub/doc10..19.
    auto train = SplitAtBos(ReadAll(o.out_dir, "train"), r->bos_id);
    auto val = SplitAtBos(ReadAll(o.out_dir, "val"), r->bos_id);
    QCOMPARE(train.size(), size_t{18});
    QCOMPARE(val.size(), size_t{2});
    size_t t = 0, v = 0;
    for (int i = 0; i < 20; ++i) {
      const bool is_val = i == 9 || i == 19;
      const auto& ids = is_val ? val[v++] : train[t++];
      auto text = tok->DecodeBytes(ids);
      QVERIFY(text.ok());
      QCOMPARE(*text, texts[i]);
    }
    // token_bytes.npy: each token's byte length, 0 for BOS.
    auto tb = ReadNpy(o.out_dir + "/token_bytes.npy");
    QVERIFY(tb.ok());
    const auto bytes = tb->AsInt64();
    QCOMPARE(int64_t(bytes.size()), int64_t{r->vocab_size});
    QCOMPARE(bytes[r->bos_id], int64_t{0});
    QCOMPARE(bytes['a'], int64_t{1});
    int64_t total = 0;
    for (const auto& d : train)
      for (int32_t id : d) total += bytes[id];
    int64_t expect = 0;
    for (int i = 0; i < 20; ++i)
      if (i != 9 && i != 19) expect += int64_t(texts[i].size());
    QCOMPARE(total, expect);

    // A second prepare into the same folder is refused.
    auto again = PrepareData(o);
    QVERIFY(!again.ok());
    QCOMPARE(again.status().code(), StatusCode::kAlreadyExists);

    // Reusing the trained tokenizer gives the same tokens.
    PrepareOptions o2 = o;
    o2.out_dir = root + "/data2";
    o2.tokenizer = o.out_dir;
    auto r2 = PrepareData(o2);
    QVERIFY2(r2.ok(), r2.status().ToString().c_str());
    QVERIFY(!r2->trained_tokenizer);
    QCOMPARE(ReadAll(o2.out_dir, "train"), ReadAll(o.out_dir, "train"));
  }

  void loneDocumentGivesItsTailToValidation() {
    QTemporaryDir tmp;
    const std::string root = tmp.path().toStdString();
    std::string text;
    for (int i = 0; i < 50; ++i) text += "line " + std::to_string(i) + " of the only book\n";
    QVERIFY(WriteFileAtomic(root + "/book.txt", text).ok());
    PrepareOptions o;
    o.inputs = {root + "/book.txt"};
    o.out_dir = root + "/data";
    o.vocab_size = 300;
    o.val_fraction = 0.1;
    auto r = PrepareData(o);
    QVERIFY2(r.ok(), r.status().ToString().c_str());
    QCOMPARE(r->documents, int64_t{2});
    QCOMPARE(r->val_documents, int64_t{1});
    auto tok = engine::Tokenizer::Load(o.out_dir + "/tokenizer.json");
    QVERIFY(tok.ok());
    auto train = SplitAtBos(ReadAll(o.out_dir, "train"), r->bos_id);
    auto val = SplitAtBos(ReadAll(o.out_dir, "val"), r->bos_id);
    auto a = tok->DecodeBytes(train[0]);
    auto b = tok->DecodeBytes(val[0]);
    QVERIFY(a.ok() && b.ok());
    QCOMPARE(*a + *b, text);
    QVERIFY(b->rfind("line ", 0) == 0);  // cut at a line boundary
  }

  void badInputsAreRefused() {
    QTemporaryDir tmp;
    const std::string root = tmp.path().toStdString();
    PrepareOptions o;
    o.inputs = {root + "/missing"};
    o.out_dir = root + "/data";
    auto r = PrepareData(o);
    QVERIFY(!r.ok());
    QVERIFY(r.status().message().find("missing") != std::string::npos);
    QVERIFY(WriteFileAtomic(root + "/a.txt", "hello world\n").ok());
    o.inputs = {root + "/a.txt"};
    o.vocab_size = 100;  // smaller than 256 bytes + BOS
    QVERIFY(!PrepareData(o).ok());
    // A given tokenizer without the BOS token.
    o.vocab_size = 300;
    o.tokenizer = test::FixturesDir() + "/tokenizers/qwen3/tokenizer.json";
    if (test::FixturesPresent()) {
      o.out_dir = root + "/data3";
      auto q = PrepareData(o);
      QVERIFY(!q.ok());
      QVERIFY2(q.status().message().find("<|bos|>") != std::string::npos,
               q.status().ToString().c_str());
      o.bos_token = "<|endoftext|>";  // Qwen's document separator works
      o.out_dir = root + "/data4";
      auto ok = PrepareData(o);
      QVERIFY2(ok.ok(), ok.status().ToString().c_str());
      QVERIFY(ok->vocab_size > 150000);
    }
  }
};

QTEST_APPLESS_MAIN(TestPrepare)
#include "test_prepare.moc"
