#include "octet/ui/job_colors.h"

#include <QHash>

#include "octet/ui/theme.h"

namespace octet::ui {

int JobColorIndex(const QString& job_id) {
  static QHash<QString, int> assigned;
  auto it = assigned.find(job_id);
  if (it != assigned.end()) return it.value();
  const int index = static_cast<int>(assigned.size());
  assigned.insert(job_id, index);
  return index;
}

QColor JobColor(const QString& job_id, const QPalette& palette) {
  return SeriesColor(JobColorIndex(job_id), palette);
}

}  // namespace octet::ui
