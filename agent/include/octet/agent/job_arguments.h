// What an authenticated caller may put on a job's command line.
//
// The agent runs only the project's own programs (`octet worker`, `octet
// route`), and a caller holding the cluster token may add to their command line
// only the flags listed here for the job's kind, each with a value of the kind
// the table says. Everything else is refused: flags that write files
// (`--logits-out`, the trainer's `--out`, `--grads-out`), flags that read other
// files (`--init`, `--batch`), flags the agent wires itself (`--model`,
// `--rendezvous`, ...), and any bare word.
//
// A value that names a file or folder (training `--data`, `--config FILE`)
// must resolve, symlinks followed, inside one of the agent's model roots, and
// is replaced on the command line by that resolved path, so that what runs is
// what was checked. `--host` must be an address of this node (loopback
// included) or its host name; the wildcard addresses are refused, since a job
// would then listen on every network the node is on.
//
// A node owner who runs the agent with a program of their own (`octet-agent
// --octet-bin PATH --octet-bin-flags NAME,...`) may allow that program's own
// flags by name; a caller cannot widen the list.
#pragma once

#include <string>
#include <vector>

#include "octet/agent/job_supervisor.h"
#include "octet/base/status.h"

namespace octet::agent {

// Resolves `path` (symlinks followed) and checks that it lies inside one of
// `roots` (resolved the same way). `what` names the path in errors ("model",
// "policy", "--data"). NotFound when it does not exist, PermissionDenied when it
// is outside, the resolved path otherwise.
Result<std::string> ResolveInsideRoots(const std::string& path,
                                       const std::vector<std::string>& roots,
                                       const std::string& what);

// Checks `args` against the allow-list of `kind` (plus `owner_flags`, names
// without the leading "--", taken as "--NAME" or "--NAME=VALUE") and returns
// them as they are to be launched: each flag with a value as one word
// "--name=value" (so that no value reads as a flag), paths resolved. InvalidArgument names the
// first refused word and why; PermissionDenied a path outside the roots.
Result<std::vector<std::string>> CheckExtraArgs(JobKind kind, const std::vector<std::string>& args,
                                                const std::vector<std::string>& model_roots,
                                                const std::vector<std::string>& owner_flags = {});

// Whether `host` is an IPv4/IPv6 address literal assigned to one of this
// node's interfaces (loopback included; never a wildcard address),
// "localhost", or this node's host name (with or without its domain).
bool IsAddressOfThisNode(const std::string& host);

}  // namespace octet::agent
