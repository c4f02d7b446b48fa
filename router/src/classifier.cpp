#include "octet/router/classifier.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "octet/base/file_util.h"

namespace octet::router {
namespace {

using nlohmann::json;

constexpr const char* kFormat = "octet-router-classifier";
constexpr int kVersion = 1;
constexpr size_t kMaxHeadTokens = 768;  // n-grams come from the first 768 and last 256 words
constexpr size_t kMaxTailTokens = 256;
constexpr size_t kMaxSystemTokens = 64;

float Log1pScaled(int64_t v) {
  return static_cast<float>(std::log1p(static_cast<double>(v)) / 10.0);
}
float Capped(int64_t v, int64_t cap, double scale) {
  return static_cast<float>(static_cast<double>(std::min(v, cap)) / scale);
}

// Splits lower-case text into words: runs of ASCII letters/digits, and each
// non-ASCII character (so CJK text yields character n-grams).
void Tokenize(std::string_view text, std::vector<std::string_view>* out) {
  size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (std::isalnum(c)) {
      size_t j = i + 1;
      while (j < text.size() && std::isalnum(static_cast<unsigned char>(text[j]))) ++j;
      out->push_back(text.substr(i, j - i));
      i = j;
    } else if (c >= 0x80) {
      size_t len = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
      len = std::min(len, text.size() - i);
      out->push_back(text.substr(i, len));
      i += len;
    } else {
      ++i;
    }
  }
}

int CountLines(std::string_view s) {
  if (s.empty()) return 0;
  return static_cast<int>(std::count(s.begin(), s.end(), '\n')) + 1;
}

int CountListItems(std::string_view s) {
  int items = 0;
  size_t start = 0;
  while (start < s.size()) {
    size_t end = s.find('\n', start);
    if (end == std::string_view::npos) end = s.size();
    std::string_view line = s.substr(start, end - start);
    size_t k = 0;
    while (k < line.size() && line[k] == ' ') ++k;
    line.remove_prefix(k);
    if (line.size() >= 2 && (line[0] == '-' || line[0] == '*') && line[1] == ' ')
      ++items;
    else if (line.size() >= 2 && std::isdigit(static_cast<unsigned char>(line[0])) &&
             (line[1] == '.' || line[1] == ')'))
      ++items;
    start = end + 1;
  }
  return items;
}

std::string SystemText(const json& request) {
  std::string text;
  auto messages = request.find("messages");
  if (messages == request.end() || !messages->is_array()) return text;
  for (const auto& m : *messages) {
    if (!m.is_object()) continue;
    auto r = m.find("role");
    if (r == m.end() || !r->is_string()) continue;
    const auto& role = r->get_ref<const std::string&>();
    if (role != "system" && role != "developer") continue;
    auto c = m.find("content");
    if (c != m.end() && c->is_string()) {
      text += c->get<std::string>();
      text += '\n';
    }
    if (text.size() > 4096) break;
  }
  for (char& ch : text) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return text;
}

double Sigmoid(double z) {
  if (z >= 0) return 1.0 / (1.0 + std::exp(-z));
  const double e = std::exp(z);
  return e / (1.0 + e);
}

}  // namespace

const std::vector<std::string>& DenseFeatureNames() {
  static const std::vector<std::string> names = {"bias",
                                                 "log_prompt_bytes",
                                                 "log_last_user_bytes",
                                                 "log_system_bytes",
                                                 "turns",
                                                 "tools",
                                                 "tool_call_depth",
                                                 "tool_results",
                                                 "has_code",
                                                 "has_math",
                                                 "non_latin_script",
                                                 "log_max_tokens",
                                                 "question_marks",
                                                 "lines",
                                                 "list_items"};
  return names;
}

ClassifierInput MakeClassifierInput(const json& request, const RequestFeatures& f, int hash_bits) {
  ClassifierInput in;
  const std::string_view text = f.last_user_text;
  in.dense = {1.0f,
              Log1pScaled(f.prompt_bytes),
              Log1pScaled(f.last_user_bytes),
              Log1pScaled(f.system_bytes),
              Capped(f.turns, 20, 10),
              Capped(f.tools, 20, 10),
              Capped(f.tool_call_depth, 10, 5),
              Capped(f.tool_results, 20, 10),
              f.has_code ? 1.0f : 0.0f,
              f.has_math ? 1.0f : 0.0f,
              (f.script != "latin" && f.script != "none") ? 1.0f : 0.0f,
              Log1pScaled(f.max_tokens),
              Capped(static_cast<int64_t>(std::count(text.begin(), text.end(), '?')), 5, 5),
              Capped(CountLines(text), 50, 50),
              Capped(CountListItems(text), 10, 10)};

  const uint64_t mask = (uint64_t{1} << hash_bits) - 1;
  static const uint64_t kUni = Fnv1a64("u:"), kBi = Fnv1a64("b:"), kSys = Fnv1a64("s:"),
                        kTool = Fnv1a64("t:");
  std::vector<std::string_view> words;
  words.reserve(256);
  Tokenize(text, &words);
  if (words.size() > kMaxHeadTokens + kMaxTailTokens) {
    words.erase(words.begin() + static_cast<std::ptrdiff_t>(kMaxHeadTokens),
                words.end() - static_cast<std::ptrdiff_t>(kMaxTailTokens));
  }
  in.buckets.reserve(words.size() * 2 + f.tool_names.size() + 16);
  for (size_t i = 0; i < words.size(); ++i) {
    in.buckets.push_back(static_cast<uint32_t>(Fnv1a64(words[i], kUni) & mask));
    if (i > 0) {
      uint64_t h = Fnv1a64(words[i - 1], kBi);
      h = Fnv1a64(" ", h);
      in.buckets.push_back(static_cast<uint32_t>(Fnv1a64(words[i], h) & mask));
    }
  }
  if (f.system_bytes > 0) {
    const std::string system = SystemText(request);
    std::vector<std::string_view> sw;
    Tokenize(system, &sw);
    if (sw.size() > kMaxSystemTokens) sw.resize(kMaxSystemTokens);
    for (auto w : sw) in.buckets.push_back(static_cast<uint32_t>(Fnv1a64(w, kSys) & mask));
  }
  for (const auto& name : f.tool_names)
    in.buckets.push_back(static_cast<uint32_t>(Fnv1a64(name, kTool) & mask));
  in.bucket_value =
      in.buckets.empty()
          ? 0.0f
          : static_cast<float>(1.0 / std::sqrt(static_cast<double>(in.buckets.size())));
  return in;
}

HashedLogisticModel::HashedLogisticModel(int hash_bits)
    : hash_bits_(hash_bits),
      dense_(DenseFeatureNames().size(), 0.0f),
      hashed_(size_t{1} << hash_bits, 0.0f) {}

double HashedLogisticModel::Score(const ClassifierInput& in) const {
  double z = 0;
  for (size_t i = 0; i < in.dense.size() && i < dense_.size(); ++i)
    z += static_cast<double>(dense_[i]) * in.dense[i];
  double hz = 0;
  for (uint32_t b : in.buckets) hz += hashed_[b];
  z += hz * in.bucket_value;
  return Sigmoid(z);
}

double HashedLogisticModel::Score(const json& request, const RequestFeatures& features) const {
  return Score(MakeClassifierInput(request, features, hash_bits_));
}

json HashedLogisticModel::ToJson() const {
  json doc;
  doc["format"] = kFormat;
  doc["version"] = kVersion;
  doc["type"] = "hashed_logistic";
  doc["hash_bits"] = hash_bits_;
  doc["threshold"] = threshold_;
  doc["features"] = DenseFeatureNames();
  json dense = json::array();
  for (float w : dense_) dense.push_back(static_cast<double>(w));
  doc["dense"] = dense;
  json hashed = json::array();
  for (size_t i = 0; i < hashed_.size(); ++i)
    if (hashed_[i] != 0.0f) hashed.push_back(json::array({i, static_cast<double>(hashed_[i])}));
  doc["hashed"] = hashed;
  doc["training"] = training_info_;
  return doc;
}

Status HashedLogisticModel::Save(const std::string& path) const {
  return WriteFileAtomic(path, ToJson().dump(1) + "\n");
}

Result<HashedLogisticModel> HashedLogisticModel::FromJson(const json& doc,
                                                          const std::string& where) {
  auto bad = [&](const std::string& what) {
    return InvalidArgumentError(where + ": not a usable classifier weights file: " + what);
  };
  if (!doc.is_object()) return bad("expected a JSON object");
  if (doc.value("format", std::string()) != kFormat)
    return bad(std::string("\"format\" must be \"") + kFormat + "\"");
  if (!doc.contains("version") || !doc["version"].is_number_integer() ||
      doc["version"].get<int>() != kVersion)
    return bad("unsupported \"version\" (this build reads version 1)");
  if (doc.value("type", std::string()) != "hashed_logistic")
    return bad("\"type\" must be \"hashed_logistic\"");
  if (!doc.contains("hash_bits") || !doc["hash_bits"].is_number_integer())
    return bad("\"hash_bits\" missing");
  const int bits = doc["hash_bits"].get<int>();
  if (bits < 8 || bits > 24) return bad("\"hash_bits\" must be in 8..24");
  HashedLogisticModel m(bits);
  if (auto t = doc.find("threshold"); t != doc.end()) {
    if (!t->is_number() || t->get<double>() < 0 || t->get<double>() > 1)
      return bad("\"threshold\" must be a number in [0, 1]");
    m.threshold_ = t->get<double>();
  }
  const auto& names = DenseFeatureNames();
  if (!doc.contains("features") || doc["features"] != json(names))
    return bad("\"features\" differ from the ones this build computes (" + json(names).dump() +
               "); retrain with `octet route train-classifier`");
  const auto& dense = doc.value("dense", json());
  if (!dense.is_array() || dense.size() != names.size())
    return bad("\"dense\" must hold " + std::to_string(names.size()) + " numbers");
  for (size_t i = 0; i < names.size(); ++i) {
    if (!dense[i].is_number() || !std::isfinite(dense[i].get<double>()))
      return bad("\"dense\"[" + std::to_string(i) + "] is not a finite number");
    m.dense_[i] = dense[i].get<float>();
  }
  const auto& hashed = doc.value("hashed", json());
  if (!hashed.is_array()) return bad("\"hashed\" must be a list of [bucket, weight]");
  for (size_t k = 0; k < hashed.size(); ++k) {
    const auto& e = hashed[k];
    if (!e.is_array() || e.size() != 2 || !e[0].is_number_unsigned() || !e[1].is_number() ||
        !std::isfinite(e[1].get<double>()))
      return bad("\"hashed\"[" + std::to_string(k) + "] is not [bucket, weight]");
    const uint64_t b = e[0].get<uint64_t>();
    if (b >= m.hashed_.size())
      return bad("\"hashed\"[" + std::to_string(k) + "] bucket " + std::to_string(b) +
                 " is out of range for hash_bits " + std::to_string(bits));
    m.hashed_[b] = e[1].get<float>();
  }
  if (auto t = doc.find("training"); t != doc.end() && t->is_object()) m.training_info_ = *t;
  return m;
}

Result<HashedLogisticModel> HashedLogisticModel::Load(const std::string& path) {
  OCTET_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded())
    return InvalidArgumentError(path + ": classifier weights are not valid JSON");
  return FromJson(doc, path);
}

Result<std::vector<LabelledRequest>> ReadLabelledRequests(const std::string& path) {
  OCTET_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  std::vector<LabelledRequest> out;
  std::istringstream in(text);
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    const auto first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos || line[first] == '#') continue;
    const std::string where = path + ":" + std::to_string(line_no);
    json doc = json::parse(line, nullptr, false);
    if (doc.is_discarded() || !doc.is_object())
      return InvalidArgumentError(where + ": not a JSON object");
    LabelledRequest ex;
    if (!doc.contains("id") || !doc["id"].is_string())
      return InvalidArgumentError(where + ": \"id\" (a string) is missing");
    ex.id = doc["id"].get<std::string>();
    const std::string label = doc.value("label", std::string());
    if (label != "hard" && label != "easy")
      return InvalidArgumentError(where + ": \"label\" must be \"hard\" or \"easy\"");
    ex.hard = label == "hard";
    if (!doc.contains("request") || !doc["request"].is_object())
      return InvalidArgumentError(where + ": \"request\" (an OpenAI request object) is missing");
    ex.request = std::move(doc["request"]);
    out.push_back(std::move(ex));
  }
  if (out.empty()) return InvalidArgumentError(path + ": no labelled requests");
  return out;
}

bool IsHeldOut(const std::string& id, double holdout_fraction) {
  return static_cast<double>(Fnv1a64(id) % 1000) < holdout_fraction * 1000.0;
}

HashedLogisticModel TrainClassifier(const std::vector<LabelledRequest>& examples,
                                    const TrainOptions& options) {
  HashedLogisticModel model(options.hash_bits);
  std::vector<ClassifierInput> inputs;
  inputs.reserve(examples.size());
  for (const auto& ex : examples)
    inputs.push_back(
        MakeClassifierInput(ex.request, ExtractFeatures(ex.request), options.hash_bits));
  if (inputs.empty()) return model;

  auto& wd = model.dense_weights();
  auto& wh = model.hashed_weights();
  std::vector<double> gd(wd.size()), gh(wh.size()), sd(wd.size(), 0.0), sh(wh.size(), 0.0);
  std::vector<uint32_t> touched;  // buckets any example uses (sorted, unique)
  for (const auto& in : inputs) touched.insert(touched.end(), in.buckets.begin(), in.buckets.end());
  std::sort(touched.begin(), touched.end());
  touched.erase(std::unique(touched.begin(), touched.end()), touched.end());

  const double inv_n = 1.0 / static_cast<double>(inputs.size());
  for (int it = 0; it < options.iterations; ++it) {
    std::fill(gd.begin(), gd.end(), 0.0);
    for (uint32_t b : touched) gh[b] = 0.0;
    for (size_t k = 0; k < inputs.size(); ++k) {
      const double err = model.Score(inputs[k]) - (examples[k].hard ? 1.0 : 0.0);
      for (size_t i = 0; i < wd.size(); ++i) gd[i] += err * inputs[k].dense[i] * inv_n;
      const double v = err * inputs[k].bucket_value * inv_n;
      for (uint32_t b : inputs[k].buckets) gh[b] += v;
    }
    // L2 on everything but the bias (dense feature 0), then AdaGrad steps.
    for (size_t i = 1; i < wd.size(); ++i) gd[i] += options.l2 * wd[i];
    for (uint32_t b : touched) gh[b] += options.l2 * wh[b];
    for (size_t i = 0; i < wd.size(); ++i) {
      sd[i] += gd[i] * gd[i];
      wd[i] -= static_cast<float>(options.learning_rate * gd[i] / (std::sqrt(sd[i]) + 1e-8));
    }
    for (uint32_t b : touched) {
      sh[b] += gh[b] * gh[b];
      wh[b] -= static_cast<float>(options.learning_rate * gh[b] / (std::sqrt(sh[b]) + 1e-8));
    }
  }
  return model;
}

double ClassifierMetrics::accuracy() const {
  return examples ? static_cast<double>(true_hard + true_easy) / examples : 0.0;
}
double ClassifierMetrics::precision_hard() const {
  const int called = true_hard + false_hard;
  return called ? static_cast<double>(true_hard) / called : 0.0;
}
double ClassifierMetrics::recall_hard() const {
  const int hard = true_hard + false_easy;
  return hard ? static_cast<double>(true_hard) / hard : 0.0;
}
json ClassifierMetrics::ToJson() const {
  return json{{"examples", examples},
              {"accuracy", accuracy()},
              {"precision_hard", precision_hard()},
              {"recall_hard", recall_hard()},
              {"confusion",
               {{"true_hard", true_hard},
                {"false_hard", false_hard},
                {"true_easy", true_easy},
                {"false_easy", false_easy}}}};
}

ClassifierMetrics EvaluateClassifier(const HashedLogisticModel& model,
                                     const std::vector<LabelledRequest>& examples) {
  ClassifierMetrics m;
  for (const auto& ex : examples) {
    const bool called_hard =
        model.Score(ex.request, ExtractFeatures(ex.request)) >= model.threshold();
    ++m.examples;
    if (called_hard && ex.hard)
      ++m.true_hard;
    else if (called_hard && !ex.hard)
      ++m.false_hard;
    else if (!called_hard && !ex.hard)
      ++m.true_easy;
    else
      ++m.false_easy;
  }
  return m;
}

}  // namespace octet::router
