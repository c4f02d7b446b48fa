// What `octet train` writes, the engine serves: the PyTorch fixture model
// (../shared/fixtures/trainer) loaded by the trainer and written back out by
// ExportModel (the model folder a training run ends with) must, loaded by
// octet::engine, give the fixture's reference logits.npy for the fixture batch.
// This checks the trainer's writer (tensor names, layout, config.json keys
// including bos/eos) together with the engine's reader against the independent
// reference; test_engine_nanochat checks the engine on the fixture folder
// itself and test_gpt_model the trainer's forward.
#include <QtTest>
#include <cmath>

#include "octet/base/file_util.h"
#include "octet/base/npy.h"
#include "octet/engine/model.h"
#include "octet/kernels/backend.h"
#include "octet/trainer/checkpoint.h"
#include "octet/trainer/gpt_config.h"
#include "octet/trainer/model_io.h"
#include "octet_test.h"

using namespace octet;

namespace {

// The logits tolerance; f32 implementations reach ~1e-6 here.
constexpr double kLogitsTolerance = 1e-4;

}  // namespace

class TestEngineParity : public QObject {
  Q_OBJECT
 private slots:
  void exportedFixtureModelGivesReferenceLogitsInTheEngine() {
    OCTET_REQUIRE_FIXTURES();
    const std::string fixture = test::FixturesDir() + "/trainer";
    auto backend = kernels::CreateBackend("auto", {.threads = 2});
    QVERIFY(backend.ok());
    auto model = trainer::LoadModelDir(fixture, backend->get());
    QVERIFY2(model.ok(), model.status().ToString().c_str());

    QTemporaryDir tmp;
    const std::string dir = tmp.path().toStdString() + "/model";
    const Status exported = trainer::ExportModel(dir, **model, "");
    QVERIFY2(exported.ok(), exported.ToString().c_str());
    auto config_text = ReadFileToString(dir + "/config.json");
    QVERIFY(config_text.ok());
    auto config = trainer::GptConfig::FromJson(*config_text, "config.json");
    QVERIFY2(config.ok(), config.status().ToString().c_str());
    QCOMPARE(config->n_layer, (*model)->config().n_layer);
    QCOMPARE(config->softcap, (*model)->config().softcap);

    auto x_npy = ReadNpy(fixture + "/x.npy");
    auto ref = ReadNpy(fixture + "/logits.npy");
    QVERIFY(x_npy.ok() && ref.ok());
    const int64_t B = x_npy->shape[0], T = x_npy->shape[1];
    std::vector<int32_t> x;
    for (int64_t v : x_npy->AsInt64()) x.push_back(static_cast<int32_t>(v));
    const std::vector<float> want = ref->AsFloat();

    engine::LoadOptions lo;
    lo.threads = 2;
    auto em = engine::Model::Load(dir, lo);
    QVERIFY2(em.ok(), em.status().ToString().c_str());
    engine::KvCache cache = *(*em)->NewKvCache(B, T);
    std::vector<engine::SequenceChunk> batch(B);
    for (int64_t b = 0; b < B; ++b) {
      batch[b].slot = static_cast<int>(b);
      batch[b].tokens.assign(x.begin() + b * T, x.begin() + (b + 1) * T);
      batch[b].all_logits = true;
    }
    engine::ForwardOutput out;
    const Status s = (*em)->Forward(batch, cache, &out);
    QVERIFY2(s.ok(), s.ToString().c_str());
    QCOMPARE(out.logits.size(), want.size());
    double worst = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      worst = std::max(worst, std::fabs(double(out.logits[i]) - double(want[i])));
    }
    qInfo("max |engine(exported) - PyTorch| logits = %.3g", worst);
    QVERIFY2(worst <= kLogitsTolerance, std::to_string(worst).c_str());
  }

  void bosTokenGoesToConfigJsonAsBosAndEos() {
    trainer::GptConfig c;
    c.n_layer = 1;
    c.n_head = 1;
    c.n_kv_head = 1;
    c.n_embd = 16;
    c.vocab_size = 32;
    c.sequence_len = 8;
    c.bos_token_id = 5;
    const std::string text = c.ToJson();
    const QJsonObject j = QJsonDocument::fromJson(QByteArray::fromStdString(text)).object();
    QCOMPARE(j["bos_token_id"].toInt(), 5);
    QCOMPARE(j["eos_token_id"].toInt(), 5);
    auto back = trainer::GptConfig::FromJson(text, "config.json");
    QVERIFY2(back.ok(), back.status().ToString().c_str());
    QCOMPARE(back->bos_token_id, 5);
    c.bos_token_id = -1;  // unknown: no keys at all
    const QJsonObject none =
        QJsonDocument::fromJson(QByteArray::fromStdString(c.ToJson())).object();
    QVERIFY(!none.contains("bos_token_id"));
    QVERIFY(!none.contains("eos_token_id"));
  }
};

QTEST_APPLESS_MAIN(TestEngineParity)
#include "test_engine_parity.moc"
