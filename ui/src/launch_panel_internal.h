// Shared by the Launch panel's files (launch_panel.cpp: the model, topology and
// inference; launch_panel_router.cpp; launch_panel_training.cpp).
#pragma once

#include <QString>
#include <string>

class QComboBox;

namespace octet::ui {

// A job id the agents accept ([A-Za-z0-9._-]) and that a second launch does
// not reuse: "wb-<what>-<time>".
std::string RemoteJobId(const QString& what);

// Enables or disables one entry of a combo box, with the reason as its tooltip.
void SetItemEnabled(QComboBox* box, int row, bool enabled, const QString& tooltip);

}  // namespace octet::ui
