// `octet generate` as a user runs it: ids and logits against the fixtures,
// the JSON contract, and exit codes for bad input.
#include <signal.h>

#include <QtTest>
#include <cmath>
#include <memory>
#include <mutex>

#include "octet/base/file_util.h"
#include "octet/base/json.h"
#include "octet/base/npy.h"
#include "octet/engine/bpe_trainer.h"
#include "octet/engine/tokenizer.h"
#include "octet_test.h"
#include "random_checkpoint.h"

using octet::test::RunProgram;

namespace {
std::string JoinIds(const std::vector<int>& ids) {
  std::string s;
  for (int id : ids) s += (s.empty() ? "" : ",") + std::to_string(id);
  return s;
}
}  // namespace

class TestGenerateCli : public QObject {
  Q_OBJECT
 private slots:
  void jsonIdsAndLogitsMatchFixture() {
    OCTET_REQUIRE_FIXTURES();
    const std::string dir = octet::test::FixturesDir() + "/qwen3-tiny-nvfp4";
    auto ref = nlohmann::json::parse(*octet::ReadFileToString(dir + "/reference.json"));
    const auto prompt = ref["prompt_ids"].get<std::vector<int>>();
    const auto gen = ref["generated_ids"].get<std::vector<int>>();
    QTemporaryDir tmp;
    const std::string npy = tmp.path().toStdString() + "/logits.npy";
    auto r = RunProgram({"octet", "generate", "--model", dir, "--prompt-ids", JoinIds(prompt),
                         "--max-tokens", "8", "--ignore-eos", "--threads", "2", "--json",
                         "--logits-out", npy});
    QVERIFY2(r.exit_code == 0, r.output.c_str());
    // stdout holds exactly one JSON document (the last line; progress goes to stderr).
    const std::string line = r.output.substr(r.output.rfind('{'));
    auto j = nlohmann::json::parse(line);
    QCOMPARE(j["ids"].get<std::vector<int>>(), gen);
    QCOMPARE(j["prompt_tokens"].get<int>(), int(prompt.size()));
    QCOMPARE(j["tp"].get<int>(), 1);
    for (const char* k : {"prefill_tps", "decode_tps", "ttft_ms"}) QVERIFY(j[k].is_number());
    QVERIFY(j.contains("text"));
    auto got = octet::ReadNpy(npy);
    auto want = octet::ReadNpy(dir + "/logits.npy");
    QVERIFY(got.ok() && want.ok());
    QCOMPARE(got->shape, want->shape);
    auto g = got->AsFloat(), w = want->AsFloat();
    double d = 0;
    for (size_t i = 0; i < g.size(); ++i) d = std::max(d, std::fabs(double(g[i]) - w[i]));
    QVERIFY2(d <= 2e-3, std::to_string(d).c_str());
  }

  // --speculative ngram on the TP 2 path (rank processes over shm) with the
  // trained demo model and a prompt its answer copies: the same ids as plain
  // decoding, drafts accepted and reported in the JSON (fixed lengths; the
  // default, K = 4 with automatic lengths, gives the same ids); bad values
  // are usage errors.
  void speculativeFlags() {
    const std::string dir = octet::test::SourceDir() + "/resources/models/nanochat-demo";
    const std::string line = "The quick brown fox jumps over the lazy dog. ";
    const std::string prompt = line + line + "The quick brown fox";
    std::vector<int> ids[2];
    for (int spec = 0; spec < 2; ++spec) {
      std::vector<std::string> argv = {
          "octet", "generate",     "--model", dir, "--prompt",  prompt, "--max-tokens",
          "32",    "--ignore-eos", "--tp",    "2", "--threads", "1",    "--json"};
      // Fixed lengths: every draft verified (auto may decline them at TP 2,
      // where a row costs a sizeable share of a step of this tiny model).
      if (spec) {
        argv.insert(argv.end(),
                    {"--speculative", "ngram", "--draft-tokens", "3", "--draft-length", "fixed"});
      }
      auto r = RunProgram(argv);
      QVERIFY2(r.exit_code == 0, r.output.c_str());
      // The last line is the document (it holds a nested object).
      const size_t nl = r.output.rfind("\n{");
      auto j = nlohmann::json::parse(r.output.substr(nl == std::string::npos ? 0 : nl + 1));
      ids[spec] = j["ids"].get<std::vector<int>>();
      QCOMPARE(j["tp"].get<int>(), 2);
      QCOMPARE(j.contains("speculative"), spec == 1);
      if (spec) {
        QCOMPARE(j["speculative"]["method"].get<std::string>(), std::string("ngram"));
        QVERIFY(j["speculative"]["accepted"].get<int>() > 0);
        QVERIFY(j["speculative"]["acceptance_rate"].is_number());
      }
    }
    QCOMPARE(ids[1], ids[0]);
    // Without --draft-tokens, n-gram drafts up to 4 a step (the same ids again).
    {
      auto r =
          RunProgram({"octet", "generate", "--model", dir, "--prompt", prompt, "--max-tokens", "32",
                      "--ignore-eos", "--tp", "2", "--threads", "1", "--json", "--speculative", "ngram"});
      QVERIFY2(r.exit_code == 0, r.output.c_str());
      const size_t nl = r.output.rfind("\n{");
      auto j = nlohmann::json::parse(r.output.substr(nl == std::string::npos ? 0 : nl + 1));
      QCOMPARE(j["speculative"]["draft_tokens"].get<int>(), 4);
      QCOMPARE(j["speculative"]["draft_length"].get<std::string>(), std::string("auto"));
      QCOMPARE(j["ids"].get<std::vector<int>>(), ids[0]);
    }
    auto r = RunProgram(
        {"octet", "generate", "--model", dir, "--prompt-ids", "1", "--speculative", "eagle"});
    QCOMPARE(r.exit_code, 2);
    QVERIFY2(r.output.find("choose off, ngram or mtp") != std::string::npos, r.output.c_str());
    r = RunProgram({"octet", "generate", "--model", dir, "--prompt-ids", "1", "--speculative",
                    "ngram", "--draft-tokens", "9"});
    QCOMPARE(r.exit_code, 2);
    QVERIFY2(r.output.find("--draft-tokens must be from 1 to 8") != std::string::npos,
             r.output.c_str());
  }

  // --nvfp4-tiles off keeps the NVFP4 weights row-major (no tile copy is
  // built, the load log says none) and generates the same ids; a value other
  // than on/off is a usage error.
  void nvfp4TilesFlag() {
    OCTET_REQUIRE_FIXTURES();
    const std::string dir = octet::test::FixturesDir() + "/qwen3-tiny-nvfp4";
    auto ref = nlohmann::json::parse(*octet::ReadFileToString(dir + "/reference.json"));
    const auto prompt = JoinIds(ref["prompt_ids"].get<std::vector<int>>());
    const auto gen = ref["generated_ids"].get<std::vector<int>>();
    for (const char* value : {"on", "off"}) {
      auto r =
          RunProgram({"octet", "generate", "--model", dir, "--prompt-ids", prompt, "--max-tokens",
                      "8", "--ignore-eos", "--threads", "2", "--json", "--nvfp4-tiles", value});
      QVERIFY2(r.exit_code == 0, r.output.c_str());
      auto j = nlohmann::json::parse(r.output.substr(r.output.rfind('{')));
      QCOMPARE(j["ids"].get<std::vector<int>>(), gen);
      const bool tiled = r.output.find("NVFP4 weights: a tile copy") != std::string::npos;
      if (std::string(value) == "off") QVERIFY2(!tiled, r.output.c_str());
    }
    auto r = RunProgram(
        {"octet", "generate", "--model", dir, "--prompt-ids", prompt, "--nvfp4-tiles", "maybe"});
    QCOMPARE(r.exit_code, 2);
    QVERIFY2(r.output.find("--nvfp4-tiles takes on or off, not 'maybe'") != std::string::npos,
             r.output.c_str());
  }

  // --prompt/--chat and `octet chat` go through the model folder's
  // tokenizer.json: the ids --prompt feeds the model are exactly the
  // tokenizer's encoding (so --prompt and --prompt-ids agree), and the text
  // returned is the decoding of the generated ids. The model is the qwen3-tiny
  // fixture with a 300-token BPE vocabulary trained here (its ids fit the
  // fixture's 320-entry embedding).
  void textPromptsUseTheModelsTokenizer() {
    OCTET_REQUIRE_FIXTURES();
    QTemporaryDir tmp;
    const std::string dir = tmp.path().toStdString();
    const std::string src = octet::test::FixturesDir() + "/qwen3-tiny";
    for (const char* f : {"config.json", "model.safetensors"}) {
      QVERIFY(QFile::link(QString::fromStdString(src + "/" + f),
                          QString::fromStdString(dir + "/" + f)));
    }
    octet::engine::BpeTrainerOptions opts;
    opts.vocab_size = 300;
    opts.special_tokens = {"<|endoftext|>"};
    std::string corpus;
    for (int i = 0; i < 50; ++i) corpus += "the cat sat on the mat and the dog ate the cake. ";
    auto json = octet::engine::TrainBpeTokenizerJson(corpus, opts, nullptr);
    QVERIFY2(json.ok(), json.status().ToString().c_str());
    QVERIFY(octet::WriteFileAtomic(dir + "/tokenizer.json", *json).ok());
    auto tok = octet::engine::Tokenizer::Load(dir);
    QVERIFY2(tok.ok(), tok.status().ToString().c_str());
    octet::engine::EncodeOptions eo;
    eo.add_special_tokens = true;
    const std::vector<int32_t> ids = tok->Encode("the cat sat", eo);
    QVERIFY(!ids.empty());

    auto a = RunProgram({"octet", "generate", "--model", dir, "--prompt", "the cat sat",
                         "--max-tokens", "6", "--ignore-eos", "--json"});
    QVERIFY2(a.exit_code == 0, a.output.c_str());
    auto ja = nlohmann::json::parse(a.output.substr(a.output.rfind('{')));
    QCOMPARE(ja["prompt_tokens"].get<int>(), int(ids.size()));
    auto b = RunProgram({"octet", "generate", "--model", dir, "--prompt-ids",
                         JoinIds(std::vector<int>(ids.begin(), ids.end())), "--max-tokens", "6",
                         "--ignore-eos", "--json"});
    QVERIFY2(b.exit_code == 0, b.output.c_str());
    auto jb = nlohmann::json::parse(b.output.substr(b.output.rfind('{')));
    const auto gen = ja["ids"].get<std::vector<int32_t>>();
    QCOMPARE(gen, jb["ids"].get<std::vector<int32_t>>());
    octet::engine::DecodeOptions dopt;
    dopt.skip_special_tokens = true;
    dopt.skip_unknown_ids = true;
    QCOMPARE(ja["text"].get<std::string>(), *tok->Decode(gen, dopt));

    // No chat template in this tokenizer: --chat falls back to the plain
    // format and says so rather than guessing.
    auto c = RunProgram({"octet", "generate", "--model", dir, "--prompt", "the cat", "--chat",
                         "--max-tokens", "3", "--json"});
    QVERIFY2(c.exit_code == 0, c.output.c_str());
    QVERIFY2(c.output.find("warning") != std::string::npos, c.output.c_str());

    // `octet chat` reads turns from stdin and prints a figures line per reply.
    auto d =
        RunProgram({"/bin/sh", "-c",
                    "printf 'the cat\\nthe dog\\n/exit\\n' | \"" + octet::test::BinDir() +
                        "/octet\" chat --model \"" + dir + "\" --temperature 0 --max-tokens 4"});
    QVERIFY2(d.exit_code == 0, d.output.c_str());
    size_t turns = 0;
    for (size_t pos = 0; (pos = d.output.find(" prompt tokens, ", pos)) != std::string::npos; ++pos)
      ++turns;
    QCOMPARE(turns, size_t(2));
  }

  // A long generation stops promptly on SIGTERM, with --json too (which prints
  // nothing per token), and says so with 128 + the signal as its exit code.
  void sigtermStopsALongGeneration() {
    QTemporaryDir tmp;
    octet::engine::RandomModelShape shape;
    shape.vocab_size = 64;
    shape.hidden_size = 16;
    shape.intermediate_size = 32;
    shape.num_heads = 2;
    shape.num_kv_heads = 1;
    shape.head_dim = 8;
    shape.max_position_embeddings = 1 << 20;
    const std::string dir = tmp.path().toStdString() + "/long";
    QVERIFY(octet::engine::WriteRandomCheckpoint(shape, dir).ok());
    for (bool json : {true, false}) {
      octet::SpawnOptions o;
      o.argv = {octet::test::BinDir() + "/octet",
                "generate",
                "--model",
                dir,
                "--prompt-ids",
                "1,2,3",
                "--max-tokens",
                "1000000",
                "--ignore-eos",
                "--threads",
                "1"};
      if (json) o.argv.push_back("--json");
      auto out = std::make_shared<std::string>();
      auto mu = std::make_shared<std::mutex>();
      o.on_output = [out, mu](std::string_view chunk) {
        std::lock_guard<std::mutex> lock(*mu);
        out->append(chunk);
      };
      auto p = octet::Subprocess::Spawn(o);
      QVERIFY(p.ok());
      QTest::qWait(1500);  // loaded and generating
      ::kill((*p)->pid(), SIGTERM);
      auto st = (*p)->Wait(octet::Deadline::AfterMs(10'000));
      QVERIFY2(st.ok(), "octet generate did not stop within 10 s of SIGTERM");
      std::lock_guard<std::mutex> lock(*mu);
      QVERIFY2(st->exited && st->code == 128 + SIGTERM, out->c_str());
      QVERIFY2(out->find("stopped by a signal") != std::string::npos, out->c_str());
    }
  }

  void exitCodes() {
    OCTET_REQUIRE_FIXTURES();
    const std::string dir = octet::test::FixturesDir() + "/qwen3-tiny";
    auto r = RunProgram({"octet", "generate", "--help"});
    QCOMPARE(r.exit_code, 0);
    QVERIFY(r.output.find("--prompt-ids") != std::string::npos);
    // The fixture folders have weights but no tokenizer.json: text needs one.
    r = RunProgram({"octet", "generate", "--model", dir, "--prompt", "hello"});
    QCOMPARE(r.exit_code, 1);
    QVERIFY2(r.output.find("has no tokenizer.json") != std::string::npos, r.output.c_str());
    r = RunProgram({"octet", "generate", "--model", dir, "--prompt-ids", "1", "--chat"});
    QCOMPARE(r.exit_code, 2);
    r = RunProgram({"octet", "generate", "--model", dir, "--prompt", "a", "--prompt-ids", "1"});
    QCOMPARE(r.exit_code, 2);
    r = RunProgram({"octet", "generate", "--model", dir, "--prompt-ids", "1,2,320"});
    QCOMPARE(r.exit_code, 2);
    QVERIFY2(r.output.find("token id 320 at position 2 is out of range") != std::string::npos,
             r.output.c_str());
    r = RunProgram({"octet", "generate", "--model", dir, "--prompt-ids", "1", "--top-p", "0"});
    QCOMPARE(r.exit_code, 2);
    r = RunProgram({"octet", "generate", "--model", dir, "--prompt-ids", "1,x"});
    QCOMPARE(r.exit_code, 2);
    r = RunProgram({"octet", "generate", "--prompt-ids", "1"});
    QCOMPARE(r.exit_code, 2);
    // A mistyped folder, a file, a folder that is no model: each says which, with
    // --prompt (the tokenizer is looked for first) as with --prompt-ids.
    for (const char* prompt : {"--prompt", "--prompt-ids"}) {
      r = RunProgram({"octet", "generate", "--model", dir + "/missing", prompt, "1"});
      QCOMPARE(r.exit_code, 1);
      QVERIFY2(
          r.output.find("model folder '" + dir + "/missing' does not exist") != std::string::npos,
          r.output.c_str());
      r = RunProgram({"octet", "generate", "--model", dir + "/config.json", prompt, "1"});
      QCOMPARE(r.exit_code, 1);
      QVERIFY2(
          r.output.find("config.json' is a file: give the model's folder") != std::string::npos,
          r.output.c_str());
      r = RunProgram({"octet", "generate", "--model", octet::test::FixturesDir(), prompt, "1"});
      QCOMPARE(r.exit_code, 1);
      QVERIFY2(r.output.find("no config.json in '" + octet::test::FixturesDir() +
                             "': not a Hugging Face model folder") != std::string::npos,
               r.output.c_str());
    }
    // Sizes from the command line that would abort (out of memory, thread
    // creation) are errors that say what is wrong.
    r = RunProgram({"octet", "generate", "--model", dir, "--prompt-ids", "1,2", "--max-tokens",
                    "99999999999"});
    QVERIFY2(r.exit_code == 1 || r.exit_code == 2, r.output.c_str());
    QVERIFY2(r.output.find("max_position_embeddings") != std::string::npos, r.output.c_str());
    r = RunProgram(
        {"octet", "generate", "--model", dir, "--prompt-ids", "1", "--threads", "100000"});
    QVERIFY2(r.exit_code == 1 || r.exit_code == 2, r.output.c_str());
    QVERIFY2(r.output.find("--threads 100000") != std::string::npos, r.output.c_str());
    // Sampling with a seed is reproducible.
    auto a = RunProgram({"octet", "generate", "--model", dir, "--prompt-ids", "5,6,7",
                         "--temperature", "1.2", "--top-k", "20", "--seed", "7", "--json"});
    auto b = RunProgram({"octet", "generate", "--model", dir, "--prompt-ids", "5,6,7",
                         "--temperature", "1.2", "--top-k", "20", "--seed", "7", "--json"});
    QCOMPARE(a.exit_code, 0);
    auto ja = nlohmann::json::parse(a.output.substr(a.output.rfind('{')));
    auto jb = nlohmann::json::parse(b.output.substr(b.output.rfind('{')));
    QCOMPARE(ja["ids"], jb["ids"]);
  }
};

QTEST_APPLESS_MAIN(TestGenerateCli)
#include "test_generate_cli.moc"
