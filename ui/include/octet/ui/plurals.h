// English plurals for the workbench's counted strings.
//
// The panels write a count as tr("%n node(s)", nullptr, n), Qt's idiom for a
// string whose form depends on n. Qt picks the form from a translation's
// numerus entries; with none installed it shows the source, "1 node(s)". The
// workbench ships no translations, so this translator gives English its two
// forms directly: "(s)" is dropped for one and becomes "s" otherwise.
#pragma once

#include <QString>
#include <QTranslator>

namespace octet::ui {

// `text` with every "(s)" resolved for the count n (n < 0: not a counted
// string; returned unchanged).
QString EnglishPlural(const QString& text, int n);

class EnglishPlurals : public QTranslator {
  Q_OBJECT  // so that InstallEnglishPlurals finds this translator, not any

      public : using QTranslator::QTranslator;
  // A null string (Qt then uses the source) unless the string is counted and
  // holds a "(s)".
  QString translate(const char* context, const char* source_text,
                    const char* disambiguation = nullptr, int n = -1) const override;
  bool isEmpty() const override { return false; }
};

// Installs one EnglishPlurals on the running application (once; later calls
// do nothing). Call after the QCoreApplication exists.
void InstallEnglishPlurals();

}  // namespace octet::ui
