// What both halves of the Deployments panel (deployment_panel.cpp: the
// editor; deployment_panel_run.cpp: what runs) put into their tables.
#pragma once

#include <QString>
#include <QStringList>
#include <QTableWidgetItem>
#include <string>
#include <vector>

namespace octet::ui::deployment_cells {

inline QString Q(const std::string& s) { return QString::fromStdString(s); }

// A read-only cell.
inline QTableWidgetItem* Cell(const QString& text) {
  auto* item = new QTableWidgetItem(text);
  item->setFlags(Qt::ItemIsSelectable | Qt::ItemIsEnabled);
  return item;
}

inline QString NodesText(const std::vector<std::string>& nodes) {
  QStringList l;
  for (const auto& n : nodes) l << Q(n);
  return l.join(QStringLiteral(", "));
}

}  // namespace octet::ui::deployment_cells
