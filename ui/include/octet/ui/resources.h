// Where the workbench finds Octet's data files (resources/: example routing
// policies, the model catalog, ...): $OCTET_RESOURCES_DIR, then the root set
// by the window's options (a source tree), then the installed
// <prefix>/share/octet beside the binary, then the source tree a build
// folder sits in (build/<preset>/bin/../../../resources).
#pragma once

#include <QString>

namespace octet::ui {

void SetResourceRoot(const QString& dir);
// The absolute path of `relative` under the first resources folder holding
// it, or "" when none does.
QString ResourcePath(const QString& relative);

}  // namespace octet::ui
