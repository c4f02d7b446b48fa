// Shared by the Launch panel's files (launch_panel.cpp, launch_panel_training.cpp).
#pragma once

#include <QString>
#include <string>

namespace octet::ui {

// A job id the agents accept ([A-Za-z0-9._-]) and that a second launch does
// not reuse: "wb-<what>-<time>".
std::string RemoteJobId(const QString& what);

}  // namespace octet::ui
