// Small building blocks shared by the panels: a panel header (title, a
// one-line subtitle and a row of actions on the right) and a section label.
#pragma once

#include <QFrame>
#include <QLabel>
#include <QString>

class QHBoxLayout;

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

}  // namespace octet::ui
