// Small building blocks shared by the panels: a panel header (title, a
// one-line subtitle and a row of actions on the right) and a section label.
#pragma once

#include <QFrame>
#include <QLabel>
#include <QString>

class QHBoxLayout;
class QValueAxis;

namespace octet::ui {

class PanelHeader : public QFrame {
  Q_OBJECT
 public:
  PanelHeader(const QString& title, const QString& subtitle, QWidget* parent = nullptr);
  void setSubtitle(const QString& text);
  QLabel* subtitleLabel() const { return subtitle_; }
  // Adds a widget to the right-hand action row.
  void addAction(QWidget* widget);

 private:
  QLabel* title_;
  QLabel* subtitle_;
  QHBoxLayout* actions_;
};

// A bold small-caps section title ("MEMORY", "LINKS").
QLabel* SectionLabel(const QString& text, QWidget* parent = nullptr);

// A frame that draws like a card (Base background, rounded border).
class Card : public QFrame {
  Q_OBJECT
 public:
  explicit Card(QWidget* parent = nullptr);

 protected:
  void paintEvent(QPaintEvent* event) override;
};

// A value axis from 0 to `top` in `intervals` equal steps of 1, 2, 2.5 or 5
// times a power of ten, so that every tick label is a round number.
struct NiceScale {
  double top = 1;
  int intervals = 4;
  double step() const { return top / intervals; }
};
// The lowest such axis that holds `max` (values <= 0 or not finite: 0 to 1),
// with min_intervals..max_intervals steps (pass the same number for both when
// two axes of one chart must share their grid lines).
NiceScale NiceScaleFor(double max, int min_intervals = 4, int max_intervals = 7);
// Sets the axis's range and tick count to `scale`.
void ApplyNiceScale(QValueAxis* axis, const NiceScale& scale);

}  // namespace octet::ui
