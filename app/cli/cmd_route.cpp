// `octet route`: the request router (shared/docs/CLI.md, Routing).
//
//   octet route --policy FILE.yaml --check [--json]
//   octet route --policy FILE.yaml [--host H] [--port P] [--threads N]
//   octet route --policy FILE.yaml --classify [--json] < requests.json
//   octet route train-classifier --data FILE.jsonl --out WEIGHTS.json [--holdout F] [--json]
//   octet route plan [--policy FILE.yaml] [--fraction 0.25,0.5] [--requests FILE] ... [--json]
#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <iostream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "command.h"
#include "octet/base/api_key.h"
#include "octet/base/args.h"
#include "octet/base/file_util.h"
#include "octet/base/json.h"
#include "octet/base/log.h"
#include "octet/router/capacity.h"
#include "octet/router/classifier.h"
#include "octet/router/gateway.h"
#include "octet/router/policy.h"
#include "octet/router/router.h"

namespace octet::cli {
namespace {

using nlohmann::json;
using namespace octet::router;

std::string Dump(const json& j, int indent = -1) {
  return j.dump(indent, ' ', false, json::error_handler_t::replace);
}

int UsageError(const std::string& message) {
  std::cerr << message << "\n";
  return kExitUsage;
}

// --check: validate and report every error as FILE:LINE:COL: message.
int CheckPolicy(const std::string& path, bool as_json) {
  const PolicyParseResult r = LoadPolicyFile(path);
  if (as_json) {
    json errors = json::array();
    for (const auto& e : r.errors)
      errors.push_back({{"file", e.file},
                        {"line", e.line},
                        {"column", e.column},
                        {"message", e.message},
                        {"text", e.ToString()}});
    json doc{{"valid", r.ok()}, {"errors", errors}};
    if (r.ok()) {
      json pools = json::array();
      for (const auto& p : r.policy->pools) pools.push_back(p.name);
      json routes = json::array();
      for (const auto& rt : r.policy->routes) routes.push_back(rt.name);
      doc["pools"] = pools;
      doc["routes"] = routes;
    }
    std::cout << Dump(doc) << "\n";
  }
  if (!r.ok()) {
    for (const auto& e : r.errors) std::cerr << e.ToString() << "\n";
    return kExitFailure;
  }
  std::cerr << path << ": ok (" << r.policy->pools.size() << " pools, "
            << r.policy->classifiers.size() << " classifiers, " << r.policy->routes.size()
            << " routes)\n";
  return kExitOk;
}

// Job replicas have no address in --classify and plan (nothing is contacted):
// a reserved .invalid name stands in so the policy can be installed.
Result<std::string> OfflineJobResolver(const std::string& job) {
  return std::string("http://") + job + ".job.invalid:1";
}

int Classify(const std::string& path, bool as_json) {
  const PolicyParseResult r = LoadPolicyFile(path);
  if (!r.ok()) {
    for (const auto& e : r.errors) std::cerr << e.ToString() << "\n";
    return kExitFailure;
  }
  RouterOptions opts;
  opts.active_health_checks = false;
  opts.job_resolver = OfflineJobResolver;
  auto router = Router::Create(r.policy, opts);
  if (!router.ok()) {
    std::cerr << "octet route: " << router.status().message() << "\n";
    return kExitFailure;
  }
  std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  json requests = json::parse(input, nullptr, false);
  if (requests.is_discarded() || !requests.is_array())
    return UsageError("octet route --classify: stdin must be a JSON array of OpenAI chat requests");
  json out = json::array();
  for (size_t i = 0; i < requests.size(); ++i) {
    if (!requests[i].is_object())
      return UsageError("octet route --classify: element " + std::to_string(i) +
                        " of the input is not a JSON object");
    auto d = (*router)->Classify(requests[i], {}, /*assume_healthy=*/true);
    if (!d.ok()) {
      std::cerr << "octet route --classify: request " << i << ": " << d.status().message() << "\n";
      return kExitFailure;
    }
    json j = d->ToJson();
    if (as_json) {
      out.push_back(j);
    } else {
      std::cout << "route=" << d->route << " pool=" << d->pool << " score="
                << (d->score >= 0 ? std::to_string(d->score).substr(0, 5) : std::string("-"))
                << " reason=" << d->reason << "\n";
    }
  }
  if (as_json) std::cout << Dump(out) << "\n";
  return kExitOk;
}

int Serve(const std::string& path, const ArgParser& p) {
  // Usage errors (exit 2) before the policy is read.
  auto key = LoadApiKey(p.GetString("api-key"), p.GetString("api-key-file"));
  if (!key.ok()) return UsageError("octet route: " + key.status().message());
  if (p.GetFlag("api-key-health") && key->empty())
    return UsageError("octet route: --api-key-health needs --api-key or --api-key-file");
  if (p.Given("port")) {
    auto port = p.GetInt("port");
    if (!port.ok() || *port < 0 || *port > 65535)
      return UsageError("octet route: --port must be 0..65535");
  }
  if (p.Given("threads")) {
    auto t = p.GetInt("threads");
    if (!t.ok() || *t < 4 || *t > 4096) return UsageError("octet route: --threads must be 4..4096");
  }
  const PolicyParseResult r = LoadPolicyFile(path);
  if (!r.ok()) {
    for (const auto& e : r.errors) std::cerr << e.ToString() << "\n";
    return kExitFailure;
  }
  GatewayOptions gopts = GatewayOptionsFromPolicy(r.policy->gateway);
  if (p.Given("host")) gopts.host = p.GetString("host");
  if (p.Given("port")) {
    auto port = p.GetInt("port");
    if (!port.ok() || *port < 0 || *port > 65535)
      return UsageError("octet route: --port must be 0..65535");
    gopts.port = static_cast<int>(*port);
  }
  if (p.Given("threads")) {
    auto t = p.GetInt("threads");
    if (!t.ok() || *t < 4 || *t > 4096) return UsageError("octet route: --threads must be 4..4096");
    gopts.threads = static_cast<int>(*t);
  }
  if (const char* tok = std::getenv("OCTET_ROUTER_ADMIN_TOKEN")) gopts.admin_token = tok;
  gopts.api_key = *key;
  gopts.api_key_health = p.GetFlag("api-key-health");

  // Signals are taken synchronously by this thread; block them before any
  // other thread starts so none of those receives them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  auto router = Router::Create(r.policy);
  if (!router.ok()) {
    std::cerr << "octet route: " << router.status().message() << "\n";
    return kExitFailure;
  }
  auto gateway = Gateway::Start(router->get(), gopts);
  if (!gateway.ok()) {
    std::cerr << "octet route: " << gateway.status().message() << "\n";
    return kExitFailure;
  }
  std::unique_ptr<PolicyFileWatcher> watcher;
  if (r.policy->gateway.watch)
    watcher = std::make_unique<PolicyFileWatcher>(router->get(), path,
                                                  r.policy->gateway.watch_interval_ms);
  std::cerr << "octet route: serving " << path << " on http://" << gopts.host << ":"
            << (*gateway)->port() << " (SIGHUP reloads, SIGINT/SIGTERM stop)\n";
  if (p.GetFlag("json")) {
    // One ready line on stdout for scripts and supervisors.
    const std::string base = "http://" + gopts.host + ":" + std::to_string((*gateway)->port());
    std::cout << Dump(json{{"event", "ready"},
                           {"policy", path},
                           {"url", base},
                           {"endpoints",
                            {{"chat_completions", base + "/v1/chat/completions"},
                             {"completions", base + "/v1/completions"},
                             {"models", base + "/v1/models"},
                             {"health", base + "/health"},
                             {"metrics", base + "/metrics"}}},
                           {"api_key_required", !gopts.api_key.empty()}})
              << std::endl;
  }
  while (true) {
    timespec tick{1, 0};
    const int sig = sigtimedwait(&signals, nullptr, &tick);
    if (sig == SIGHUP) {
      if (watcher) {
        watcher->CheckNow();
      } else {
        const PolicyParseResult nr = LoadPolicyFile(path);
        if (!nr.ok()) {
          for (const auto& e : nr.errors) std::cerr << e.ToString() << "\n";
          std::cerr << "octet route: policy not reloaded; the running policy stays\n";
        } else if (Status s = (*router)->ApplyPolicy(nr.policy); !s.ok()) {
          std::cerr << "octet route: " << s.message() << "\n";
        }
      }
    } else if (sig == SIGINT || sig == SIGTERM) {
      std::cerr << "octet route: stopping\n";
      break;
    }
  }
  watcher.reset();
  (*gateway)->Stop();
  return kExitOk;
}

int TrainClassifierCommand(const std::vector<std::string>& args) {
  ArgParser p(
      "octet route train-classifier",
      "Fits the request-difficulty classifier (logistic regression over hashed n-grams and\n"
      "request features) on labelled JSONL ({\"id\", \"label\": \"hard\"|\"easy\", \"request\"})\n"
      "and writes its weights. A deterministic held-out split (by id hash) is left out of\n"
      "training and the metrics of \"hard\" on it are reported.");
  p.Option("data", "FILE.jsonl", "labelled requests");
  p.Option("out", "FILE.json", "where to write the weights");
  p.Option("holdout", "F", "fraction of examples held out for evaluation", "0.2");
  p.Option("iterations", "N", "full-batch training steps", "400");
  p.Option("learning-rate", "X", "AdaGrad learning rate", "0.5");
  p.Option("l2", "X", "L2 regularisation strength", "0.001");
  p.Option("hash-bits", "B", "n-gram hash buckets = 2^B", "18");
  p.Option("threshold", "T", "score at or above which a request is called hard", "0.5");
  p.Flag("json", "print one JSON document on stdout");
  if (Status s = p.Parse(args); !s.ok()) return UsageError(s.message());
  if (p.help_requested()) {
    std::cout << p.Usage();
    return kExitOk;
  }
  if (!p.Given("data") || !p.Given("out"))
    return UsageError("octet route train-classifier: --data and --out are required");
  auto holdout = p.GetDouble("holdout");
  auto iterations = p.GetInt("iterations");
  auto lr = p.GetDouble("learning-rate");
  auto l2 = p.GetDouble("l2");
  auto bits = p.GetInt("hash-bits");
  auto threshold = p.GetDouble("threshold");
  if (!holdout.ok() || *holdout < 0 || *holdout >= 1)
    return UsageError("octet route train-classifier: --holdout must be in [0, 1)");
  if (!iterations.ok() || *iterations < 1 || *iterations > 100000)
    return UsageError("octet route train-classifier: --iterations must be 1..100000");
  if (!lr.ok() || !(*lr > 0))
    return UsageError("octet route train-classifier: --learning-rate must be > 0");
  if (!l2.ok() || !(*l2 >= 0)) return UsageError("octet route train-classifier: --l2 must be >= 0");
  if (!bits.ok() || *bits < 8 || *bits > 24)
    return UsageError("octet route train-classifier: --hash-bits must be 8..24");
  if (!threshold.ok() || *threshold < 0 || *threshold > 1)
    return UsageError("octet route train-classifier: --threshold must be in [0, 1]");

  const std::string data = p.GetString("data");
  auto examples = ReadLabelledRequests(data);
  if (!examples.ok()) {
    std::cerr << "octet route train-classifier: " << examples.status().message() << "\n";
    return kExitUsage;
  }
  std::vector<LabelledRequest> train, held;
  for (auto& ex : *examples) (IsHeldOut(ex.id, *holdout) ? held : train).push_back(ex);
  if (train.empty()) {
    std::cerr << "octet route train-classifier: every example is held out; lower --holdout\n";
    return kExitUsage;
  }
  TrainOptions opts;
  opts.iterations = static_cast<int>(*iterations);
  opts.learning_rate = *lr;
  opts.l2 = *l2;
  opts.hash_bits = static_cast<int>(*bits);
  HashedLogisticModel model = TrainClassifier(train, opts);
  model.set_threshold(*threshold);
  const ClassifierMetrics train_m = EvaluateClassifier(model, train);
  const ClassifierMetrics held_m = EvaluateClassifier(model, held);
  json info{{"data", BaseName(data)},
            {"examples", examples->size()},
            {"train_examples", train.size()},
            {"heldout_examples", held.size()},
            {"holdout_fraction", *holdout},
            {"split", "held out when fnv1a64(id) % 1000 < holdout * 1000"},
            {"iterations", opts.iterations},
            {"learning_rate", opts.learning_rate},
            {"l2", opts.l2},
            {"train_metrics", train_m.ToJson()},
            {"heldout_metrics", held_m.ToJson()}};
  model.set_training_info(info);
  if (Status s = model.Save(p.GetString("out")); !s.ok()) {
    std::cerr << "octet route train-classifier: " << s.message() << "\n";
    return kExitFailure;
  }
  char line[256];
  std::snprintf(line, sizeof line,
                "trained on %zu requests, held out %zu: accuracy %.3f, precision(hard) %.3f, "
                "recall(hard) %.3f (train accuracy %.3f)\n",
                train.size(), held.size(), held_m.accuracy(), held_m.precision_hard(),
                held_m.recall_hard(), train_m.accuracy());
  std::cerr << line << "weights written to " << p.GetString("out") << "\n";
  if (p.GetFlag("json")) std::cout << Dump(info) << "\n";
  return kExitOk;
}

// "a=1,b=2" -> {a: "1", b: "2"}.
Result<std::map<std::string, std::string>> ParsePairs(const std::string& flag,
                                                      const std::vector<std::string>& items) {
  std::map<std::string, std::string> out;
  for (const auto& it : items) {
    const size_t eq = it.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == it.size())
      return InvalidArgumentError("--" + flag + " takes POOL=VALUE pairs, got '" + it + "'");
    out[it.substr(0, eq)] = it.substr(eq + 1);
  }
  return out;
}

int PlanCommand(const std::vector<std::string>& args) {
  ArgParser p(
      "octet route plan",
      "Capacity model: the aggregate throughput gain of routing a fraction f of requests\n"
      "to the large pool, lambda_max(f) = min(C_large / f, C_small / (1 - f)), relative to\n"
      "large replicas only on the same nodes, and which pool is the bottleneck. Pool\n"
      "sizes and per-replica request rates come from the policy's pools (capacity:) or\n"
      "the flags below (rates measured with `octet bench`).");
  p.Option("policy", "FILE.yaml", "routing policy with the two pools");
  p.Option("large", "POOL", "the large pool (default: the one with most nodes per replica)");
  p.Option("small", "POOL", "the small pool (default: the other one)");
  p.Option("fraction", "F,...", "fractions of requests sent to the large pool", "0.25,0.5");
  p.Option("requests", "FILE",
           "estimate f by classifying these requests with the policy (a JSON "
           "array, or labelled JSONL)");
  p.Option("replicas", "POOL=N,...", "replica counts (override the policy)");
  p.Option("nodes-per-replica", "POOL=N,...", "nodes per replica (override the policy)");
  p.Option("rate", "POOL=R,...", "requests/s per replica (override the policy)");
  p.Option("total-nodes", "N", "nodes for the large-only baseline (default: the pools' nodes)");
  p.Flag("json", "print one JSON document on stdout");
  if (Status s = p.Parse(args); !s.ok()) return UsageError(s.message());
  if (p.help_requested()) {
    std::cout << p.Usage();
    return kExitOk;
  }
  std::map<std::string, CapacityPool> pools;
  std::vector<std::string> order;
  std::shared_ptr<const RoutingPolicy> policy;
  if (p.Given("policy")) {
    const PolicyParseResult r = LoadPolicyFile(p.GetString("policy"));
    if (!r.ok()) {
      for (const auto& e : r.errors) std::cerr << e.ToString() << "\n";
      return kExitFailure;
    }
    policy = r.policy;
    for (const auto& ps : policy->pools) {
      CapacityPool cp;
      cp.name = ps.name;
      cp.replicas = static_cast<int>(ps.replicas.size());
      cp.nodes_per_replica = ps.capacity.nodes_per_replica;
      cp.requests_per_s = ps.capacity.requests_per_s;
      pools[ps.name] = cp;
      order.push_back(ps.name);
    }
  }
  auto apply = [&](const char* flag, auto setter) -> Status {
    OCTET_ASSIGN_OR_RETURN(auto pairs, ParsePairs(flag, p.GetList(flag)));
    for (const auto& [name, value] : pairs) {
      if (!pools.count(name)) {
        if (policy)
          return InvalidArgumentError("--" + std::string(flag) + ": no pool '" + name +
                                      "' in the policy");
        pools[name].name = name;
        order.push_back(name);
      }
      char* end = nullptr;
      errno = 0;
      const double v = std::strtod(value.c_str(), &end);
      if (end != value.c_str() + value.size() || errno == ERANGE || !(v >= 0))
        return InvalidArgumentError("--" + std::string(flag) + ": '" + value +
                                    "' is not a number >= 0");
      setter(pools[name], v);
    }
    return Status();
  };
  for (Status s :
       {apply("replicas", [](CapacityPool&c, double v) { c.replicas = static_cast<int>(v); }),
        apply("nodes-per-replica",
              [](CapacityPool&c, double v) { c.nodes_per_replica = static_cast<int>(v); }),
        apply("rate", [](CapacityPool&c, double v) { c.requests_per_s = v; })}) {
    if (!s.ok()) return UsageError("octet route plan: " + s.message());
  }
  if (pools.size() < 2)
    return UsageError(
        "octet route plan: two pools are needed (--policy, or --replicas/--rate/"
        "--nodes-per-replica for a large and a small pool)");
  std::string large = p.GetString("large"), small = p.GetString("small");
  if (!large.empty() && !pools.count(large))
    return UsageError("octet route plan: no pool '" + large + "'");
  if (!small.empty() && !pools.count(small))
    return UsageError("octet route plan: no pool '" + small + "'");
  if (large.empty()) {
    int best = -1;
    bool tie = false;
    for (const auto& n : order) {
      if (n == small) continue;
      if (pools[n].nodes_per_replica > best) {
        best = pools[n].nodes_per_replica;
        large = n;
        tie = false;
      } else if (pools[n].nodes_per_replica == best) {
        tie = true;
      }
    }
    if (tie)
      return UsageError(
          "octet route plan: pools have equal nodes per replica; say which is large with --large");
  }
  if (small.empty()) {
    std::vector<std::string> others;
    for (const auto& n : order)
      if (n != large) others.push_back(n);
    if (others.size() != 1)
      return UsageError("octet route plan: more than two pools; say which is small with --small");
    small = others[0];
  }
  if (large == small) return UsageError("octet route plan: --large and --small name the same pool");

  std::vector<double> fractions;
  for (const auto& f : p.GetList("fraction")) {
    char* end = nullptr;
    const double v = std::strtod(f.c_str(), &end);
    if (end != f.c_str() + f.size() || !(v >= 0 && v <= 1))
      return UsageError("octet route plan: --fraction values must be in [0, 1], got '" + f + "'");
    fractions.push_back(v);
  }
  json estimate;
  if (p.Given("requests")) {
    if (!policy)
      return UsageError("octet route plan: --requests needs --policy (its routes classify them)");
    const std::string path = p.GetString("requests");
    std::vector<json> requests;
    auto text = ReadFileToString(path);
    if (!text.ok()) return UsageError("octet route plan: " + text.status().message());
    json arr = json::parse(*text, nullptr, false);
    if (!arr.is_discarded() && arr.is_array()) {
      for (auto& r : arr) requests.push_back(r);
    } else {
      auto labelled = ReadLabelledRequests(path);
      if (!labelled.ok()) return UsageError("octet route plan: " + labelled.status().message());
      for (auto& l : *labelled) requests.push_back(l.request);
    }
    RouterOptions opts;
    opts.active_health_checks = false;
    opts.job_resolver = OfflineJobResolver;
    auto router = Router::Create(policy, opts);
    if (!router.ok()) return UsageError("octet route plan: " + router.status().message());
    size_t to_large = 0, counted = 0;
    for (const auto& r : requests) {
      if (!r.is_object()) continue;
      auto d = (*router)->Classify(r, {}, true);
      if (!d.ok()) continue;
      ++counted;
      if (d->pool == large) ++to_large;
    }
    if (counted == 0)
      return UsageError("octet route plan: no request in " + path + " could be classified");
    const double f = static_cast<double>(to_large) / static_cast<double>(counted);
    estimate = {{"requests", counted}, {"to_large", to_large}, {"fraction_large", f}};
    fractions.push_back(f);
  }
  int total_nodes = 0;
  if (p.Given("total-nodes")) {
    auto t = p.GetInt("total-nodes");
    if (!t.ok() || *t < 1) return UsageError("octet route plan: --total-nodes must be >= 1");
    total_nodes = static_cast<int>(*t);
  }
  auto plan = PlanCapacity(pools[large], pools[small], fractions, total_nodes);
  if (!plan.ok()) {
    std::cerr << "octet route plan: " << plan.status().message() << "\n";
    return kExitUsage;
  }
  std::string text = plan->ToText();
  if (!estimate.is_null()) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "\nthe policy sends %zu of %zu requests (f = %.3f) to '%s'\n",
                  estimate["to_large"].get<size_t>(), estimate["requests"].get<size_t>(),
                  estimate["fraction_large"].get<double>(), large.c_str());
    text += buf;
  }
  if (p.GetFlag("json")) {
    json doc = plan->ToJson();
    if (!estimate.is_null()) doc["estimate"] = estimate;
    std::cout << Dump(doc) << "\n";
    std::cerr << text;
  } else {
    std::cout << text;
  }
  return kExitOk;
}

}  // namespace

int RunRoute(const std::vector<std::string>& args) {
  if (!args.empty()) {
    if (const Subcommand* s = FindSubcommand(RouteSubcommands(), args[0]))
      return s->run(std::vector<std::string>(args.begin() + 1, args.end()));
  }

  ArgParser p("octet route",
              "The request router: an OpenAI-compatible gateway that classifies each request and\n"
              "sends it to a pool of model replicas per a YAML policy (resources/routing/\n"
              "example-policy.yaml documents every key).\n\n"
              "  octet route --policy FILE.yaml --check        validate (errors as FILE:LINE:COL)\n"
              "  octet route --policy FILE.yaml [--port P]     run the gateway\n"
              "  octet route --policy FILE.yaml --classify --json < requests.json\n"
              "  octet route train-classifier --help           fit the classifier weights\n"
              "  octet route plan --help                       capacity model");
  p.Option("policy", "FILE.yaml", "the routing policy");
  p.Flag("check", "validate the policy and exit");
  p.Flag("classify", "print the decision for each request of a JSON array on stdin");
  p.Option("host", "H", "listen address (default: the policy's gateway.host)");
  p.Option("port", "P", "listen port, 0 for any (default: the policy's gateway.port)");
  p.Option("threads", "N", "HTTP worker threads (default: the policy's gateway.threads)");
  p.Option("api-key", "KEY",
           "require \"Authorization: Bearer KEY\" on every request but /health (401 without)");
  p.Option("api-key-file", "FILE", "as --api-key, the key being FILE's first line");
  p.Flag("api-key-health", "require the key on /health too");
  p.Flag("json", "print one JSON document on stdout");
  if (Status s = p.Parse(args); !s.ok()) return UsageError(s.message());
  if (p.help_requested()) {
    std::cout << p.Usage();
    return kExitOk;
  }
  if (!p.Given("policy"))
    return UsageError("octet route: --policy FILE.yaml is required (see --help)");
  if (p.GetFlag("check") && p.GetFlag("classify"))
    return UsageError("octet route: --check and --classify are exclusive");
  const std::string path = p.GetString("policy");
  if (p.GetFlag("check")) return CheckPolicy(path, p.GetFlag("json"));
  if (p.GetFlag("classify")) return Classify(path, p.GetFlag("json"));
  return Serve(path, p);
}

const std::vector<Subcommand>& RouteSubcommands() {
  static const std::vector<Subcommand> table = {{"train-classifier", TrainClassifierCommand},
                                                {"plan", PlanCommand}};
  return table;
}

}  // namespace octet::cli
