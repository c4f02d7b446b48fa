// The request-difficulty classifier: logistic regression over a few dense
// request features (length, turns, tools, tool-call depth, code/math, script)
// plus hashed word 1- and 2-grams of the last user message, the system prompt
// and the tool names. score = sigmoid(w . x) is the probability that a request
// is "hard" (should go to the large pool). Scoring one request takes a few
// microseconds; the weights live in a JSON file a policy points at and
// `octet route train-classifier` writes.
//
// Weights file (JSON): {"format": "octet-router-classifier", "version": 1,
//   "type": "hashed_logistic", "hash_bits": B, "features": [dense feature names],
//   "dense": [w per dense feature], "hashed": [[bucket, w], ...] (non-zero only),
//   "threshold": t, "training": {...what it was fitted on and its held-out metrics}}.
// Loading checks that the dense feature names are exactly the ones this build
// computes, so a stale file is an error rather than silently wrong scores.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "octet/base/json.h"
#include "octet/base/status.h"
#include "octet/router/request_features.h"

namespace octet::router {

// A request as the classifier sees it: dense features and hashed n-gram buckets.
struct ClassifierInput {
  std::vector<float> dense;       // DenseFeatureNames().size() values
  std::vector<uint32_t> buckets;  // hashed n-grams (may repeat)
  float bucket_value = 0;         // each bucket's value: 1/sqrt(#buckets)
};

// Names of the dense features, in the order of ClassifierInput::dense.
const std::vector<std::string>& DenseFeatureNames();

// Builds the classifier input of a request; `hash_bits` sets the bucket range.
ClassifierInput MakeClassifierInput(const nlohmann::json& request, const RequestFeatures& features,
                                    int hash_bits);

class HashedLogisticModel {
 public:
  static constexpr int kDefaultHashBits = 18;

  HashedLogisticModel() : HashedLogisticModel(kDefaultHashBits) {}
  explicit HashedLogisticModel(int hash_bits);

  // Reads and checks a weights file; errors name the file and what is wrong.
  static Result<HashedLogisticModel> Load(const std::string& path);
  static Result<HashedLogisticModel> FromJson(const nlohmann::json& doc, const std::string& where);
  nlohmann::json ToJson() const;
  Status Save(const std::string& path) const;

  // Probability in [0, 1] that the request is hard.
  double Score(const ClassifierInput& input) const;
  double Score(const nlohmann::json& request, const RequestFeatures& features) const;

  int hash_bits() const { return hash_bits_; }
  double threshold() const { return threshold_; }
  void set_threshold(double t) { threshold_ = t; }
  const nlohmann::json& training_info() const { return training_info_; }
  void set_training_info(nlohmann::json info) { training_info_ = std::move(info); }

  std::vector<float>& dense_weights() { return dense_; }
  std::vector<float>& hashed_weights() { return hashed_; }
  const std::vector<float>& dense_weights() const { return dense_; }
  const std::vector<float>& hashed_weights() const { return hashed_; }

 private:
  int hash_bits_;
  double threshold_ = 0.5;
  std::vector<float> dense_;   // DenseFeatureNames().size()
  std::vector<float> hashed_;  // 2^hash_bits
  nlohmann::json training_info_ = nlohmann::json::object();
};

// One labelled request from a JSONL line:
//   {"id": "...", "label": "hard"|"easy", "request": {...OpenAI chat request...}}
struct LabelledRequest {
  std::string id;
  bool hard = false;
  nlohmann::json request;
};

// Reads a labelled JSONL file; an error names the file and line.
Result<std::vector<LabelledRequest>> ReadLabelledRequests(const std::string& path);

// The deterministic held-out split: an example is held out when
// Fnv1a64(id) mod 1000 < holdout_fraction * 1000.
bool IsHeldOut(const std::string& id, double holdout_fraction);

struct TrainOptions {
  int hash_bits = HashedLogisticModel::kDefaultHashBits;
  int iterations = 400;  // full-batch AdaGrad steps (deterministic: no shuffling)
  double learning_rate = 0.5;
  double l2 = 1e-3;  // per-example L2 strength on every weight except the bias
};

// Fits a model on `examples` (all of them). Deterministic for given inputs.
HashedLogisticModel TrainClassifier(const std::vector<LabelledRequest>& examples,
                                    const TrainOptions& options);

struct ClassifierMetrics {
  int examples = 0;
  int true_hard = 0, false_hard = 0, true_easy = 0, false_easy = 0;
  double accuracy() const;
  double precision_hard() const;  // of the requests called hard, how many are
  double recall_hard() const;     // of the hard requests, how many were called hard
  nlohmann::json ToJson() const;
};

ClassifierMetrics EvaluateClassifier(const HashedLogisticModel& model,
                                     const std::vector<LabelledRequest>& examples);

}  // namespace octet::router
