// Editing deployment files (the workbench's deployment editor); Qt-free, so
// that what the editor writes and checks is what `octet deploy` reads.
//
//  - DeploymentToYaml: a deployment as a file that ParseDeployment reads back
//    to the same deployment (SameDeployment); keys at their defaults are left
//    out, a router policy beside the file is written relative to it.
//  - SameDeployment: equal as deployments (what the file says, not where or
//    on which lines it was written); `difference` says the first field that is not.
//  - CheckRouterPolicy: the router's policy as `octet deploy check` checks it:
//    its own errors (FILE:LINE:COL), and `instance:` pools naming an instance
//    the deployment does not have.
//  - PolicyForInstances: a routing policy whose pools are the deployment's
//    instances (`instance: NAME`), one route per served model name and a
//    catch-all to the first instance; what "New policy for these instances"
//    writes.
#pragma once

#include <string>
#include <vector>

#include "octet/app/deployment.h"

namespace octet::app {

std::string DeploymentToYaml(const Deployment& deployment, const std::string& file_path);

bool SameDeployment(const Deployment& a, const Deployment& b, std::string* difference = nullptr);

struct RouterPolicyCheck {
  std::vector<std::string> errors;  // "FILE:LINE:COL: message"
  // Pool -> instance it names ("" for a pool of listed replicas), in file order.
  std::vector<std::pair<std::string, std::string>> pools;
};
RouterPolicyCheck CheckRouterPolicy(const Deployment& deployment);

std::string PolicyForInstances(const Deployment& deployment);

}  // namespace octet::app
