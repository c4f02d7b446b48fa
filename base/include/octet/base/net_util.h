// Small socket helpers shared by the programs that start local process groups.
#pragma once

namespace octet {

// A TCP port on 127.0.0.1 that was free a moment ago, or -1 when none could be
// bound. The port is released before returning, so the caller binds it soon
// and treats a failure to bind as "taken meanwhile" (another process may win).
int FreeLoopbackPort();

}  // namespace octet
