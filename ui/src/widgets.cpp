#include "octet/ui/widgets.h"

#include <QHBoxLayout>
#include <QPainter>
#include <QVBoxLayout>

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

}  // namespace octet::ui
