// Tokenizer throughput on one thread: encodes a few MB of deterministic mixed
// text (English prose, code, numbers, whitespace runs, Cyrillic, Greek, CJK,
// Arabic, emoji) with the Qwen3 and Llama-3 tokenizers from the fixtures, in
// documents of a few KB (as training-data preparation calls it), and reports
// MB/s and tokens/s, then decode speed, load time, and the BPE trainer's time
// on the same text. Rates are per CPU second of the benchmark thread (the wall
// clock is printed beside them): on a machine shared with other jobs the wall
// clock also counts time spent waiting for a core. Prints a table, and with
// --json one JSON document.
//
//   bench_tokenizer [--tokenizers DIR] [--only qwen3,llama3] [--mb 4] [--repeat 3]
//                   [--train-vocab 8192] [--json]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "octet/base/args.h"
#include "octet/engine/bpe_trainer.h"
#include "octet/engine/tokenizer.h"

using namespace octet;
using namespace octet::engine;

namespace {

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// CPU seconds this thread has used: on a machine shared with other jobs the
// wall clock also counts time the thread waited for a core.
double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

// Deterministic mixed text cut into documents (std::mt19937 is specified by
// the standard, so every platform generates the same bytes).
std::vector<std::string> MakeDocuments(size_t total_bytes) {
  static const char* kWords[] = {
      "the",       "of",        "and",        "to",       "in",
      "is",        "that",      "for",        "it",       "as",
      "was",       "with",      "be",         "by",       "on",
      "not",       "he",        "this",       "are",      "or",
      "his",       "from",      "at",         "which",    "but",
      "have",      "an",        "they",       "you",      "were",
      "her",       "she",       "there",      "been",     "one",
      "all",       "would",     "their",      "we",       "him",
      "model",     "tokenizer", "cluster",    "memory",   "bandwidth",
      "gradient",  "network",   "throughput", "latency",  "parallel",
      "tensor",    "inference", "training",   "language", "internationalization",
      "don't",     "it's",      "we've",      "they're",  "I'm",
      "you'll",    "she'd",     "Spark",      "NVIDIA",   "Hello",
      "World",     "Octet",     "GPU",        "RDMA",     "collective",
      "all-reduce"};
  static const char* kPunct[] = {".", ",", ";", ":", "!", "?", " -", "...", " (see above)", "\""};
  static const char* kCode[] = {
      "for (int i = 0; i < n; ++i) {\n    sum += a[i] * b[i];\n}\n",
      "def forward(self, x):\n    return self.proj(F.gelu(self.fc(x)))\n",
      "if (!status.ok()) return status.WithContext(\"rank \" + std::to_string(rank));\n",
      "    {\"id\": 42, \"name\": \"qwen3\", \"layers\": [1, 2, 3], \"ok\": true}\n",
      "SELECT name, SUM(bytes) FROM runs WHERE tp >= 2 GROUP BY name;\n",
      "\t\tcase kEmpty:\n\t\t\tbreak;\n"};
  static const char* kIntl[] = {
      "Привет, мир! Как дела? ",
      "Καλημέρα κόσμε. ",
      "你好，世界。我喜欢自然语言处理。",
      "日本語のテキストです。カタカナと漢字。",
      "안녕하세요, 한국어 텍스트입니다. ",
      "مرحبا بالعالم ",
      "Tiếng Việt có nhiều dấu. ",
      "Ünïcödé café naïve façade. ",
      "😀 🙂 👍🏽 🇺🇸 ❤️ 🔥 ",
      "½ ² ① ١٢٣ ",
  };
  std::mt19937 rng(12345);
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  // A lexicon: the common words above, then 20000 made-up words of 1-4
  // syllables, drawn with a Zipf-like (log-uniform rank) law as in real text.
  static const char* kSyllables[] = {"ka", "to",   "ri",   "sen", "mo",  "la",  "ter", "in",
                                     "qu", "ex",   "pro",  "ba",  "ne",  "sti", "ol",  "ur",
                                     "ph", "gra",  "ly",   "zu",  "che", "vi",  "dor", "an",
                                     "es", "ment", "tion", "ab",  "ic"};
  std::vector<std::string> lexicon(std::begin(kWords), std::end(kWords));
  for (int i = 0; i < 20000; ++i) {
    std::string w;
    const size_t n = 1 + pick(4);
    for (size_t k = 0; k < n; ++k) w += kSyllables[pick(std::size(kSyllables))];
    lexicon.push_back(w);
  }
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  auto zipf_word = [&]() -> const std::string& {
    const double r = std::exp(unit(rng) * std::log(double(lexicon.size()) + 1.0)) - 1.0;
    return lexicon[std::min(lexicon.size() - 1, static_cast<size_t>(r))];
  };
  std::vector<std::string> docs;
  size_t total = 0;
  while (total < total_bytes) {
    std::string doc;
    const size_t target = 1024 + pick(4096);
    while (doc.size() < target) {
      const size_t kind = pick(100);
      if (kind < 70) {  // a sentence
        const size_t n = 5 + pick(15);
        for (size_t w = 0; w < n; ++w) {
          std::string word = zipf_word();
          if (w == 0)
            word[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(word[0])));
          doc += word;
          doc += (w + 1 < n) ? " " : kPunct[pick(std::size(kPunct))];
        }
        doc += pick(6) == 0 ? "\n\n" : " ";
      } else if (kind < 80) {
        doc += kCode[pick(std::size(kCode))];
      } else if (kind < 88) {
        doc += std::to_string(rng() % 100000) + "." + std::to_string(rng() % 100) + " ";
        doc += std::to_string(1900 + pick(200)) + "-0" + std::to_string(1 + pick(9)) + "-1" +
               std::to_string(pick(10)) + " ";
      } else if (kind < 91) {
        doc += std::string(1 + pick(12), ' ');
        doc += pick(2) ? "\n" : "\t";
      } else {
        doc += kIntl[pick(std::size(kIntl))];
      }
    }
    total += doc.size();
    docs.push_back(std::move(doc));
  }
  return docs;
}

struct Row {
  std::string name;
  double load_s = 0;
  double encode_s = 0;       // best of the repeats, CPU time of this thread
  double encode_wall_s = 0;  // wall time of that same pass
  double decode_s = 0;       // CPU time
  int64_t tokens = 0;
};

}  // namespace

int main(int argc, char** argv) {
  ArgParser args("bench_tokenizer", "Tokenizer encode/decode throughput on one thread.");
  args.Option("tokenizers", "DIR", "folder with qwen3/ and llama3/ tokenizers",
              std::string(OCTET_FIXTURES_DIR_DEFAULT) + "/tokenizers");
  args.Option("only", "NAMES", "comma-separated subset of qwen3,llama3", "qwen3,llama3");
  args.Option("mb", "N", "megabytes of text to encode", "4");
  args.Option("repeat", "N", "encode passes; the fastest counts", "3");
  args.Option("train-vocab", "N", "vocabulary size for the trainer run (0: skip)", "8192");
  args.Flag("json", "print one JSON document on stdout (the table goes to stderr)");
  if (Status s = args.Parse(argc, argv); !s.ok()) {
    std::cerr << "bench_tokenizer: " << s.message() << "\n";
    return 2;
  }
  if (args.help_requested()) {
    std::cout << args.Usage();
    return 0;
  }
  const auto mb = args.GetDouble("mb");
  const auto repeat = args.GetInt("repeat");
  const auto train_vocab = args.GetInt("train-vocab");
  if (!mb.ok() || !repeat.ok() || !train_vocab.ok() || *mb <= 0 || *repeat < 1) {
    std::cerr << "bench_tokenizer: --mb, --repeat and --train-vocab take positive numbers\n";
    return 2;
  }
  const bool as_json = args.GetFlag("json");
  std::ostream& table = as_json ? std::cerr : std::cout;

  const std::vector<std::string> docs = MakeDocuments(static_cast<size_t>(*mb * 1e6));
  size_t bytes = 0;
  for (const std::string& d : docs) bytes += d.size();

  std::vector<Row> rows;
  for (const std::string& name : args.GetList("only")) {
    Row row;
    row.name = name;
    auto t0 = std::chrono::steady_clock::now();
    auto tok = Tokenizer::Load(args.GetString("tokenizers") + "/" + name);
    row.load_s = Seconds(t0);
    if (!tok.ok()) {
      std::cerr << "bench_tokenizer: " << tok.status().ToString() << "\n";
      return 1;
    }
    std::vector<std::vector<TokenId>> encoded(docs.size());
    row.encode_s = 1e30;
    for (int64_t r = 0; r < *repeat; ++r) {
      t0 = std::chrono::steady_clock::now();
      const double c0 = ThreadCpuSeconds();
      for (size_t i = 0; i < docs.size(); ++i) encoded[i] = tok->Encode(docs[i]);
      const double cpu = ThreadCpuSeconds() - c0;
      if (cpu < row.encode_s) {
        row.encode_s = cpu;
        row.encode_wall_s = Seconds(t0);
      }
    }
    row.tokens = 0;
    for (const auto& e : encoded) row.tokens += static_cast<int64_t>(e.size());
    const double d0 = ThreadCpuSeconds();
    size_t decoded_bytes = 0;
    for (const auto& e : encoded) decoded_bytes += tok->Decode(e)->size();
    row.decode_s = ThreadCpuSeconds() - d0;
    if (decoded_bytes == 0) return 1;
    rows.push_back(row);
  }

  // Trainer on the same text.
  double train_s = 0;
  BpeTrainingStats train_stats;
  if (*train_vocab > 0) {
    BpeTrainerOptions options;
    options.vocab_size = static_cast<int32_t>(*train_vocab);
    options.special_tokens = {"<|endoftext|>"};
    BpeTrainer trainer(options);
    const double c0 = ThreadCpuSeconds();
    for (const std::string& d : docs) {
      if (!trainer.AddText(d).ok()) return 1;
    }
    auto json = trainer.Train();
    train_s = ThreadCpuSeconds() - c0;
    if (!json.ok()) {
      std::cerr << "bench_tokenizer: " << json.status().ToString() << "\n";
      return 1;
    }
    train_stats = trainer.stats();
  }

  char line[256];
  std::snprintf(line, sizeof(line),
                "text: %.2f MB in %zu documents, one thread, best of %lld; rates per CPU second "
                "of the thread (wall-clock rate in brackets)\n\n",
                bytes / 1e6, docs.size(), static_cast<long long>(*repeat));
  table << line;
  table << "tokenizer   load s   encode MB/s (wall)   tokens/s (M)   bytes/token   decode MB/s\n";
  for (const Row& r : rows) {
    std::snprintf(line, sizeof(line), "%-9s %8.2f %11.1f (%5.1f) %14.2f %13.2f %13.1f\n",
                  r.name.c_str(), r.load_s, bytes / 1e6 / r.encode_s, bytes / 1e6 / r.encode_wall_s,
                  r.tokens / 1e6 / r.encode_s, double(bytes) / double(r.tokens),
                  bytes / 1e6 / r.decode_s);
    table << line;
  }
  if (*train_vocab > 0) {
    std::snprintf(
        line, sizeof(line),
        "\nBPE trainer: vocab %d (%d merges) from %.2f MB, %lld distinct words: %.2f CPU s\n",
        train_stats.vocab_size, train_stats.merges, train_stats.corpus_bytes / 1e6,
        static_cast<long long>(train_stats.distinct_words), train_s);
    table << line;
  }
  if (as_json) {
    std::cout << "{\"bytes\": " << bytes << ", \"documents\": " << docs.size()
              << ", \"threads\": 1, \"tokenizers\": [";
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      std::snprintf(
          line, sizeof(line),
          "%s{\"name\": \"%s\", \"load_s\": %.3f, \"encode_cpu_s\": %.4f, \"encode_wall_s\": "
          "%.4f, \"encode_mb_per_s\": %.2f, \"tokens\": %lld, \"tokens_per_s\": %.0f, "
          "\"decode_mb_per_s\": %.2f}",
          i ? ", " : "", r.name.c_str(), r.load_s, r.encode_s, r.encode_wall_s,
          bytes / 1e6 / r.encode_s, static_cast<long long>(r.tokens), r.tokens / r.encode_s,
          bytes / 1e6 / r.decode_s);
      std::cout << line;
    }
    std::cout << "]";
    if (*train_vocab > 0) {
      std::snprintf(line, sizeof(line),
                    ", \"trainer\": {\"vocab_size\": %d, \"merges\": %d, \"corpus_bytes\": %lld, "
                    "\"distinct_words\": %lld, \"cpu_seconds\": %.3f}",
                    train_stats.vocab_size, train_stats.merges,
                    static_cast<long long>(train_stats.corpus_bytes),
                    static_cast<long long>(train_stats.distinct_words), train_s);
      std::cout << line;
    }
    std::cout << "}\n";
  }
  return 0;
}
