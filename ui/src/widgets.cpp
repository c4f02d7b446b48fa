#include "octet/ui/widgets.h"

#include <QHBoxLayout>
#include <QPainter>
#include <QVBoxLayout>
#include <QValueAxis>
#include <algorithm>
#include <cmath>

#include "octet/ui/theme.h"

namespace octet::ui {

PanelHeader::PanelHeader(const QString& title, const QString& subtitle, QWidget* parent)
    : QFrame(parent) {
  auto* row = new QHBoxLayout(this);
  row->setContentsMargins(0, 0, 0, 4);
  auto* texts = new QVBoxLayout;
  texts->setSpacing(2);
  title_ = new QLabel(title, this);
  QFont f = title_->font();
  f.setPointSizeF(f.pointSizeF() * 1.45);
  f.setBold(true);
  title_->setFont(f);
  subtitle_ = new QLabel(subtitle, this);
  subtitle_->setObjectName(QStringLiteral("panelSubtitle"));
  subtitle_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  // PlaceholderText: a muted text colour that follows palette changes.
  subtitle_->setForegroundRole(QPalette::PlaceholderText);
  texts->addWidget(title_);
  texts->addWidget(subtitle_);
  row->addLayout(texts, 1);
  actions_ = new QHBoxLayout;
  actions_->setSpacing(6);
  row->addLayout(actions_);
}

void PanelHeader::setSubtitle(const QString& text) { subtitle_->setText(text); }

void PanelHeader::addAction(QWidget* widget) { actions_->addWidget(widget, 0, Qt::AlignBottom); }

QLabel* SectionLabel(const QString& text, QWidget* parent) {
  auto* l = new QLabel(text.toUpper(), parent);
  QFont f = l->font();
  f.setBold(true);
  f.setPointSizeF(f.pointSizeF() * 0.85);
  f.setLetterSpacing(QFont::PercentageSpacing, 108);
  l->setFont(f);
  l->setForegroundRole(QPalette::PlaceholderText);
  return l;
}

Card::Card(QWidget* parent) : QFrame(parent) { setContentsMargins(1, 1, 1, 1); }

void Card::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.setRenderHint(QPainter::Antialiasing);
  const QPalette pal = palette();
  p.setPen(QPen(Mix(pal.color(QPalette::Window), pal.color(QPalette::WindowText), 0.18), 1));
  p.setBrush(pal.color(QPalette::Base));
  p.drawRoundedRect(QRectF(rect()).adjusted(0.5, 0.5, -0.5, -0.5), 8, 8);
}

namespace {

// The smallest of 1, 2, 2.5, 5 x 10^k that is at least `raw` (> 0).
double NiceStep(double raw) {
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 2.5, 5.0}) {
    // A hair of slack: 0.3 / 3 must take step 0.1, not 0.2.
    if (m * magnitude >= raw * (1 - 1e-9)) return m * magnitude;
  }
  return 10 * magnitude;
}

}  // namespace

NiceScale NiceScaleFor(double max, int min_intervals, int max_intervals) {
  min_intervals = std::max(1, min_intervals);
  max_intervals = std::max(min_intervals, max_intervals);
  if (!(max > 0) || !std::isfinite(max)) return {1, min_intervals};
  NiceScale best{0, min_intervals};
  for (int n = min_intervals; n <= max_intervals; ++n) {
    const double top = NiceStep(max / n) * n;
    if (best.top == 0 || top < best.top * (1 - 1e-9)) best = {top, n};
  }
  return best;
}

void ApplyNiceScale(QValueAxis* axis, const NiceScale& scale) {
  axis->setRange(0, scale.top);
  axis->setTickCount(scale.intervals + 1);
}

}  // namespace octet::ui
