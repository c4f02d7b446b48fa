// The engine's nanochat architecture (what `octet train` writes) against the
// independent PyTorch reference in ../shared/fixtures/trainer: the fixture's
// config.json and model.safetensors loaded as a model folder must give
// logits.npy (after the soft-cap) for the fixture batch, as one pass, as
// prefill + decode through the KV cache, and with both sequences in one batch.
#include <QtTest>
#include <cmath>

#include "octet/base/file_util.h"
#include "octet/base/npy.h"
#include "octet/engine/model.h"
#include "octet/engine/model_config.h"
#include "octet_test.h"

using namespace octet;
using namespace octet::engine;

namespace {

// The fixture's suggested logits tolerance for an f32 implementation (its
// README); measured: ~2e-7 with the AVX2 and the scalar kernels.
constexpr double kLogitsTolerance = 1e-5;

struct Batch {
  std::vector<int32_t> x;     // [B, T]
  std::vector<float> logits;  // [B, T, V]
  int64_t B = 0, T = 0, V = 0;
};

Batch LoadBatch(const std::string& dir) {
  Batch b;
  auto x = ReadNpy(dir + "/x.npy");
  auto l = ReadNpy(dir + "/logits.npy");
  if (!x.ok() || !l.ok()) qFatal("cannot read the trainer fixture batch");
  for (int64_t v : x->AsInt64()) b.x.push_back(static_cast<int32_t>(v));
  b.logits = l->AsFloat();
  b.B = x->shape[0];
  b.T = x->shape[1];
  b.V = l->shape[2];
  return b;
}

double MaxDiff(const float* got, const float* want, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(double(got[i]) - double(want[i])));
  return m;
}

std::unique_ptr<Model> Load(const std::string& dir, const std::string& backend) {
  LoadOptions o;
  o.backend = backend;
  o.threads = 2;
  auto m = Model::Load(dir, o);
  if (!m.ok()) qFatal("%s", m.status().ToString().c_str());
  return std::move(*m);
}

}  // namespace

class TestEngineNanochat : public QObject {
  Q_OBJECT
 private slots:
  void configIsNanochats() {
    auto c = ParseModelConfig(
        R"({"model_type":"nanochat","n_layer":3,"n_head":4,"n_kv_head":2,"n_embd":64,)"
        R"("vocab_size":100,"sequence_len":32,"softcap":12.5,"norm_eps":1e-5,"bos_token_id":99})",
        "config.json");
    QVERIFY2(c.ok(), c.status().ToString().c_str());
    QVERIFY(c->arch == Architecture::kNanochat);
    QCOMPARE(c->num_layers, int64_t{3});
    QCOMPARE(c->num_heads, int64_t{4});
    QCOMPARE(c->num_kv_heads, int64_t{2});
    QCOMPARE(c->head_dim, int64_t{16});
    QCOMPARE(c->intermediate_size, int64_t{256});
    QCOMPARE(c->max_position_embeddings, int64_t{32});
    QCOMPARE(c->logit_softcap, 12.5f);
    QCOMPARE(c->rms_norm_eps, 1e-5f);
    QCOMPARE(c->bos_token_id, 99);
    QVERIFY(c->qk_norm && c->qk_norm_after_rope && c->parameter_free_norms && c->embedding_norm &&
            c->relu2_mlp && !c->tie_word_embeddings);
    // The other architectures keep none of nanochat's variations.
    auto llama =
        ParseModelConfig(R"({"architectures":["Qwen3ForCausalLM"],"vocab_size":10,"hidden_size":8,)"
                         R"("intermediate_size":16,"num_hidden_layers":1,"num_attention_heads":2})",
                         "config.json");
    QVERIFY(llama.ok());
    QVERIFY(!llama->parameter_free_norms && !llama->embedding_norm && !llama->relu2_mlp &&
            !llama->qk_norm_after_rope && llama->logit_softcap == 0.0f);
    // Errors name the key.
    auto bad = ParseModelConfig(R"({"model_type":"nanochat","n_layer":1,"n_head":3,)"
                                R"("n_kv_head":2,"n_embd":48,"vocab_size":10})",
                                "cfg.json");
    QVERIFY(!bad.ok());
    QVERIFY2(bad.status().message().find("n_kv_head") != std::string::npos,
             bad.status().ToString().c_str());
    bad = ParseModelConfig(R"({"model_type":"nanochat","n_head":2,"n_embd":8,"vocab_size":10})",
                           "cfg.json");
    QVERIFY(!bad.ok());
    QVERIFY(bad.status().message().find("n_layer") != std::string::npos);
  }

  void missingTensorIsNamedAsStored() {
    OCTET_REQUIRE_FIXTURES();
    QTemporaryDir tmp;
    const std::string dir = tmp.path().toStdString();
    const std::string fx = test::FixturesDir() + "/trainer";
    auto cfg = ReadFileToString(fx + "/config.json");
    QVERIFY(cfg.ok());
    // A config with one layer more than the weights hold.
    std::string text = *cfg;
    const size_t at = text.find("\"n_layer\": 2");
    QVERIFY(at != std::string::npos);
    text.replace(at, 12, "\"n_layer\": 3");
    QVERIFY(WriteFileAtomic(dir + "/config.json", text).ok());
    auto weights = ReadFileToString(fx + "/model.safetensors");
    QVERIFY(weights.ok());
    QVERIFY(WriteFileAtomic(dir + "/model.safetensors", *weights).ok());
    auto m = Model::Load(dir, LoadOptions{});
    QVERIFY(!m.ok());
    QVERIFY2(m.status().message().find("transformer.h.2.attn.c_q.weight") != std::string::npos,
             m.status().ToString().c_str());
  }

  void fixtureLogits_data() {
    QTest::addColumn<QString>("backend");
    QTest::newRow("auto") << "auto";
    QTest::newRow("scalar") << "scalar";
  }

  // One full-sequence pass per row of the batch.
  void fixtureLogits() {
    OCTET_REQUIRE_FIXTURES();
    QFETCH(QString, backend);
    const std::string dir = test::FixturesDir() + "/trainer";
    const Batch b = LoadBatch(dir);
    auto m = Load(dir, backend.toStdString());
    QCOMPARE(m->config().vocab_size, b.V);
    KvCache cache = *m->NewKvCache(1, b.T);
    for (int64_t r = 0; r < b.B; ++r) {
      cache.set_length(0, 0);
      SequenceChunk ch;
      ch.tokens.assign(b.x.begin() + r * b.T, b.x.begin() + (r + 1) * b.T);
      ch.all_logits = true;
      ForwardOutput out;
      const Status s = m->Forward({ch}, cache, &out);
      QVERIFY2(s.ok(), s.ToString().c_str());
      QCOMPARE(static_cast<int64_t>(out.logits.size()), b.T * b.V);
      const double d = MaxDiff(out.logits.data(), b.logits.data() + r * b.T * b.V, b.T * b.V);
      qInfo("row %lld: max |logits - logits.npy| = %.3g", static_cast<long long>(r), d);
      QVERIFY2(d <= kLogitsTolerance,
               ("row " + std::to_string(r) + ": max |diff| " + std::to_string(d)).c_str());
    }
  }

  // Prefill of a few tokens, then one token at a time through the KV cache,
  // with the batch's two sequences side by side in one step each.
  void fixtureLogitsDecodedTogether() {
    OCTET_REQUIRE_FIXTURES();
    const std::string dir = test::FixturesDir() + "/trainer";
    const Batch b = LoadBatch(dir);
    auto m = Load(dir, "auto");
    KvCache cache = *m->NewKvCache(static_cast<int>(b.B), b.T);
    const int64_t prefill = 5;
    double worst = 0;
    for (int64_t pos = 0; pos < b.T;) {
      const int64_t n = pos == 0 ? prefill : 1;
      std::vector<SequenceChunk> batch;
      for (int64_t r = 0; r < b.B; ++r) {
        SequenceChunk ch;
        ch.slot = static_cast<int>(r);
        ch.start_pos = pos;
        ch.tokens.assign(b.x.begin() + r * b.T + pos, b.x.begin() + r * b.T + pos + n);
        ch.all_logits = true;
        batch.push_back(std::move(ch));
      }
      ForwardOutput out;
      const Status s = m->Forward(batch, cache, &out);
      QVERIFY2(s.ok(), s.ToString().c_str());
      for (int64_t r = 0; r < b.B; ++r) {
        worst = std::max(worst, MaxDiff(out.Row(out.row_begin[r]),
                                        b.logits.data() + (r * b.T + pos) * b.V, n * b.V));
      }
      pos += n;
    }
    qInfo("prefill %lld + decode, 2 sequences per step: max |diff| = %.3g",
          static_cast<long long>(prefill), worst);
    QVERIFY2(worst <= kLogitsTolerance, std::to_string(worst).c_str());
  }
};

QTEST_APPLESS_MAIN(TestEngineNanochat)
#include "test_engine_nanochat.moc"
