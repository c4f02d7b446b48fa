// `octet deploy check|apply|watch|status|down`: a deployment file (instances of
// models on chosen nodes, a router in front) run through the cluster's
// agents. The file, placement and the agent work are octet/app/deployment.h;
// this is the command line. Contract: shared/docs/CLI.md.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <thread>

#include "command.h"
#include "octet/app/cluster_profile.h"
#include "octet/app/cluster_session.h"
#include "octet/app/deployment.h"
#include "octet/app/deployment_edit.h"
#include "octet/base/args.h"
#include "octet/base/file_util.h"
#include "octet/base/json.h"
#include "octet/router/policy.h"
#include "tp_launch.h"

#ifndef OCTET_SOURCE_RESOURCES_DIR
#define OCTET_SOURCE_RESOURCES_DIR ""
#endif

namespace octet::cli {
namespace {

using app::ClusterSession;
using nlohmann::json;

constexpr const char* kUsage =
    "usage: octet deploy <check|apply|watch|status|down> ...\n"
    "\n"
    "  check FILE --cluster NAME [--json]   the placement (replica -> nodes, memory per node)\n"
    "                                       and the capacity `octet route plan` predicts, or\n"
    "                                       the file's errors (FILE:LINE:COL); exit 1 on errors\n"
    "  apply FILE --cluster NAME [--json]   start every replica through the agents, then the\n"
    "                                       router; a changed file changes only what changed\n"
    "  watch FILE --cluster NAME            keep it as the file asks: apply again whenever a\n"
    "                                       replica or the router failed or is gone (restarted\n"
    "                                       on free nodes when its own are down; the router\n"
    "                                       follows) and whenever FILE changes; until\n"
    "                                       SIGINT/SIGTERM\n"
    "  status [NAME] --cluster NAME [--json]  what the agents run, per deployment\n"
    "  down NAME --cluster NAME             stop every replica and the router\n";

int UsageError(const std::string& program, const std::string& msg) {
  std::cerr << WithProgram(program, msg) << " (see " << program << " --help)\n";
  return kExitUsage;
}
int Failure(const std::string& program, const std::string& msg) {
  std::cerr << program << ": " << msg << "\n";
  return kExitFailure;
}

std::string CatalogDir() {
  if (const char* env = std::getenv("OCTET_MODEL_CATALOG"); env && *env) return env;
  if (auto exe = SelfExecutablePath(); exe.ok()) {
    const std::string installed = JoinPath(DirName(DirName(*exe)), "share/octet/models");
    if (IsDirectory(installed)) return installed;
  }
  return JoinPath(OCTET_SOURCE_RESOURCES_DIR, "models");
}

void AddClusterFlags(ArgParser& p) {
  p.Option("cluster", "NAME", "a saved cluster profile (octet cluster init / local)", "default");
  p.Option("config-dir", "DIR",
           "where profiles live (default: $OCTET_CONFIG_DIR or ~/.config/octet)");
  p.Option("timeout-ms", "MS", "how long to wait for the nodes to answer", "15000");
  p.Flag("json", "print one JSON document on stdout");
}

// A session on the profile's nodes, once each has answered (or the timeout).
// `cluster_token` (when given) gets the profile's token: router admin tokens derive from it.
Result<std::unique_ptr<ClusterSession>> OpenCluster(const ArgParser& p,
                                                    std::string* cluster_token = nullptr) {
  OCTET_ASSIGN_OR_RETURN(app::ClusterProfile profile,
                         app::LoadProfile(p.GetString("cluster"), p.GetString("config-dir")));
  if (profile.nodes.empty()) {
    return FailedPreconditionError("cluster '" + profile.name + "' has no nodes");
  }
  if (cluster_token) {
    OCTET_ASSIGN_OR_RETURN(app::AgentEndpoint endpoint, app::EndpointFor(profile, 0));
    *cluster_token = endpoint.token;
  }
  OCTET_ASSIGN_OR_RETURN(int64_t timeout, p.GetInt("timeout-ms"));
  app::ClusterSessionOptions so;
  so.refresh_interval_ms = 500;
  OCTET_ASSIGN_OR_RETURN(auto session, ClusterSession::Open(profile, so));
  session->WaitUntil(
      [](const app::ClusterSnapshot& s) {
        for (const auto& n : s.nodes) {
          if (n.state == app::NodeState::kConnecting) return false;
          if (n.state == app::NodeState::kUp && (!n.has_facts || !n.has_links)) return false;
        }
        return true;
      },
      Deadline::AfterMs(std::max<int64_t>(1000, timeout)));
  // A node whose first calls failed (an agent slow to accept on a loaded
  // machine) reads lost at once; the session keeps calling it, so it gets a
  // few more seconds before the command goes on without it.
  session->WaitUntil(
      [](const app::ClusterSnapshot& s) {
        for (const auto& n : s.nodes) {
          if (n.state != app::NodeState::kUp || !n.has_facts || !n.has_links) return false;
        }
        return true;
      },
      Deadline::AfterMs(std::min<int64_t>(3000, std::max<int64_t>(1000, timeout))));
  const app::ClusterSnapshot snap = session->Snapshot();
  size_t up = 0;
  for (const auto& n : snap.nodes) up += n.state == app::NodeState::kUp;
  if (up == 0) {
    return UnavailableError("no node of cluster '" + profile.name + "' answers (" +
                            (snap.nodes.empty()
                                 ? std::string("no nodes")
                                 : snap.nodes[0].name + ": " + snap.nodes[0].last_error) +
                            ")");
  }
  return session;
}

json PlacementJson(const app::Deployment& d, const app::Placement& pl) {
  json replicas = json::array();
  for (const auto& r : pl.replicas) {
    const app::DeployInstanceSpec* spec = d.Find(r.instance);
    json per_node = json::array();
    for (size_t k = 0; k < r.nodes.size(); ++k) {
      per_node.push_back({{"node", r.nodes[k]},
                          {"rank", k},
                          {"memory_bytes", r.memory_bytes[k]},
                          {"node_memory_bytes", r.node_memory[k]}});
    }
    replicas.push_back({{"name", r.replica},
                        {"instance", r.instance},
                        {"model", spec ? spec->model : ""},
                        {"tp", spec ? spec->tp : 0},
                        {"nodes", r.nodes},
                        {"memory", per_node}});
  }
  json j = {{"replicas", replicas},
            {"warnings", pl.warnings},
            {"errors", pl.errors},
            {"memory_note", pl.memory_note}};
  if (!pl.router_node.empty()) j["router_node"] = pl.router_node;
  return j;
}

void PrintPlacement(const app::Deployment& d, const app::Placement& pl) {
  std::printf("%-12s %-28s %3s  %-24s %s\n", "REPLICA", "MODEL", "TP", "NODES", "MEMORY PER NODE");
  for (const auto& r : pl.replicas) {
    const app::DeployInstanceSpec* spec = d.Find(r.instance);
    std::string nodes, mem;
    for (size_t k = 0; k < r.nodes.size(); ++k) {
      nodes += (k ? "," : "") + r.nodes[k];
      mem += (k ? "  " : "") + r.nodes[k] + " " +
             (r.memory_bytes[k] ? FormatBytes(double(r.memory_bytes[k])) : std::string("?")) +
             " of " + FormatBytes(double(r.node_memory[k]));
    }
    std::printf("%-12s %-28s %3d  %-24s %s\n", r.replica.c_str(),
                BaseName(spec ? spec->model : "").c_str(), spec ? spec->tp : 0, nodes.c_str(),
                mem.c_str());
  }
  if (!pl.router_node.empty()) std::printf("router on %s\n", pl.router_node.c_str());
  if (!pl.memory_note.empty()) std::printf("(%s)\n", pl.memory_note.c_str());
}

void PrintErrors(const app::DeploymentParseResult& r) {
  for (const auto& e : r.errors) std::cerr << e.ToString() << "\n";
}

json ErrorsJson(const app::DeploymentParseResult& r) {
  json errors = json::array();
  for (const auto& e : r.errors) {
    errors.push_back(
        {{"file", e.file}, {"line", e.line}, {"column", e.column}, {"message", e.message}});
  }
  return errors;
}

json ReplicaJson(const app::DeployedReplica& r) {
  json j = {{"name", r.replica}, {"model", r.model}, {"tp", r.tp},        {"nodes", r.nodes},
            {"state", r.state},  {"url", r.url},     {"job_id", r.job_id}};
  if (!r.error.empty()) j["error"] = r.error;
  return j;
}

json StatusJson(const std::vector<app::DeploymentStatus>& all) {
  json deps = json::array();
  for (const auto& d : all) {
    json instances = json::array();
    for (const auto& r : d.instances) instances.push_back(ReplicaJson(r));
    json j = {{"name", d.name}, {"instances", instances}};
    if (d.has_router) {
      j["router"] = {{"url", d.router.url},
                     {"node", d.router.nodes.empty() ? "" : d.router.nodes[0]},
                     {"state", d.router.state},
                     {"policy", d.router.model},
                     {"job_id", d.router.job_id}};
      if (!d.router.error.empty()) j["router"]["error"] = d.router.error;
    } else {
      j["router"] = nullptr;
    }
    deps.push_back(j);
  }
  return {{"deployments", deps}};
}

void PrintStatus(const std::vector<app::DeploymentStatus>& all) {
  if (all.empty()) std::printf("no deployment runs on this cluster\n");
  for (const auto& d : all) {
    std::printf("deployment %s\n", d.name.c_str());
    for (const auto& r : d.instances) {
      std::string nodes;
      for (const auto& n : r.nodes) nodes += (nodes.empty() ? "" : ",") + n;
      std::printf("  %-12s %-9s %-24s %s%s\n", r.replica.c_str(), r.state.c_str(), nodes.c_str(),
                  r.url.c_str(), r.error.empty() ? "" : ("  " + r.error).c_str());
    }
    if (d.has_router) {
      std::printf("  %-12s %-9s %-24s %s%s\n", "router", d.router.state.c_str(),
                  d.router.nodes.empty() ? "" : d.router.nodes[0].c_str(), d.router.url.c_str(),
                  d.router.error.empty() ? "" : ("  " + d.router.error).c_str());
    }
  }
}

// ---- check / apply ------------------------------------------------------------------

// The file's errors, or its router policy's (which carry their own
// FILE:LINE:COL), or a pool naming an instance the file does not have, said
// on stderr (and as JSON with `as_json`): kExitFailure; kExitOk when valid.
int CheckDeploymentFile(const std::string& prog, const app::DeploymentParseResult& parsed,
                        bool as_json) {
  if (!parsed.ok()) {
    if (as_json)
      std::cout << json{{"valid", false}, {"errors", ErrorsJson(parsed)}}.dump(2) << "\n";
    PrintErrors(parsed);
    return kExitFailure;
  }
  const app::Deployment& d = *parsed.deployment;
  if (!d.router.present) return kExitOk;
  const router::PolicyParseResult pr = router::LoadPolicyFile(d.router.policy);
  if (!pr.ok()) {
    for (const auto& e : pr.errors) std::cerr << e.ToString() << "\n";
    return Failure(prog, "the router's policy " + d.router.policy + " is not valid");
  }
  for (const auto& pool : pr.policy->pools) {
    if (!pool.instance.empty() && !d.Find(pool.instance)) {
      return Failure(prog, d.router.policy + ":" + std::to_string(pool.location.line) + ":" +
                               std::to_string(pool.location.column) + ": pool '" + pool.name +
                               "' names instance '" + pool.instance +
                               "', which the deployment does not have");
    }
  }
  return kExitOk;
}

int RunCheckOrApply(const std::vector<std::string>& args, bool apply) {
  const std::string prog = apply ? "octet deploy apply" : "octet deploy check";
  ArgParser p(prog, apply ? "Start a deployment file's replicas through the cluster's agents, "
                            "then its router; a changed file changes only what changed. "
                            "Ctrl-C while it waits for the replicas stops what it started."
                          : "Check a deployment file against a cluster: the placement table "
                            "(replica -> nodes, memory per node), the capacity `octet route "
                            "plan` predicts, or the errors (FILE:LINE:COL). Exit 1 on errors.");
  p.Positional("FILE", "the deployment file (YAML)");
  AddClusterFlags(p);
  if (!apply) {
    p.Option("bench-db", "FILE",
             "an `octet bench` run store: per-replica rates from its runs of each instance's "
             "model and TP degree (else the router policy's capacity)");
    p.Option("fraction", "F,...", "shares of requests sent to the large instance", "0.25,0.5");
  }
  if (apply) {
    p.Option("wait-ms", "MS", "how long every replica may take to be ready", "600000");
    p.Option("node-wait-ms", "MS",
             "how long a node that is not up (telemetry late, agent reconnecting) is waited for "
             "before the placement refuses it",
             "10000");
  }
  if (Status s = p.Parse(args); !s.ok()) return ParseUsageError(s);
  if (p.help_requested()) {
    std::cout << p.Usage();
    return kExitOk;
  }
  if (p.positional().size() != 1) return UsageError(prog, "give one deployment FILE");
  const bool as_json = p.GetFlag("json");
  const std::string file = p.positional()[0];
  const app::DeploymentParseResult parsed = app::LoadDeploymentFile(file);
  if (int code = CheckDeploymentFile(prog, parsed, as_json); code != kExitOk) return code;
  const app::Deployment& d = *parsed.deployment;
  std::string cluster_token;
  auto session = OpenCluster(p, &cluster_token);
  if (!session.ok()) return Failure(prog, session.status().message());
  const app::ClusterSnapshot snap = (*session)->Snapshot();
  app::PlacementInput input = app::PlacementInputFrom(snap);
  input.memory = app::PlannerMemoryEstimator(CatalogDir());

  if (!apply) {
    // Replicas already running as asked keep their nodes in the table too.
    for (const auto& ds : app::ReadDeployments(**session, Deadline::AfterMs(10'000))) {
      if (ds.name != d.name) continue;
      for (const auto& r : ds.instances) {
        if (r.state == "ready" || r.state == "starting") input.fixed[r.replica] = r.nodes;
      }
    }
    const app::Placement pl = app::PlaceDeployment(d, input);
    std::vector<double> fractions;
    for (const auto& f : p.GetList("fraction")) {
      char* end = nullptr;
      const double v = std::strtod(f.c_str(), &end);
      if (f.empty() || end != f.c_str() + f.size() || !(v >= 0 && v <= 1)) {
        return UsageError(prog, "--fraction values must be in [0, 1], got '" + f + "'");
      }
      fractions.push_back(v);
    }
    std::string cap_text;
    json cap;
    if (pl.ok()) {
      const app::DeploymentCapacity c = app::PlanDeploymentCapacity(
          d, static_cast<int>(snap.nodes.size()), p.GetString("bench-db"), fractions);
      cap = json::parse(c.json);
      cap_text = c.text;
    }
    if (as_json) {
      json j = PlacementJson(d, pl);
      j["valid"] = pl.ok();
      j["deployment"] = d.name;
      j["cluster_nodes"] = snap.nodes.size();
      j["cabling"] = std::string(app::CablingKindName(snap.cabling.kind));
      if (pl.ok()) j["capacity"] = cap;
      std::cout << j.dump(2) << "\n";
    } else if (pl.ok()) {
      PrintPlacement(d, pl);
      std::printf(
          "%s", cap_text.empty() ? "" : (cap_text + (cap_text.back() == '\n' ? "" : "\n")).c_str());
    }
    for (const auto& w : pl.warnings) std::cerr << prog << ": warning: " << w << "\n";
    for (const auto& e : pl.errors) std::cerr << file << ": " << e << "\n";
    return pl.ok() ? kExitOk : kExitFailure;
  }

  auto wait = p.GetInt("wait-ms");
  if (!wait.ok() || *wait < 1000) return UsageError(prog, "--wait-ms must be at least 1000");
  app::ApplyOptions ao;
  ao.deadline = Deadline::AfterMs(*wait);
  auto node_wait = p.GetInt("node-wait-ms");
  if (!node_wait.ok() || *node_wait < 0 || *node_wait > *wait) {
    return UsageError(prog, "--node-wait-ms must be 0..--wait-ms");
  }
  ao.node_wait_ms = static_cast<int>(*node_wait);
  ao.cluster_token = cluster_token;
  ao.progress = [&](const std::string& line) { std::cerr << prog << ": " << line << "\n"; };
  // Ctrl-C (or SIGTERM) while apply waits for the replicas ends the wait, and
  // what this apply started is stopped: not a half-applied deployment left
  // running behind a killed command.
  InstallStopSignals();
  ao.cancelled = [] { return StopRequested(); };
  auto r = app::ApplyDeployment(**session, d, input, ao);
  if (!r.ok() && StopRequested()) {
    std::cerr << prog << ": interrupted: " << r.status().message()
              << " (what this apply started is stopped)\n";
    return StopExitCode();
  }
  if (!r.ok()) return Failure(prog, r.status().message());
  for (const auto& w : r->placement.warnings) std::cerr << prog << ": warning: " << w << "\n";
  if (as_json) {
    json j = StatusJson({r->status});
    j["started"] = r->started;
    j["kept"] = r->kept;
    j["stopped"] = r->stopped;
    std::cout << j.dump(2) << "\n";
  } else {
    PrintStatus({r->status});
    std::printf("started %zu, kept %zu, stopped %zu\n", r->started.size(), r->kept.size(),
                r->stopped.size());
  }
  return kExitOk;
}

// The watched file, read again every round: a change that parses becomes what
// the watch keeps (and is applied at once); one with errors is reported once
// and the last good version kept, so a half-saved edit never stops a replica.
class WatchedFile {
 public:
  WatchedFile(std::string path, std::string text, std::shared_ptr<const app::Deployment> d)
      : path_(std::move(path)), text_(std::move(text)), current_(std::move(d)) {}

  const app::Deployment& current() const { return *current_; }

  // True when the file now holds a different valid deployment (current()
  // is it). `say` gets what the user should know, once per change.
  bool Reread(const std::function<void(const std::string&)>& say) {
    auto text = ReadFileToString(path_);
    if (!text.ok()) {
      const std::string why = text.status().message();
      if (why != read_error_)
        say(why + "; keeping what the file said before");
      read_error_ = why;
      return false;
    }
    read_error_.clear();
    if (*text == text_) return false;
    text_ = *text;
    app::DeploymentParseResult parsed = app::ParseDeployment(text_, path_);
    if (!parsed.ok()) {
      say(path_ + " changed but has errors; keeping what it said before:\n" +
          parsed.status().message());
      return false;
    }
    const std::string was = current_->name;
    std::string why_not;
    if (app::SameDeployment(*current_, *parsed.deployment, &why_not)) return false;
    current_ = std::move(parsed.deployment);
    if (current_->name != was) {
      say(path_ + " now names deployment '" + current_->name + "'; '" + was +
          "' keeps running (`octet deploy down " + was + "` stops it)");
    }
    return true;
  }

 private:
  std::string path_;
  std::string text_;  // as last read
  std::shared_ptr<const app::Deployment> current_;
  std::string read_error_;  // said once until it changes
};

int RunWatch(const std::vector<std::string>& args) {
  const std::string prog = "octet deploy watch";
  ArgParser p(prog,
              "Keep a deployment as its file asks: read what the agents run every --interval-ms "
              "and apply the file again when a replica or the router failed or is gone (apply "
              "restarts it, on free nodes when its own are down, and tells the router the new "
              "endpoints). The file is read again every round: a changed file that is valid is "
              "applied at once (only what changed changes); one with errors is reported and the "
              "last valid version kept. Runs until SIGINT or SIGTERM (exit 0; the deployment "
              "keeps running; an apply in progress stops what it started).");
  p.Positional("FILE", "the deployment file (YAML)");
  AddClusterFlags(p);
  p.Option("interval-ms", "MS", "how often the agents are asked what runs", "5000");
  p.Option("wait-ms", "MS", "how long each apply may take for every replica to be ready", "600000");
  p.Option("node-wait-ms", "MS", "as `deploy apply --node-wait-ms`", "10000");
  if (Status s = p.Parse(args); !s.ok()) return ParseUsageError(s);
  if (p.help_requested()) {
    std::cout << p.Usage();
    return kExitOk;
  }
  if (p.positional().size() != 1) return UsageError(prog, "give one deployment FILE");
  auto interval = p.GetInt("interval-ms");
  if (!interval.ok() || *interval < 100 || *interval > 3'600'000)
    return UsageError(prog, "--interval-ms must be 100..3600000");
  auto wait = p.GetInt("wait-ms");
  if (!wait.ok() || *wait < 1000) return UsageError(prog, "--wait-ms must be at least 1000");
  auto node_wait = p.GetInt("node-wait-ms");
  if (!node_wait.ok() || *node_wait < 0 || *node_wait > *wait)
    return UsageError(prog, "--node-wait-ms must be 0..--wait-ms");
  const std::string path = p.positional()[0];
  auto text = ReadFileToString(path);
  if (!text.ok()) return Failure(prog, text.status().message());
  app::DeploymentParseResult parsed = app::ParseDeployment(*text, path);
  if (int code = CheckDeploymentFile(prog, parsed, false); code != kExitOk) return code;
  WatchedFile file(path, std::move(*text), std::move(parsed.deployment));
  InstallStopSignals();
  std::string cluster_token;
  auto session = OpenCluster(p, &cluster_token);
  if (!session.ok()) return Failure(prog, session.status().message());
  std::cerr << prog << ": watching '" << file.current().name << "' and " << path << " every "
            << *interval << " ms (SIGINT/SIGTERM stop)\n";
  std::string last;  // said once until something changes
  auto say_once = [&](const std::string& line) {
    if (line != last) std::cerr << prog << ": " << line << "\n";
    last = line;
  };
  auto say = [&](const std::string& line) { std::cerr << prog << ": " << line << "\n"; };
  bool changed = false;  // a changed file waits for an apply that succeeds
  while (!StopRequested()) {
    changed = file.Reread(say) || changed;
    const app::Deployment& d = file.current();
    std::vector<app::NodeSilence> silent;
    const auto all = app::ReadDeployments(**session, Deadline::AfterMs(15'000), &silent);
    std::string up_but_silent;
    for (const auto& s : silent) {
      if (s.up) up_but_silent += (up_but_silent.empty() ? "" : ", ") + s.node;
    }
    const std::string amiss = changed ? path + " changed" : app::WhatIsAmiss(d, all);
    if (!up_but_silent.empty()) {
      // Its replicas would read missing: nothing is changed on a guess.
      say_once("not acting this round: node(s) " + up_but_silent +
               " did not say which jobs they run");
    } else if (amiss.empty()) {
      say_once("every replica" + std::string(d.router.present ? " and the router" : "") +
               " running");
    } else if (!StopRequested()) {
      say(amiss + ": applying " + path);
      app::PlacementInput input = app::PlacementInputFrom((*session)->Snapshot());
      input.memory = app::PlannerMemoryEstimator(CatalogDir());
      app::ApplyOptions ao;
      ao.deadline = Deadline::AfterMs(*wait);
      ao.node_wait_ms = static_cast<int>(*node_wait);
      ao.cluster_token = cluster_token;
      ao.progress = say;
      ao.cancelled = [] { return StopRequested(); };
      auto r = app::ApplyDeployment(**session, d, input, ao);
      if (!r.ok()) {
        say("apply failed (again in " + std::to_string(*interval) +
            " ms): " + r.status().message());
      } else {
        changed = false;
        std::string started, stopped;
        for (const auto& n : r->started) started += (started.empty() ? "" : ", ") + n;
        for (const auto& n : r->stopped) stopped += (stopped.empty() ? "" : ", ") + n;
        say("started " + (started.empty() ? std::string("nothing") : started) + "; kept " +
            std::to_string(r->kept.size()) + (stopped.empty() ? "" : "; stopped " + stopped));
      }
      last.clear();
    }
    const Deadline next = Deadline::AfterMs(*interval);
    while (!StopRequested() && !next.expired())
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  say("stopped watching; '" + file.current().name + "' keeps running");
  return kExitOk;
}

int RunStatusCommand(const std::vector<std::string>& args) {
  const std::string prog = "octet deploy status";
  ArgParser p(prog,
              "What the cluster's agents run, per deployment: each replica's nodes, state "
              "(ready, starting, failed, stopped), endpoint and error; the router's.");
  p.Positional("NAME", "only this deployment");
  AddClusterFlags(p);
  if (Status s = p.Parse(args); !s.ok()) return ParseUsageError(s);
  if (p.help_requested()) {
    std::cout << p.Usage();
    return kExitOk;
  }
  if (p.positional().size() > 1) return UsageError(prog, "give at most one deployment NAME");
  auto session = OpenCluster(p);
  if (!session.ok()) return Failure(prog, session.status().message());
  std::vector<app::NodeSilence> silent;
  std::vector<app::DeploymentStatus> all =
      app::ReadDeployments(**session, Deadline::AfterMs(15'000), &silent);
  for (const auto& s : silent) {
    std::cerr << prog << ": warning: node " << s.node << " did not say which jobs it runs ("
              << s.error << "): its replicas are missing below or read failed\n";
  }
  if (!p.positional().empty()) {
    std::vector<app::DeploymentStatus> one;
    for (auto& d : all) {
      if (d.name == p.positional()[0]) one.push_back(std::move(d));
    }
    all = std::move(one);
  }
  if (p.GetFlag("json")) {
    std::cout << StatusJson(all).dump(2) << "\n";
  } else {
    PrintStatus(all);
  }
  return kExitOk;
}

int RunDown(const std::vector<std::string>& args) {
  const std::string prog = "octet deploy down";
  ArgParser p(prog, "Stop every replica and the router of a deployment (through the agents).");
  p.Positional("NAME", "the deployment");
  AddClusterFlags(p);
  if (Status s = p.Parse(args); !s.ok()) return ParseUsageError(s);
  if (p.help_requested()) {
    std::cout << p.Usage();
    return kExitOk;
  }
  if (p.positional().size() != 1) return UsageError(prog, "give the deployment NAME");
  auto session = OpenCluster(p);
  if (!session.ok()) return Failure(prog, session.status().message());
  auto stopped = app::DownDeployment(**session, p.positional()[0], Deadline::AfterMs(60'000));
  if (!stopped.ok()) return Failure(prog, stopped.status().message());
  if (p.GetFlag("json")) {
    std::cout << json{{"deployment", p.positional()[0]}, {"stopped", *stopped}}.dump(2) << "\n";
  } else {
    std::cerr << prog << ": stopped " << stopped->size() << " job(s) of '" << p.positional()[0]
              << "'\n";
  }
  return kExitOk;
}

}  // namespace

int RunDeploy(const std::vector<std::string>& args) {
  if (args.empty()) {
    std::cerr << kUsage;
    return kExitUsage;
  }
  const std::string& sub = args[0];
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (sub == "--help" || sub == "-h" || sub == "help") {
    std::cout << kUsage;
    return kExitOk;
  }
  if (const Subcommand* s = FindSubcommand(DeploySubcommands(), sub)) return s->run(rest);
  std::cerr << "octet deploy: unknown subcommand '" << sub << "' ("
            << SubcommandNames(DeploySubcommands()) << ")\n";
  return kExitUsage;
}

const std::vector<Subcommand>& DeploySubcommands() {
  static const std::vector<Subcommand> table = {
      {"check", [](const std::vector<std::string>& a) { return RunCheckOrApply(a, false); }},
      {"apply", [](const std::vector<std::string>& a) { return RunCheckOrApply(a, true); }},
      {"watch", RunWatch},
      {"status", RunStatusCommand},
      {"down", RunDown}};
  return table;
}

}  // namespace octet::cli
