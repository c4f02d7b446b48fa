#include "octet/ui/resources.h"

#include <QCoreApplication>
#include <QDir>
#include <QFileInfo>

namespace octet::ui {

namespace {
QString& Root() {
  static QString root;
  return root;
}
}  // namespace

void SetResourceRoot(const QString& dir) { Root() = dir; }

QString ResourcePath(const QString& relative) {
  QStringList roots;
  const QString env = qEnvironmentVariable("OCTET_RESOURCES_DIR");
  if (!env.isEmpty()) roots << env;
  if (!Root().isEmpty()) roots << Root();
  const QString bin = QCoreApplication::applicationDirPath();
  roots << bin + QStringLiteral("/../share/octet") << bin + QStringLiteral("/../../../resources")
        << bin + QStringLiteral("/../../resources");
  for (const QString& r : roots) {
    const QFileInfo f(QDir(r).filePath(relative));
    if (f.exists()) return f.absoluteFilePath();
  }
  return {};
}

}  // namespace octet::ui
