// safetensors reading/writing, config parsing, NVFP4 quantization and the
// loader's error messages (what and where: file, tensor, shape, byte offset).
#include <QTemporaryDir>
#include <QtTest>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "octet/base/file_util.h"
#include "octet/base/json.h"
#include "octet/engine/model.h"
#include "octet/engine/nvfp4.h"
#include "octet/engine/safetensors.h"
#include "octet_test.h"
#include "random_checkpoint.h"

using namespace octet;
using namespace octet::engine;

namespace {

std::string Header(const std::string& json) {
  std::string h = json;
  while (h.size() % 8) h.push_back(' ');
  uint64_t n = h.size();
  std::string out(8, '\0');
  std::memcpy(out.data(), &n, 8);
  return out + h;
}

// Writes a raw safetensors file (header JSON + `data_bytes` zero bytes) and opens it.
Status OpenRaw(const std::string& dir, const std::string& json, size_t data_bytes) {
  const std::string path = dir + "/raw.safetensors";
  Status w = WriteFileAtomic(path, Header(json) + std::string(data_bytes, '\0'));
  if (!w.ok()) return w;
  return SafetensorsFile::Open(path).status();
}

void CopyDir(const std::string& from, const std::string& to) {
  std::filesystem::copy(
      from, to,
      std::filesystem::copy_options::recursive | std::filesystem::copy_options::overwrite_existing);
  for (auto& e : std::filesystem::directory_iterator(to)) {
    std::filesystem::permissions(e.path(), std::filesystem::perms::owner_write,
                                 std::filesystem::perm_options::add);
  }
}

bool Has(const Status& s, const std::string& text) {
  return s.message().find(text) != std::string::npos;
}

}  // namespace

class TestEngineFormats : public QObject {
  Q_OBJECT
 private slots:
  void writerRoundTrip() {
    QTemporaryDir tmp;
    SafetensorsWriter w;
    w.SetMetadata("format", "pt");
    std::vector<float> f = {1.0f, -2.5f, 3.25f, 1e-3f, 7.0f, 0.0f};
    QVERIFY(w.AddFloat("a.bf16", {2, 3}, f.data(), DType::kBF16).ok());
    QVERIFY(w.AddFloat("b.f32", {6}, f.data(), DType::kF32).ok());
    QVERIFY(w.AddFloat("c.f16", {3, 2}, f.data(), DType::kF16).ok());
    QVERIFY(w.AddOwned("d.u8", DType::kU8, {3}, {1, 2, 3}).ok());
    float s = 0.5f;
    QVERIFY(w.Add("e.scalar", DType::kF32, {}, &s, 4).ok());
    QVERIFY(!w.Add("e.scalar", DType::kF32, {}, &s, 4).ok());  // duplicate
    QVERIFY(!w.Add("bad", DType::kF32, {2}, &s, 4).ok());      // size mismatch
    const std::string path = tmp.path().toStdString() + "/x.safetensors";
    Status ws = w.Write(path);
    QVERIFY2(ws.ok(), ws.ToString().c_str());
    auto r = SafetensorsFile::Open(path);
    QVERIFY2(r.ok(), r.status().ToString().c_str());
    QCOMPARE(r->tensors().size(), size_t(5));
    QCOMPARE(r->metadata().at("format"), std::string("pt"));
    const TensorInfo* a = r->Find("a.bf16");
    QVERIFY(a && a->dtype == DType::kBF16 && a->shape == std::vector<int64_t>({2, 3}));
    uint16_t h;
    std::memcpy(&h, a->data + 2, 2);
    QCOMPARE(kernels::Bf16ToF32(h), -2.5f);
    const TensorInfo* b = r->Find("b.f32");
    QCOMPARE(reinterpret_cast<uintptr_t>(b->data) % 4, uintptr_t(0));  // widest first: aligned
    QCOMPARE(r->Find("e.scalar")->shape.size(), size_t(0));
    QCOMPARE(r->Find("d.u8")->data[2], uint8_t(3));
  }

  void readerRejectsBadFiles() {
    QTemporaryDir tmp;
    const std::string d = tmp.path().toStdString();
    Status s;
    QVERIFY(WriteFileAtomic(d + "/short.safetensors", "abc").ok());
    s = SafetensorsFile::Open(d + "/short.safetensors").status();
    QVERIFY2(Has(s, "truncated") && Has(s, "byte offset 0"), s.message().c_str());
    // Header length running past the end.
    std::string big(8, '\0');
    uint64_t n = 1000;
    std::memcpy(big.data(), &n, 8);
    QVERIFY(WriteFileAtomic(d + "/big.safetensors", big + "{}").ok());
    s = SafetensorsFile::Open(d + "/big.safetensors").status();
    QVERIFY2(Has(s, "truncated") && Has(s, "runs past the end"), s.message().c_str());
    // Header over the cap.
    n = 200'000'000;
    std::memcpy(big.data(), &n, 8);
    QVERIFY(WriteFileAtomic(d + "/cap.safetensors", big).ok());
    s = SafetensorsFile::Open(d + "/cap.safetensors").status();
    QVERIFY2(Has(s, "cap"), s.message().c_str());
    // Bad JSON names a byte offset.
    s = OpenRaw(d, "{\"a\": {\"dtype\": \"F32\",, }", 0);
    QVERIFY2(Has(s, "bad safetensors header JSON at byte offset"), s.message().c_str());
    // Size not numel x dtype size.
    s = OpenRaw(d, R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8);
    QVERIFY2(Has(s, "'a'") && Has(s, "needs 12"), s.message().c_str());
    // Data past the end of the file (a truncated file).
    s = OpenRaw(d, R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 10);
    QVERIFY2(Has(s, "truncated") && Has(s, "'a'"), s.message().c_str());
    // Overlap; a hole and trailing bytes are data no header entry covers.
    s = OpenRaw(
        d,
        R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})",
        6);
    QVERIFY2(Has(s, "overlaps"), s.message().c_str());
    s = OpenRaw(
        d,
        R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[4,6]}})",
        6);
    QVERIFY2(s.ok(), s.ToString().c_str());
    {
      auto f = SafetensorsFile::Open(d + "/raw.safetensors");
      QVERIFY(f.ok());
      QCOMPARE(f->unindexed().size(), size_t{1});
      QCOMPARE(f->unindexed()[0].second - f->unindexed()[0].first, int64_t{2});
    }
    s = OpenRaw(d, R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})", 5);
    QVERIFY2(s.ok(), s.ToString().c_str());
    s = OpenRaw(d, R"({"a":{"dtype":"Q4","shape":[2],"data_offsets":[0,2]}})", 2);
    QVERIFY2(Has(s, "unknown dtype 'Q4'"), s.message().c_str());
    s = OpenRaw(d, R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})", 2);
    QVERIFY2(s.ok(), s.ToString().c_str());
  }

  // Quantizing qwen3-tiny's stored weights the ModelOpt way reproduces the
  // independent generator's qwen3-tiny-nvfp4 bytes (scales, codes, global scale).
  void nvfp4QuantizerMatchesFixture() {
    OCTET_REQUIRE_FIXTURES();
    const std::string base = test::FixturesDir();
    auto src = CheckpointStore::Open(base + "/qwen3-tiny");
    auto dst = CheckpointStore::Open(base + "/qwen3-tiny-nvfp4");
    QVERIFY(src.ok() && dst.ok());
    auto read_float = [&](const std::string& name) {
      const TensorInfo* t = (*src)->Find(name);
      std::vector<float> v(t->numel());
      for (int64_t i = 0; i < t->numel(); ++i) {
        uint16_t h;
        std::memcpy(&h, t->data + 2 * i, 2);
        v[i] = kernels::Bf16ToF32(h);
      }
      return v;
    };
    int64_t codes_total = 0, codes_equal = 0;
    for (const std::vector<std::string>& group :
         {std::vector<std::string>{"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"},
          {"self_attn.o_proj"},
          {"mlp.gate_proj", "mlp.up_proj"},
          {"mlp.down_proj"}}) {
      for (int layer = 0; layer < 2; ++layer) {
        const std::string p = "model.layers." + std::to_string(layer) + ".";
        float amax = 0;
        for (const auto& m : group) {
          auto w = read_float(p + m + ".weight");
          amax = std::max(amax, AbsMax(w.data(), w.size()));
        }
        const float gs = Nvfp4GlobalScale(amax);
        for (const auto& m : group) {
          const TensorInfo* t = (*src)->Find(p + m + ".weight");
          auto w = read_float(p + m + ".weight");
          auto q = QuantizeNvfp4(w.data(), t->shape[0], t->shape[1], gs);
          QVERIFY(q.ok());
          float ref_gs;
          std::memcpy(&ref_gs, (*dst)->Find(p + m + ".weight_scale_2")->data, 4);
          QCOMPARE(q->global_scale, ref_gs);
          const TensorInfo* rs = (*dst)->Find(p + m + ".weight_scale");
          QVERIFY(std::equal(q->scales.begin(), q->scales.end(), rs->data));
          const TensorInfo* rw = (*dst)->Find(p + m + ".weight");
          for (size_t i = 0; i < q->packed.size(); ++i) {
            codes_total += 1;
            codes_equal += q->packed[i] == rw->data[i];
          }
        }
      }
    }
    QCOMPARE(codes_equal, codes_total);
  }

  void configErrorsNameTheProblem() {
    auto c = ParseModelConfig(R"({"architectures":["MistralForCausalLM"]})", "x/config.json");
    QVERIFY(!c.ok());
    QVERIFY2(Has(c.status(), "unsupported architecture 'MistralForCausalLM'") &&
                 Has(c.status(), "x/config.json") &&
                 Has(c.status(), "llama, qwen2, qwen3, qwen3_moe, glm4_moe, minicpm, nanochat"),
             c.status().message().c_str());
    // Without `architectures`, model_type decides; an unknown one lists the known ones.
    c = ParseModelConfig(R"({"model_type":"deepseek_v3"})", "cfg");
    QVERIFY2(!c.ok() && Has(c.status(), "'deepseek_v3'") && Has(c.status(), "glm4_moe"),
             c.status().message().c_str());
    // Mixture-of-experts shapes that cannot route are refused before loading.
    c = ParseModelConfig(
        R"({"model_type":"glm4_moe","vocab_size":8,"hidden_size":8,"intermediate_size":8,
            "num_hidden_layers":2,"num_attention_heads":2,"num_key_value_heads":1,"head_dim":4,
            "n_routed_experts":6,"n_group":4,"topk_group":1,"num_experts_per_tok":2,
            "moe_intermediate_size":4})",
        "cfg");
    QVERIFY2(!c.ok() && Has(c.status(), "n_group 4"), c.status().message().c_str());
    c = ParseModelConfig(
        R"({"model_type":"qwen3_moe","vocab_size":8,"hidden_size":8,"intermediate_size":8,
            "num_hidden_layers":2,"num_attention_heads":2,"num_key_value_heads":1,"head_dim":4,
            "num_experts":4,"num_experts_per_tok":5,"moe_intermediate_size":4})",
        "cfg");
    QVERIFY2(!c.ok() && Has(c.status(), "num_experts_per_tok"), c.status().message().c_str());
    c = ParseModelConfig(
        R"({"model_type":"glm4_moe","vocab_size":8,"hidden_size":8,"intermediate_size":8,
            "num_hidden_layers":2,"num_attention_heads":2,"num_key_value_heads":1,"head_dim":8,
            "partial_rotary_factor":0.1})",
        "cfg");
    QVERIFY2(!c.ok() && Has(c.status(), "partial_rotary_factor"), c.status().message().c_str());
    // Llama-3's rope_scaling numbers, and nanochat's constants, the same way.
    c = ParseModelConfig(
        R"({"architectures":["LlamaForCausalLM"],"vocab_size":8,"hidden_size":8,
            "intermediate_size":8,"num_hidden_layers":1,"num_attention_heads":2,
            "num_key_value_heads":1,"rope_scaling":{"rope_type":"llama3","factor":"8"}})",
        "cfg");
    QVERIFY2(!c.ok() && Has(c.status(), "rope_scaling") && Has(c.status(), "\"factor\""),
             c.status().message().c_str());
    for (const char* bad : {R"("norm_eps":"x")", R"("rope_theta":-1)", R"("softcap":-15)"}) {
      c = ParseModelConfig(std::string(R"({"model_type":"nanochat","n_layer":1,"n_head":2,)"
                                       R"("n_embd":8,"vocab_size":8,)") +
                               bad + "}",
                           "cfg");
      QVERIFY2(!c.ok() && Has(c.status(), std::string(bad).substr(0, std::string(bad).find(':'))),
               c.status().message().c_str());
    }
    c = ParseModelConfig(R"({"architectures":["LlamaForCausalLM"],"vocab_size":10})", "cfg");
    QVERIFY2(!c.ok() && Has(c.status(), "hidden_size"), c.status().message().c_str());
    c = ParseModelConfig("{not json", "cfg");
    QVERIFY2(!c.ok() && Has(c.status(), "byte offset"), c.status().message().c_str());
    c = ParseModelConfig(
        R"({"architectures":["Qwen3ForCausalLM"],"vocab_size":8,"hidden_size":8,"intermediate_size":8,
            "num_hidden_layers":1,"num_attention_heads":2,"num_key_value_heads":1,"head_dim":6,
            "quantization_config":{"quant_method":"modelopt","quant_algo":"FP8"}})",
        "cfg");
    QVERIFY2(!c.ok() && Has(c.status(), "'FP8'"), c.status().message().c_str());
  }

  // Sizes that would be allocated from, and constants that would make every
  // logit NaN, are refused with the field's name before anything is loaded.
  void configSizesAndConstantsAreBounded_data() {
    QTest::addColumn<QString>("field");
    QTest::addColumn<QString>("value");
    QTest::newRow("layers") << "num_hidden_layers"
                            << "100000000";
    QTest::newRow("hidden") << "hidden_size"
                            << "4294967296";
    QTest::newRow("vocab") << "vocab_size"
                           << "1000000000";
    QTest::newRow("context zero") << "max_position_embeddings"
                                  << "0";
    QTest::newRow("context huge") << "max_position_embeddings"
                                  << "100000000000";
    QTest::newRow("eps negative") << "rms_norm_eps"
                                  << "-1";
    QTest::newRow("eps zero") << "rms_norm_eps"
                              << "0";
    QTest::newRow("rope theta zero") << "rope_theta"
                                     << "0";
    // Not numbers, or past the float the field is: refused naming the field,
    // never cast (a double past FLT_MAX is undefined to convert).
    QTest::newRow("eps a string") << "rms_norm_eps"
                                  << "\"1e-6\"";
    QTest::newRow("eps past a float") << "rms_norm_eps"
                                      << "1e300";
    QTest::newRow("rope theta a list") << "rope_theta"
                                       << "[10000]";
  }
  void configSizesAndConstantsAreBounded() {
    QFETCH(QString, field);
    QFETCH(QString, value);
    std::string json = R"({"architectures":["Qwen3ForCausalLM"],"vocab_size":64,"hidden_size":16,
        "intermediate_size":32,"num_hidden_layers":2,"num_attention_heads":2,
        "num_key_value_heads":1,"head_dim":8,"max_position_embeddings":128,
        "rms_norm_eps":1e-6,"rope_theta":10000})";
    QVERIFY(ParseModelConfig(json, "cfg").ok());
    const std::string key = "\"" + field.toStdString() + "\":";
    const size_t at = json.find(key) + key.size();
    json.replace(at, json.find_first_of(",}", at) - at, value.toStdString());
    auto c = ParseModelConfig(json, "x/config.json");
    QVERIFY2(!c.ok(), json.c_str());
    QVERIFY2(Has(c.status(), field.toStdString()) && Has(c.status(), "x/config.json"),
             c.status().message().c_str());
  }

  // A checkpoint holding NaNs (a damaged file, a bad conversion) is refused at
  // load, the tensor named, instead of decoding every token as id 0.
  void nonFiniteWeightsAreRefusedAtLoad() {
    QTemporaryDir tmp;
    RandomModelShape shape;
    shape.hidden_size = 64;
    shape.intermediate_size = 2048;  // gate/up/down span several pages
    for (const std::string& victim : {std::string("model.layers.1.mlp.down_proj.weight"),
                                      std::string("model.layers.0.input_layernorm.weight")}) {
      const std::string dir = tmp.path().toStdString() + "/" + victim;
      QVERIFY(WriteRandomCheckpoint(shape, dir).ok());
      QVERIFY(Model::Load(dir, {}).ok());
      int64_t offset = 0, bytes = 0;
      std::string file;
      {
        auto store = CheckpointStore::Open(dir);
        QVERIFY(store.ok());
        const TensorInfo* t = (*store)->Find(victim);
        QVERIFY(t);
        offset = t->file_offset;
        bytes = t->size_bytes;
        file = t->file;
      }
      auto data = ReadFileToString(file);
      QVERIFY(data.ok());
      for (int64_t i = 0; i + 1 < bytes; i += 2) {  // BF16 NaN everywhere in the tensor
        (*data)[offset + i] = static_cast<char>(0xc0);
        (*data)[offset + i + 1] = static_cast<char>(0x7f);
      }
      QVERIFY(WriteFileAtomic(file, *data).ok());
      auto m = Model::Load(dir, {});
      QVERIFY2(!m.ok(), victim.c_str());
      QCOMPARE(m.status().code(), StatusCode::kDataLoss);
      QVERIFY2(Has(m.status(), victim) && Has(m.status(), "damaged"), m.status().message().c_str());
    }
  }

  // A header that lost a tensor's entry: the load names the missing tensor and
  // points at the bytes that no entry covers, where its data still is.
  void aTensorMissingFromTheHeaderIsNamed() {
    QTemporaryDir tmp;
    const std::string dir = tmp.path().toStdString() + "/m";
    QVERIFY(WriteRandomCheckpoint(RandomModelShape{}, dir).ok());
    const std::string file = dir + "/model.safetensors";
    auto bytes = ReadFileToString(file);
    QVERIFY(bytes.ok());
    uint64_t n = 0;
    std::memcpy(&n, bytes->data(), 8);
    auto header = nlohmann::json::parse(bytes->substr(8, n));
    const std::string victim = "model.layers.1.self_attn.v_proj.weight";
    QVERIFY(header.erase(victim) == 1);
    std::string text = header.dump();
    text.resize((text.size() + 7) / 8 * 8, ' ');
    const uint64_t len = text.size();
    std::string rewritten(8, '\0');
    std::memcpy(rewritten.data(), &len, 8);
    rewritten += text + bytes->substr(8 + n);
    QVERIFY(WriteFileAtomic(file, rewritten).ok());
    auto m = Model::Load(dir, {});
    QVERIFY(!m.ok());
    QVERIFY2(Has(m.status(), "tensor '" + victim + "'") && Has(m.status(), "is missing") &&
                 Has(m.status(), "no tensor in its header covers"),
             m.status().message().c_str());
  }

  void loadErrorsNameTheProblem() {
    OCTET_REQUIRE_FIXTURES();
    const std::string base = test::FixturesDir();
    QTemporaryDir tmp;
    const std::string d = tmp.path().toStdString();
    auto load = [](const std::string& dir) { return Model::Load(dir, LoadOptions{}).status(); };

    Status s = load(d + "/nope");
    QVERIFY2(s.code() == StatusCode::kNotFound && Has(s, "/nope"), s.message().c_str());

    QVERIFY(MakeDirs(d + "/empty").ok());
    s = load(d + "/empty");
    QVERIFY2(Has(s, "config.json"), s.message().c_str());

    // Unsupported architecture.
    CopyDir(base + "/qwen3-tiny", d + "/arch");
    auto cfg = ReadFileToString(d + "/arch/config.json");
    std::string text = *cfg;
    text.replace(text.find("Qwen3ForCausalLM"), 16, "GemmaForCausalLM");
    QVERIFY(WriteFileAtomic(d + "/arch/config.json", text).ok());
    s = load(d + "/arch");
    QVERIFY2(Has(s, "unsupported architecture 'GemmaForCausalLM'"), s.message().c_str());

    // Missing and misshaped tensors: rewrite the checkpoint without / with a wrong one.
    auto store = CheckpointStore::Open(base + "/qwen3-tiny");
    QVERIFY(store.ok());
    auto rewrite = [&](const std::string& dir, const std::string& drop,
                       const std::string& reshape) {
      CopyDir(base + "/qwen3-tiny", dir);
      SafetensorsWriter w;
      for (const TensorInfo* t : (*store)->tensors()) {
        if (t->name == drop) continue;
        std::vector<int64_t> shape = t->shape;
        if (t->name == reshape) shape = {shape[1], shape[0]};
        QVERIFY(w.Add(t->name, t->dtype, shape, t->data, t->size_bytes).ok());
      }
      QVERIFY(w.Write(dir + "/model.safetensors").ok());
    };
    rewrite(d + "/missing", "model.layers.1.mlp.up_proj.weight", "");
    s = load(d + "/missing");
    QVERIFY2(
        Has(s, "'model.layers.1.mlp.up_proj.weight'") && Has(s, "[128, 64]") && Has(s, "missing"),
        s.message().c_str());
    rewrite(d + "/shape", "", "model.layers.0.self_attn.o_proj.weight");
    s = load(d + "/shape");
    QVERIFY2(Has(s, "'model.layers.0.self_attn.o_proj.weight'") && Has(s, "[128, 64]") &&
                 Has(s, "[64, 128] was expected"),
             s.message().c_str());

    // A mixture-of-experts checkpoint: a missing expert, an expert of the
    // wrong shape, a router of the wrong width, a missing correction bias.
    auto moe_store = CheckpointStore::Open(base + "/glm4-moe-tiny");
    QVERIFY(moe_store.ok());
    auto rewrite_moe = [&](const std::string& dir, const std::string& victim,
                           std::vector<int64_t> shape) {
      CopyDir(base + "/glm4-moe-tiny", dir);
      SafetensorsWriter w;
      for (const TensorInfo* t : (*moe_store)->tensors()) {
        if (t->name != victim) {
          QVERIFY(w.Add(t->name, t->dtype, t->shape, t->data, t->size_bytes).ok());
        } else if (!shape.empty()) {
          int64_t n = DTypeSize(t->dtype);
          for (int64_t d : shape) n *= d;
          QVERIFY(n <= t->size_bytes);
          QVERIFY(w.Add(t->name, t->dtype, shape, t->data, n).ok());
        }
      }
      QVERIFY(w.Write(dir + "/model.safetensors").ok());
    };
    rewrite_moe(d + "/moe-missing", "model.layers.2.mlp.experts.5.down_proj.weight", {});
    s = load(d + "/moe-missing");
    QVERIFY2(Has(s, "'model.layers.2.mlp.experts.5.down_proj.weight'") && Has(s, "[64, 32]") &&
                 Has(s, "missing"),
             s.message().c_str());
    rewrite_moe(d + "/moe-shape", "model.layers.1.mlp.experts.3.gate_proj.weight", {64, 32});
    s = load(d + "/moe-shape");
    QVERIFY2(Has(s, "'model.layers.1.mlp.experts.3.gate_proj.weight'") &&
                 Has(s, "[32, 64] was expected"),
             s.message().c_str());
    rewrite_moe(d + "/moe-router", "model.layers.1.mlp.gate.weight", {7, 64});
    s = load(d + "/moe-router");
    QVERIFY2(Has(s, "'model.layers.1.mlp.gate.weight'") && Has(s, "[7, 64]") &&
                 Has(s, "[8, 64] was expected"),
             s.message().c_str());
    rewrite_moe(d + "/moe-bias", "model.layers.2.mlp.gate.e_score_correction_bias", {});
    s = load(d + "/moe-bias");
    QVERIFY2(Has(s, "'model.layers.2.mlp.gate.e_score_correction_bias'") && Has(s, "missing"),
             s.message().c_str());

    // A truncated shard: the error names the file and a byte offset.
    CopyDir(base + "/llama3-tiny-sharded", d + "/trunc");
    const std::string shard = d + "/trunc/model-00002-of-00002.safetensors";
    std::filesystem::resize_file(shard, std::filesystem::file_size(shard) - 100);
    s = load(d + "/trunc");
    QVERIFY2(s.code() == StatusCode::kDataLoss && Has(s, "model-00002-of-00002.safetensors") &&
                 Has(s, "truncated") && Has(s, "byte offset"),
             s.message().c_str());
  }
};

QTEST_APPLESS_MAIN(TestEngineFormats)
#include "test_engine_formats.moc"
