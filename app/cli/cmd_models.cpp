// `octet models` (the models in the Hugging Face cache, with sizes) and
// `octet models rm REPO`; and the repo-id hook of `--model`: generate, chat,
// serve and plan are registered through WithRepoModel, which turns
// `--model ORG/NAME[@REV]` into the cached snapshot folder when the value is
// not an existing path — so the commands themselves only ever see folders.
#include <iostream>

#include "command.h"
#include "node_models_json.h"
#include "octet/app/agent_client.h"
#include "octet/app/cluster_profile.h"
#include "octet/app/hub.h"
#include "octet/base/args.h"
#include "octet/base/file_util.h"
#include "octet/base/json.h"

namespace octet::cli {

nlohmann::json NodeModelJson(const app::NodeModel& m) {
  return {{"repo", m.repo},
          {"commit", m.commit},
          {"refs", m.refs},
          {"snapshot", m.snapshot_dir},
          {"files", m.files},
          {"bytes", m.bytes},
          {"incomplete_files", m.incomplete_files},
          {"missing_files", m.missing_files}};
}

void AddNodeModelsJson(const app::NodeModels& models, nlohmann::json* node) {
  (*node)["models_dir"] = models.models_dir;
  nlohmann::json list = nlohmann::json::array();
  for (const auto& m : models.models) list.push_back(NodeModelJson(m));
  (*node)["models"] = std::move(list);
}

namespace {

int ListModels(const app::hub::HubConfig& c, bool json) {
  auto models = app::hub::ListLocalModels(c);
  if (!models.ok()) {
    std::cerr << "octet models: error: " << models.status().message() << "\n";
    return kExitFailure;
  }
  if (json) {
    nlohmann::json j = {{"cache_dir", c.cache_dir}, {"models", nlohmann::json::array()}};
    for (const auto& m : *models) {
      j["models"].push_back({{"repo", m.repo},
                             {"commit", m.commit},
                             {"refs", m.refs},
                             {"snapshot", m.snapshot_dir},
                             {"files", m.files},
                             {"bytes", m.bytes},
                             {"repo_bytes", m.repo_bytes},
                             {"incomplete_files", m.incomplete_files},
                             {"missing_files", m.missing_files}});
    }
    std::cout << j.dump(2) << "\n";
    return kExitOk;
  }
  if (models->empty()) {
    std::cout << "no models in " << c.cache_dir << " (octet pull ORG/NAME downloads one)\n";
    return kExitOk;
  }
  std::printf("%-44s %-12s %-10s %6s %10s  %s\n", "REPO", "REVISION", "COMMIT", "FILES", "SIZE",
              "NOTES");
  for (const auto& m : *models) {
    std::string refs;
    for (const auto& r : m.refs) refs += (refs.empty() ? "" : ",") + r;
    std::string notes;
    if (m.commit.empty()) notes = "nothing finished yet";
    if (m.incomplete_files > 0) {
      notes += (notes.empty() ? "" : "; ") + std::to_string(m.incomplete_files) +
               " partial file(s): `octet pull " + m.repo + "` resumes";
    }
    if (m.missing_files > 0) {
      notes += (notes.empty() ? "" : "; ") + std::to_string(m.missing_files) + " missing blob(s)";
    }
    std::printf("%-44s %-12s %-10s %6d %10s  %s\n", m.repo.c_str(),
                refs.empty() ? "-" : refs.c_str(), m.commit.substr(0, 10).c_str(), m.files,
                FormatBytes(double(m.commit.empty() ? m.repo_bytes : m.bytes)).c_str(),
                notes.c_str());
  }
  std::printf("(cache: %s)\n", c.cache_dir.c_str());
  return kExitOk;
}

// `octet models --cluster NAME`: which node holds which model (each agent's
// model store).
int ListClusterModels(const std::string& cluster, const std::string& config_dir, bool json) {
  auto profile = app::LoadProfile(cluster, config_dir);
  if (!profile.ok()) {
    std::cerr << "octet models: --cluster " << cluster << ": " << profile.status().message()
              << "\n";
    return kExitFailure;
  }
  nlohmann::json nodes = nlohmann::json::array();
  int unreachable = 0;
  if (!json) {
    std::printf("%-16s %-40s %-12s %-10s %6s %10s  %s\n", "NODE", "REPO", "REVISION", "COMMIT",
                "FILES", "SIZE", "NOTES");
  }
  for (size_t i = 0; i < profile->nodes.size(); ++i) {
    const auto& node = profile->nodes[i];
    Result<app::NodeModels> models = UnavailableError("");
    auto ep = app::EndpointFor(*profile, i);
    if (!ep.ok()) {
      models = ep.status();
    } else if (auto cl = app::AgentClient::Create(*ep); !cl.ok()) {
      models = cl.status();
    } else {
      models = (*cl)->ListModels(Deadline::AfterMs(15'000));
    }
    nlohmann::json jn = {{"name", node.name}, {"address", node.address}};
    if (!models.ok()) {
      ++unreachable;
      jn["error"] = models.status().message();
      if (!json)
        std::printf("%-16s error: %s\n", node.name.c_str(), models.status().message().c_str());
      nodes.push_back(jn);
      continue;
    }
    AddNodeModelsJson(*models, &jn);
    for (const auto& m : models->models) {
      if (!json) {
        std::string refs;
        for (const auto& r : m.refs) refs += (refs.empty() ? "" : ",") + r;
        std::string notes;
        if (m.incomplete_files > 0)
          notes += std::to_string(m.incomplete_files) + " partial file(s)";
        if (m.missing_files > 0) {
          notes +=
              (notes.empty() ? "" : "; ") + std::to_string(m.missing_files) + " missing blob(s)";
        }
        std::printf("%-16s %-40s %-12s %-10s %6u %10s  %s\n", node.name.c_str(), m.repo.c_str(),
                    refs.empty() ? "-" : refs.c_str(), m.commit.substr(0, 10).c_str(), m.files,
                    FormatBytes(double(m.bytes)).c_str(), notes.c_str());
      }
    }
    if (!json && models->models.empty()) {
      std::printf(
          "%-16s (no models in %s)\n", node.name.c_str(),
          models->models_dir.empty() ? "its store: none configured" : models->models_dir.c_str());
    }
    nodes.push_back(jn);
  }
  if (json) std::cout << nlohmann::json{{"cluster", cluster}, {"nodes", nodes}}.dump(2) << "\n";
  return unreachable == 0 ? kExitOk : kExitFailure;
}

// `--model VALUE` / `--model=VALUE` in args: its index and value, or -1.
int FindModelFlag(const std::vector<std::string>& args, std::string* value, bool* inline_form) {
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--") break;
    if (args[i] == "--model" && i + 1 < args.size()) {
      *value = args[i + 1];
      *inline_form = false;
      return static_cast<int>(i);
    }
    if (args[i].rfind("--model=", 0) == 0) {
      *value = args[i].substr(8);
      *inline_form = true;
      return static_cast<int>(i);
    }
  }
  return -1;
}

bool HasFlag(const std::vector<std::string>& args, const std::string& name) {
  for (const auto& a : args) {
    if (a == "--" + name || a.rfind("--" + name + "=", 0) == 0) return true;
  }
  return false;
}

// `program`: "octet generate". required: a repo id that is not pulled is an
// error (generate/chat/serve); otherwise the value passes through (plan also
// takes catalog names).
int RunWithRepoModel(const std::vector<std::string>& args, CommandFn run, const char* program,
                     bool required, bool name_served_model) {
  std::string value;
  bool inline_form = false;
  const int at = FindModelFlag(args, &value, &inline_form);
  if (at < 0 || PathExists(value) || !app::hub::LooksLikeRepoRef(value)) return run(args);
  const auto ref = *app::hub::ParseRepoRef(value);
  const app::hub::HubConfig c = app::hub::HubConfig::FromEnvironment();
  auto snap = app::hub::ResolveSnapshot(c, ref);
  if (!snap.ok()) {
    if (!required) return run(args);
    std::cerr << program << ": error: --model " << value << " is neither a folder nor a pulled "
              << "model: " << snap.status().message() << "\n";
    return kExitFailure;
  }
  std::vector<std::string> resolved = args;
  if (inline_form) {
    resolved[at] = "--model=" + *snap;
  } else {
    resolved[at + 1] = *snap;
  }
  // The served model id clients send is the repo id, as vLLM does.
  if (name_served_model && !HasFlag(args, "served-model-name")) {
    resolved.push_back("--served-model-name");
    resolved.push_back(ref.repo);
  }
  return run(resolved);
}

}  // namespace

int RunGenerateWithRepoModel(const std::vector<std::string>& args) {
  return RunWithRepoModel(args, RunGenerate, "octet generate", true, false);
}
int RunChatWithRepoModel(const std::vector<std::string>& args) {
  return RunWithRepoModel(args, RunChat, "octet chat", true, false);
}
int RunServeWithRepoModel(const std::vector<std::string>& args) {
  return RunWithRepoModel(args, RunServe, "octet serve", true, true);
}
int RunPlanWithRepoModel(const std::vector<std::string>& args) {
  return RunWithRepoModel(args, RunPlan, "octet plan", false, false);
}

int RunModels(const std::vector<std::string>& args) {
  ArgParser p("octet models",
              "List the models in the Hugging Face cache ($HF_HUB_CACHE, $HF_HOME/hub or\n"
              "~/.cache/huggingface/hub) with their sizes; `octet models rm ORG/NAME` deletes one\n"
              "(every snapshot and blob of the repo).");
  p.Positional("[rm ORG/NAME]", "remove a model from the cache")
      .Option("cache-dir", "DIR", "the hub cache folder (default: from the environment)")
      .Option("cluster", "NAME",
              "list what each node of this saved cluster holds (its agent's "
              "model store) instead of this machine's cache")
      .Option("config-dir", "DIR", "where cluster profiles are (with --cluster)")
      .Flag("json", "print one JSON document on stdout");
  if (Status s = p.Parse(args); !s.ok()) {
    std::cerr << s.message() << "\n";
    return kExitUsage;
  }
  if (p.help_requested()) {
    std::cout << p.Usage();
    return kExitOk;
  }
  app::hub::HubConfig c = app::hub::HubConfig::FromEnvironment();
  if (p.Given("cache-dir")) c.cache_dir = p.GetString("cache-dir");
  const auto& words = p.positional();
  if (p.Given("cluster")) {
    if (!(words.empty() || (words.size() == 1 && words[0] == "list"))) {
      std::cerr << "octet models: --cluster lists only (octet models --cluster NAME)\n";
      return kExitUsage;
    }
    return ListClusterModels(p.GetString("cluster"), p.GetString("config-dir"), p.GetFlag("json"));
  }
  if (words.empty() || (words.size() == 1 && words[0] == "list")) {
    return ListModels(c, p.GetFlag("json"));
  }
  if ((words[0] == "rm" || words[0] == "remove") && words.size() == 2) {
    if (Status s = app::hub::RemoveLocalModel(c, words[1]); !s.ok()) {
      std::cerr << "octet models rm: error: " << s.message() << "\n";
      return s.code() == StatusCode::kInvalidArgument ? kExitUsage : kExitFailure;
    }
    if (p.GetFlag("json")) {
      std::cout << nlohmann::json{{"removed", words[1]}}.dump() << "\n";
    } else {
      std::cerr << "octet models rm: removed " << words[1] << " from " << c.cache_dir << "\n";
    }
    return kExitOk;
  }
  std::cerr << "octet models: expected no words, `list` or `rm ORG/NAME` (see octet models "
               "--help)\n";
  return kExitUsage;
}

// `list` and `rm` are words of RunModels' own parser (`octet models`, alone,
// lists too); the table names them for `octet help --commands`.
const std::vector<Subcommand>& ModelsSubcommands() {
  static const std::vector<Subcommand> table = {{"list",
                                                 [](const std::vector<std::string>& a) {
                                                   std::vector<std::string> words = {"list"};
                                                   words.insert(words.end(), a.begin(), a.end());
                                                   return RunModels(words);
                                                 }},
                                                {"rm", [](const std::vector<std::string>& a) {
                                                   std::vector<std::string> words = {"rm"};
                                                   words.insert(words.end(), a.begin(), a.end());
                                                   return RunModels(words);
                                                 }}};
  return table;
}

}  // namespace octet::cli
