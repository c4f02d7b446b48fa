// The nanochat GPT's forward and backward against the PyTorch reference in
// ../shared/fixtures/trainer (README section B): logits, loss and every
// parameter's gradient. Plus a finite-difference check on shapes the fixture
// does not cover (grouped-query attention, soft-cap off, T < sequence_len).
#include <QtTest>
#include <cmath>

#include "octet/base/file_util.h"
#include "octet/base/npy.h"
#include "octet/trainer/gpt_model.h"
#include "octet/trainer/model_io.h"
#include "octet_test.h"
#include "trainer_test_util.h"

using namespace octet;
using namespace octet::trainer;
using namespace octet::trainer::testing;

class TestGptModel : public QObject {
  Q_OBJECT
 private slots:
  void matchesFixtureLogitsLossAndGradients_data() {
    QTest::addColumn<QString>("backend");
    QTest::addColumn<int>("threads");
    QTest::newRow("auto, 2 threads") << "auto" << 2;
    QTest::newRow("scalar, 1 thread") << "scalar" << 1;
  }
  void matchesFixtureLogitsLossAndGradients() {
    OCTET_REQUIRE_FIXTURES();
    QFETCH(QString, backend);
    QFETCH(int, threads);
    const std::string dir = test::FixturesDir() + "/trainer";
    auto be = TestBackend(backend.toStdString().c_str(), threads);
    auto model = LoadModelDir(dir, be.get());
    QVERIFY2(model.ok(), model.status().ToString().c_str());
    GptModel& m = **model;
    std::vector<int64_t> xs, ys;
    auto x = ReadIds(dir + "/x.npy", &xs);
    auto y = ReadIds(dir + "/y.npy", &ys);
    QCOMPARE(xs.size(), size_t{2});
    const int B = int(xs[0]), T = int(xs[1]);

    auto loss = m.Forward(x.data(), y.data(), B, T);
    QVERIFY2(loss.ok(), loss.status().ToString().c_str());
    auto expected = ReadFileToString(dir + "/expected.json");
    QVERIFY(expected.ok());
    const double ref_loss =
        QJsonDocument::fromJson(QByteArray::fromStdString(*expected)).object()["loss"].toDouble();
    qInfo("loss %.7f, reference %.7f, |diff| %.2e", *loss, ref_loss, std::abs(*loss - ref_loss));
    QVERIFY(std::abs(*loss - ref_loss) <= 1e-5);

    auto ref_logits = ReadNpy(dir + "/logits.npy");
    QVERIFY(ref_logits.ok());
    const auto rl = ref_logits->AsFloat();
    const auto lg = m.logits();
    QCOMPARE(lg.size(), rl.size());
    double max_diff = 0;
    for (size_t i = 0; i < rl.size(); ++i)
      max_diff = std::max(max_diff, double(std::abs(lg[i] - rl[i])));
    qInfo("logits max |diff| %.2e", max_diff);
    QVERIFY(max_diff <= 1e-5);

    m.ZeroGrads();
    QVERIFY(m.Backward(1.0f).ok());
    // Reference gradients, read through the same loader as weights.
    auto ref_model = LoadModelDir(dir, be.get());
    QVERIFY(ref_model.ok());
    QVERIFY2(LoadWeights(**ref_model, dir + "/grads.safetensors").ok(), "grads.safetensors");
    double worst = 0;
    std::string worst_name;
    for (const auto& t : m.tensors()) {
      const float* g = m.grad(t);
      const float* r = (*ref_model)->param(t);
      double gmax = 0, dmax = 0;
      for (int64_t i = 0; i < t.numel; ++i) {
        gmax = std::max(gmax, double(std::abs(r[i])));
        dmax = std::max(dmax, double(std::abs(g[i] - r[i])));
      }
      const double rel = gmax > 0 ? dmax / gmax : dmax;
      if (rel > worst) {
        worst = rel;
        worst_name = t.name;
      }
      QVERIFY2(rel <= 1e-4, (t.name + " relative gradient error " + std::to_string(rel)).c_str());
    }
    qInfo("worst gradient error %.2e (relative to the tensor's max), in %s", worst,
          worst_name.c_str());
  }

  // Rows of wte for tokens absent from x have exactly zero gradient.
  void unusedEmbeddingRowsHaveZeroGradient() {
    OCTET_REQUIRE_FIXTURES();
    const std::string dir = test::FixturesDir() + "/trainer";
    auto be = TestBackend("auto", 2);
    auto model = LoadModelDir(dir, be.get());
    QVERIFY(model.ok());
    std::vector<int64_t> s;
    auto x = ReadIds(dir + "/x.npy", &s);
    auto y = ReadIds(dir + "/y.npy", &s);
    GptModel& m = **model;
    QVERIFY(m.Forward(x.data(), y.data(), int(s[0]), int(s[1])).ok());
    m.ZeroGrads();
    QVERIFY(m.Backward(1.0f).ok());
    const ParamTensor* wte = m.Find("transformer.wte.weight");
    std::vector<bool> used(m.config().vocab_size, false);
    for (int32_t id : x) used[id] = true;
    int checked = 0;
    for (int v = 0; v < m.config().vocab_size; ++v) {
      if (used[v]) continue;
      for (int c = 0; c < m.config().n_embd; ++c)
        QCOMPARE(m.grad(*wte)[v * m.config().n_embd + c], 0.0f);
      ++checked;
    }
    QVERIFY(checked > 0);
  }

  // Central finite differences in float32 on a small random model with
  // grouped-query attention and T shorter than sequence_len: the analytic
  // gradient of a few coordinates of every tensor matches.
  void finiteDifferencesMatchWithGroupedQueryAttention_data() {
    QTest::addColumn<float>("softcap");
    QTest::newRow("softcap 15") << 15.0f;
    QTest::newRow("softcap off") << 0.0f;
  }
  void finiteDifferencesMatchWithGroupedQueryAttention() {
    QFETCH(float, softcap);
    GptConfig c;
    c.n_layer = 2;
    c.n_head = 4;
    c.n_kv_head = 2;
    c.n_embd = 32;
    c.vocab_size = 23;
    c.sequence_len = 9;
    c.softcap = softcap;
    auto be = TestBackend("scalar", 1);
    auto model = GptModel::Create(c, be.get());
    QVERIFY2(model.ok(), model.status().ToString().c_str());
    GptModel& m = **model;
    m.InitWeights(7);
    // Zero-initialised projections would hide their gradients' paths; give
    // every parameter a small random value.
    uint64_t s = 12345;
    auto rnd = [&] {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      return (double((s >> 11) & ((1ull << 53) - 1)) / double(1ull << 53)) - 0.5;
    };
    for (auto& p : m.params()) p = float(rnd() * 0.6);
    const int B = 2, T = 7;
    std::vector<int32_t> x(B * T), y(B * T);
    for (int i = 0; i < B * T; ++i) {
      x[i] = int32_t((i * 7 + 3) % c.vocab_size);
      y[i] = int32_t((i * 5 + 1) % c.vocab_size);
    }
    QVERIFY(m.Forward(x.data(), y.data(), B, T).ok());
    m.ZeroGrads();
    QVERIFY(m.Backward(1.0f).ok());
    std::vector<float> analytic(m.grads().begin(), m.grads().end());
    int checked = 0;
    for (const auto& t : m.tensors()) {
      for (int k = 0; k < 4; ++k) {
        const int64_t i = t.offset + (int64_t(k) * 9973 + 17) % t.numel;
        const float orig = m.params()[i];
        const float h = 1e-2f;
        m.params()[i] = orig + h;
        const double lp = *m.Forward(x.data(), y.data(), B, T);
        m.params()[i] = orig - h;
        const double lm = *m.Forward(x.data(), y.data(), B, T);
        m.params()[i] = orig;
        const double numeric = (lp - lm) / (2 * h);
        const double err = std::abs(numeric - analytic[i]);
        QVERIFY2(err <= 2e-3 + 2e-2 * std::abs(numeric),
                 (t.name + "[" + std::to_string(i - t.offset) + "] analytic " +
                  std::to_string(analytic[i]) + " numeric " + std::to_string(numeric))
                     .c_str());
        ++checked;
      }
    }
    QVERIFY(checked == int(m.tensors().size()) * 4);
  }

  void rejectsOutOfRangeTokensWithTheirPosition() {
    GptConfig c{
        .n_layer = 1, .n_head = 1, .n_kv_head = 1, .n_embd = 8, .vocab_size = 5, .sequence_len = 4};
    auto be = TestBackend("auto", 2);
    auto m = GptModel::Create(c, be.get());
    QVERIFY(m.ok());
    std::vector<int32_t> x = {0, 1, 2, 9}, y = {1, 2, 3, 4};
    auto r = (*m)->Forward(x.data(), y.data(), 1, 4);
    QVERIFY(!r.ok());
    QVERIFY2(r.status().message().find("[0, 3]") != std::string::npos,
             r.status().ToString().c_str());
    std::vector<int32_t> x2 = {0, 1, 2, 3, 4};
    QVERIFY(!(*m)->Forward(x2.data(), nullptr, 1, 5).ok());  // T > sequence_len
  }

  void configRoundTripsAndPresetsFollowTheDepthRule() {
    auto d20 = GptConfig::Preset("d20", 65536, 2048);
    QVERIFY(d20.ok());
    QCOMPARE(d20->n_embd, 1280);
    QCOMPARE(d20->n_head, 10);
    QCOMPARE(d20->head_dim(), 128);
    // ~561M parameters with a 65,536 vocabulary (FIELD-NOTES "Training").
    QVERIFY(std::abs(double(d20->NumParams()) - 561e6) < 1e6);
    auto d12 = GptConfig::Preset("d12", 65536, 2048);
    QVERIFY(d12.ok());
    QCOMPARE(d12->n_embd, 768);
    QCOMPARE(d12->n_head, 6);
    auto back = GptConfig::FromJson(d12->ToJson(), "d12");
    QVERIFY(back.ok());
    QCOMPARE(back->n_embd, 768);
    QCOMPARE(back->n_layer, 12);
    QCOMPARE(back->sequence_len, 2048);
    QVERIFY(!GptConfig::Preset("huge", 100, 10).ok());
    QVERIFY(!GptConfig::FromJson(R"({"model_type":"llama"})", "x").ok());
    auto bad = GptConfig::FromJson(
        R"({"n_layer":2,"n_head":3,"n_embd":64,"vocab_size":9,"sequence_len":4})", "cfg.json");
    QVERIFY(!bad.ok());
    QVERIFY2(bad.status().message().find("cfg.json") != std::string::npos,
             bad.status().ToString().c_str());
  }
};

QTEST_APPLESS_MAIN(TestGptModel)
#include "test_gpt_model.moc"
