#include "octet/ui/plurals.h"

#include <QCoreApplication>

namespace octet::ui {

QString EnglishPlural(const QString& text, int n) {
  if (n < 0) return text;
  QString out = text;
  out.replace(QStringLiteral("(s)"), n == 1 ? QString() : QStringLiteral("s"));
  return out;
}

QString EnglishPlurals::translate(const char*, const char* source_text, const char*, int n) const {
  if (n < 0 || !source_text) return {};
  const QString source = QString::fromUtf8(source_text);
  if (!source.contains(QStringLiteral("(s)"))) return {};
  return EnglishPlural(source, n);
}

void InstallEnglishPlurals() {
  auto* app = QCoreApplication::instance();
  if (!app || app->findChild<EnglishPlurals*>(QString(), Qt::FindDirectChildrenOnly)) return;
  // Owned by the application; installed for as long as it lives.
  QCoreApplication::installTranslator(new EnglishPlurals(app));
}

}  // namespace octet::ui
