// A node's model store (app::NodeModels, from its agent's ModelService) as
// JSON: one form for `octet models --cluster NAME --json` and `octet cluster
// status --json`, so a script reads both the same way.
//   {"models_dir": "...",            "" : the agent has no store
//    "models": [{"repo", "commit", "refs", "snapshot", "files", "bytes",
//                "incomplete_files", "missing_files"}, ...]}   one per snapshot
#pragma once

#include "octet/app/agent_client.h"
#include "octet/base/json.h"

namespace octet::cli {

nlohmann::json NodeModelJson(const app::NodeModel& m);
// Sets "models_dir" and "models" of `node` (a node's JSON object).
void AddNodeModelsJson(const app::NodeModels& models, nlohmann::json* node);

}  // namespace octet::cli
