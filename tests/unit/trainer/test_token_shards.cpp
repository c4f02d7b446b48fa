// Token shards and the data loader: documents start with BOS, a shard round
// trips, damaged shards are rejected with the byte offset, the stream crosses
// shard ends, ranks read disjoint slices that together equal one rank's
// batch, and a saved position resumes the same sequence.
#include <QtTest>

#include "octet/base/file_util.h"
#include "octet/trainer/token_shards.h"
#include "octet_test.h"

using namespace octet;
using namespace octet::trainer;

namespace {

// A data folder with two train shards (documents of ids counting up) and one
// val shard; vocab 1000, BOS 999.
std::string MakeData(const QTemporaryDir& tmp, DataMeta* meta_out = nullptr) {
  const std::string dir = tmp.path().toStdString();
  DataMeta meta;
  meta.vocab_size = 1000;
  meta.bos_id = 999;
  int32_t next = 0;
  for (int s = 0; s < 2; ++s) {
    TokenShardWriter w(1000, 999);
    for (int d = 0; d < 5; ++d) {
      std::vector<int32_t> doc;
      for (int i = 0; i < 20 + d; ++i) doc.push_back(next++ % 999);
      if (!w.AddDocument(doc).ok()) qFatal("AddDocument");
    }
    const std::string name = "train-0000" + std::to_string(s) + ".bin";
    if (!w.Write(JoinPath(dir, name)).ok()) qFatal("Write");
    meta.train_files.push_back(name);
    meta.train_tokens += w.token_count();
  }
  TokenShardWriter v(1000, 999);
  std::vector<int32_t> doc(50, 7);
  if (!v.AddDocument(doc).ok() || !v.Write(JoinPath(dir, "val-00000.bin")).ok()) qFatal("val");
  meta.val_files.push_back("val-00000.bin");
  meta.val_tokens = v.token_count();
  if (!meta.Save(dir).ok()) qFatal("meta");
  if (meta_out) *meta_out = meta;
  return dir;
}

}  // namespace

class TestTokenShards : public QObject {
  Q_OBJECT
 private slots:
  void shardRoundTripsWithBosBeforeEachDocument() {
    QTemporaryDir tmp;
    const std::string path = tmp.path().toStdString() + "/s.bin";
    TokenShardWriter w(70000, 5);  // > 65536: 4-byte tokens
    QVERIFY(w.AddDocument(std::vector<int32_t>{1, 69999}).ok());
    QVERIFY(w.AddDocument(std::vector<int32_t>{}).ok());
    QVERIFY(w.AddDocument(std::vector<int32_t>{3}).ok());
    QVERIFY(!w.AddDocument(std::vector<int32_t>{70000}).ok());
    QVERIFY(w.Write(path).ok());
    auto s = TokenShard::Open(path);
    QVERIFY2(s.ok(), s.status().ToString().c_str());
    QCOMPARE(s->size(), int64_t{6});
    QCOMPARE(s->document_count(), int64_t{3});
    std::vector<int32_t> got(6);
    s->Read(0, 6, got.data());
    QCOMPARE(got, (std::vector<int32_t>{5, 1, 69999, 5, 5, 3}));
  }

  void damagedShardsAreRejectedWithTheOffset() {
    QTemporaryDir tmp;
    const std::string dir = MakeData(tmp);
    const std::string path = JoinPath(dir, "train-00000.bin");
    auto data = ReadFileToString(path);
    QVERIFY(data.ok());
    auto expect_error = [&](const std::string& content, const char* needle) {
      QVERIFY(WriteFileAtomic(path, content).ok());
      auto s = TokenShard::Open(path);
      QVERIFY(!s.ok());
      QVERIFY2(s.status().message().find(needle) != std::string::npos,
               s.status().ToString().c_str());
      QVERIFY(s.status().message().find(path) != std::string::npos);
    };
    expect_error(data->substr(0, 30), "shorter than the 64-byte");
    expect_error("X" + data->substr(1), "bad magic");
    expect_error(data->substr(0, data->size() - 2), "but the file has");
    expect_error(*data + "zz", "but the file has");
    std::string bad_token = *data;
    bad_token[64 + 2 * 3] = char(0xff);
    bad_token[64 + 2 * 3 + 1] = char(0xff);  // 65535 >= vocab 1000
    expect_error(bad_token, "at byte 70");
    std::string bad_version = *data;
    bad_version[8] = 9;
    expect_error(bad_version, "version 9");
    std::string reserved = *data;
    reserved[50] = 1;
    expect_error(reserved, "reserved header byte 50");
  }

  void streamCrossesShardEnds() {
    QTemporaryDir tmp;
    const std::string dir = MakeData(tmp);
    auto ds = TokenDataset::Open(dir, "train");
    QVERIFY2(ds.ok(), ds.status().ToString().c_str());
    auto s0 = TokenShard::Open(JoinPath(dir, "train-00000.bin"));
    QVERIFY(s0.ok());
    std::vector<int32_t> got(10);
    (*ds)->Read(s0->size() - 3, 10, got.data());
    // ..., last 3 of shard 0, then BOS of shard 1's first document, then its ids.
    QCOMPARE(got[3], 999);
    QCOMPARE(got[2] + 1, got[4]);  // ids keep counting across the shard boundary
    auto val = TokenDataset::Open(dir, "val");
    QVERIFY(val.ok());
    QCOMPARE((*val)->size(), int64_t{51});
  }

  void ranksReadDisjointSlicesOfTheSingleRankBatch_data() {
    QTest::addColumn<int>("world");
    QTest::newRow("2 ranks") << 2;
    QTest::newRow("4 ranks") << 4;
  }
  void ranksReadDisjointSlicesOfTheSingleRankBatch() {
    QFETCH(int, world);
    QTemporaryDir tmp;
    const std::string dir = MakeData(tmp);
    auto ds = TokenDataset::Open(dir, "train");
    QVERIFY(ds.ok());
    const int B = 2, T = 5;
    auto single = DataLoader::Create(ds->get(), B * world, T, 0, 1);
    QVERIFY(single.ok());
    std::vector<std::unique_ptr<DataLoader>> ranks;
    for (int r = 0; r < world; ++r) {
      auto l = DataLoader::Create(ds->get(), B, T, r, world);
      QVERIFY(l.ok());
      ranks.push_back(std::move(*l));
    }
    for (int step = 0; step < 12; ++step) {  // runs past the end: wraps the same way
      std::vector<int32_t> x(B * world * T), y(B * world * T);
      (*single)->Next(x.data(), y.data());
      for (int r = 0; r < world; ++r) {
        std::vector<int32_t> xr(B * T), yr(B * T);
        ranks[r]->Next(xr.data(), yr.data());
        for (int i = 0; i < B * T; ++i) {
          QCOMPARE(xr[i], x[r * B * T + i]);
          QCOMPARE(yr[i], y[r * B * T + i]);
        }
      }
      for (int i = 0; i + 1 < B * world * T; ++i) QCOMPARE(y[i], x[i + 1]);
      QCOMPARE(ranks[0]->position().offset, (*single)->position().offset);
    }
    QVERIFY((*single)->position().epoch >= 1);
  }

  void savedPositionResumesTheSameBatches() {
    QTemporaryDir tmp;
    const std::string dir = MakeData(tmp);
    auto ds = TokenDataset::Open(dir, "train");
    QVERIFY(ds.ok());
    auto a = DataLoader::Create(ds->get(), 3, 4, 0, 1);
    QVERIFY(a.ok());
    std::vector<int32_t> x(12), y(12), x2(12), y2(12);
    for (int i = 0; i < 7; ++i) (*a)->Next(x.data(), y.data());
    const LoaderPosition saved = (*a)->position();
    (*a)->Next(x.data(), y.data());
    auto b = DataLoader::Create(ds->get(), 3, 4, 0, 1);
    QVERIFY(b.ok());
    (*b)->set_position(saved);
    (*b)->Next(x2.data(), y2.data());
    QCOMPARE(x2, x);
    QCOMPARE(y2, y);
    QVERIFY(!DataLoader::Create(ds->get(), 100, 100, 0, 1).ok());  // data too short
  }

  void shardSetWriterSplitsAndRollsShards() {
    QTemporaryDir tmp;
    const std::string dir = tmp.path().toStdString();
    ShardSetWriter w(dir, 100, 0, 25);
    const auto val = ValidationDocuments(10, 0.2);
    QCOMPARE(std::count(val.begin(), val.end(), true), 2L);  // documents 4 and 9
    QVERIFY(val[4] && val[9]);
    for (int d = 0; d < 10; ++d) {
      std::vector<int32_t> doc(9, d + 1);
      QVERIFY(w.AddDocument(val[d], doc).ok());
    }
    auto meta = w.Finish();
    QVERIFY2(meta.ok(), meta.status().ToString().c_str());
    QCOMPARE(meta->train_tokens, int64_t{8 * 10});  // BOS + 9 per document
    QCOMPARE(meta->val_tokens, int64_t{2 * 10});
    QCOMPARE(meta->train_files.size(), size_t{4});  // two 10-token documents per 25-token shard
    auto ds = TokenDataset::Open(dir, "train");
    QVERIFY(ds.ok());
    std::vector<int32_t> first(20);
    (*ds)->Read(0, 20, first.data());
    QCOMPARE(first[0], 0);  // BOS
    QCOMPARE(first[1], 1);
    QCOMPARE(first[10], 0);
    QCOMPARE(first[11], 2);
    QVERIFY(TokenDataset::Open(dir, "val").ok());
    const auto one = ValidationDocuments(1, 0.5);
    QCOMPARE(std::count(one.begin(), one.end(), true), 0L);
    const auto three = ValidationDocuments(3, 0.01);
    QCOMPARE(std::count(three.begin(), three.end(), true), 1L);
    QVERIFY(three[2]);
  }

  void metaErrorsNameTheFile() {
    QTemporaryDir tmp;
    const std::string dir = tmp.path().toStdString();
    // A folder of text, not token shards: says so, and how to make them.
    auto text = TokenDataset::Open(dir, "train");
    QCOMPARE(text.status().code(), StatusCode::kNotFound);
    QVERIFY2(text.status().message().find("is not a prepared data folder (no meta.json)") !=
                     std::string::npos &&
                 text.status().message().find("octet train prepare") != std::string::npos,
             text.status().ToString().c_str());
    auto none = TokenDataset::Open(dir + "/missing", "train");
    QVERIFY2(none.status().message().find("data folder '" + dir + "/missing' does not exist") !=
                 std::string::npos,
             none.status().ToString().c_str());
    QVERIFY(WriteFileAtomic(dir + "/meta.json", R"({"format":"other"})").ok());
    auto ds = TokenDataset::Open(dir, "train");
    QVERIFY(!ds.ok());
    QVERIFY(ds.status().message().find("meta.json") != std::string::npos);
    QVERIFY(WriteFileAtomic(
                dir + "/meta.json",
                R"({"format":"octet-token-shards","version":1,"vocab_size":5,"train":["../x"]})")
                .ok());
    QVERIFY(!TokenDataset::Open(dir, "train").ok());
    // Counts and ids that are not integers are refused by name (nlohmann
    // would cast a float: 1e70 to an integer is undefined behaviour).
    for (const auto& [field, fragment] :
         {std::pair{"vocab_size", R"("vocab_size":1e70)"},
          {"vocab_size", R"("vocab_size":4294967296)"},
          {"bos_id", R"("vocab_size":5,"bos_id":2.5)"},
          {"bos_id", R"("vocab_size":5,"bos_id":5)"},
          {"train_tokens", R"("vocab_size":5,"train_tokens":1e70)"}}) {
      QVERIFY(WriteFileAtomic(dir + "/meta.json",
                              std::string(R"({"format":"octet-token-shards","version":1,)") +
                                  fragment + R"(,"train":[]})")
                  .ok());
      auto odd = DataMeta::Load(dir);
      QVERIFY2(!odd.ok(), fragment);
      QVERIFY2(odd.status().message().find(std::string("meta.json: ") + field) != std::string::npos,
               odd.status().ToString().c_str());
    }
  }
};

QTEST_APPLESS_MAIN(TestTokenShards)
#include "test_token_shards.moc"
