#include "octet/ui/theme.h"

#include <QGuiApplication>
#include <QIconEngine>
#include <QLocale>
#include <QPainter>
#include <QPainterPath>
#include <QPixmap>
#include <algorithm>
#include <cmath>

namespace octet::ui {

bool IsDarkPalette(const QPalette& palette) {
  return palette.color(QPalette::Window).lightness() < 128;
}

StatusColors StatusColorsFor(const QPalette& palette) {
  const bool dark = IsDarkPalette(palette);
  StatusColors c;
  c.good = dark ? QColor(0x4c, 0xc3, 0x7a) : QColor(0x1e, 0x8e, 0x4e);
  c.warning = dark ? QColor(0xf0, 0xa8, 0x30) : QColor(0xc7, 0x6b, 0x00);
  c.bad = dark ? QColor(0xff, 0x6b, 0x6b) : QColor(0xc6, 0x28, 0x28);
  c.accent = dark ? QColor(0x5a, 0xa9, 0xff) : QColor(0x1f, 0x6f, 0xd1);
  c.muted = Mix(palette.color(QPalette::WindowText), palette.color(QPalette::Window), 0.45);
  return c;
}

QColor SeriesColor(int index, const QPalette& palette) {
  // Tableau-10-like hues, lightened on dark backgrounds.
  static const QRgb kBase[] = {0x1f77b4, 0xff7f0e, 0x2ca02c, 0xd62728, 0x9467bd,
                               0x8c564b, 0xe377c2, 0x7f7f7f, 0xbcbd22, 0x17becf};
  constexpr int kCount = sizeof(kBase) / sizeof(kBase[0]);
  QColor c = QColor::fromRgb(kBase[((index % kCount) + kCount) % kCount]);
  if (IsDarkPalette(palette)) c = c.lighter(130);
  return c;
}

QColor Mix(const QColor& a, const QColor& b, double t) {
  t = std::clamp(t, 0.0, 1.0);
  return QColor::fromRgbF(static_cast<float>(a.redF() * (1 - t) + b.redF() * t),
                          static_cast<float>(a.greenF() * (1 - t) + b.greenF() * t),
                          static_cast<float>(a.blueF() * (1 - t) + b.blueF() * t),
                          static_cast<float>(a.alphaF() * (1 - t) + b.alphaF() * t));
}

namespace {

// Draws a glyph into the unit square [0,1]x[0,1] (the painter is scaled).
void DrawGlyph(QPainter& p, Glyph glyph, const QColor& color) {
  QPen pen(color, 0.085, Qt::SolidLine, Qt::RoundCap, Qt::RoundJoin);
  p.setPen(pen);
  p.setBrush(Qt::NoBrush);
  switch (glyph) {
    case Glyph::kCluster: {
      const QPointF a(0.5, 0.2), b(0.2, 0.76), c(0.8, 0.76);
      p.drawLine(a, b);
      p.drawLine(b, c);
      p.drawLine(c, a);
      p.setBrush(color);
      for (const QPointF& q : {a, b, c}) p.drawEllipse(q, 0.13, 0.13);
      break;
    }
    case Glyph::kLaunch: {
      QPainterPath tri;
      tri.moveTo(0.32, 0.2);
      tri.lineTo(0.82, 0.5);
      tri.lineTo(0.32, 0.8);
      tri.closeSubpath();
      p.setBrush(color);
      p.drawPath(tri);
      break;
    }
    case Glyph::kDashboard: {
      p.drawLine(QPointF(0.14, 0.14), QPointF(0.14, 0.86));
      p.drawLine(QPointF(0.14, 0.86), QPointF(0.88, 0.86));
      QPainterPath line;
      line.moveTo(0.24, 0.7);
      line.lineTo(0.42, 0.46);
      line.lineTo(0.58, 0.6);
      line.lineTo(0.84, 0.24);
      p.drawPath(line);
      break;
    }
    case Glyph::kChat: {
      QPainterPath bubble;
      bubble.addRoundedRect(QRectF(0.12, 0.16, 0.76, 0.52), 0.14, 0.14);
      QPainterPath tail;
      tail.moveTo(0.3, 0.66);
      tail.lineTo(0.24, 0.86);
      tail.lineTo(0.48, 0.67);
      p.drawPath(bubble.united(tail));
      p.setBrush(color);
      for (double x : {0.34, 0.5, 0.66}) p.drawEllipse(QPointF(x, 0.42), 0.035, 0.035);
      break;
    }
    case Glyph::kRouting: {
      p.drawLine(QPointF(0.12, 0.5), QPointF(0.42, 0.5));
      QPainterPath up;
      up.moveTo(0.42, 0.5);
      up.cubicTo(0.56, 0.5, 0.6, 0.24, 0.84, 0.24);
      QPainterPath down;
      down.moveTo(0.42, 0.5);
      down.cubicTo(0.56, 0.5, 0.6, 0.76, 0.84, 0.76);
      p.drawPath(up);
      p.drawPath(down);
      p.setBrush(color);
      p.drawEllipse(QPointF(0.84, 0.24), 0.07, 0.07);
      p.drawEllipse(QPointF(0.84, 0.76), 0.07, 0.07);
      break;
    }
    case Glyph::kBenchmarks: {
      p.setBrush(color);
      p.setPen(Qt::NoPen);
      p.drawRoundedRect(QRectF(0.14, 0.52, 0.18, 0.34), 0.03, 0.03);
      p.drawRoundedRect(QRectF(0.41, 0.3, 0.18, 0.56), 0.03, 0.03);
      p.drawRoundedRect(QRectF(0.68, 0.14, 0.18, 0.72), 0.03, 0.03);
      break;
    }
    case Glyph::kDeployments: {
      // Three stacked servers, each with its status light.
      for (double y : {0.14, 0.41, 0.68}) {
        p.setBrush(Qt::NoBrush);
        p.drawRoundedRect(QRectF(0.14, y, 0.72, 0.19), 0.04, 0.04);
        p.setBrush(color);
        p.drawEllipse(QPointF(0.7, y + 0.095), 0.035, 0.035);
      }
      break;
    }
    case Glyph::kModels: {
      // A cube: a model's weights as one block.
      const QPointF top(0.5, 0.12), left(0.16, 0.31), right(0.84, 0.31), centre(0.5, 0.5);
      const QPointF bottom(0.5, 0.88), lower_left(0.16, 0.69), lower_right(0.84, 0.69);
      QPainterPath outline;
      outline.moveTo(top);
      outline.lineTo(right);
      outline.lineTo(lower_right);
      outline.lineTo(bottom);
      outline.lineTo(lower_left);
      outline.lineTo(left);
      outline.closeSubpath();
      p.drawPath(outline);
      p.drawLine(left, centre);
      p.drawLine(right, centre);
      p.drawLine(centre, bottom);
      break;
    }
    case Glyph::kConnect: {
      p.drawEllipse(QPointF(0.5, 0.5), 0.34, 0.34);
      p.drawLine(QPointF(0.5, 0.32), QPointF(0.5, 0.68));
      p.drawLine(QPointF(0.32, 0.5), QPointF(0.68, 0.5));
      break;
    }
    case Glyph::kProbe: {
      QPainterPath pulse;
      pulse.moveTo(0.08, 0.55);
      pulse.lineTo(0.3, 0.55);
      pulse.lineTo(0.4, 0.25);
      pulse.lineTo(0.55, 0.8);
      pulse.lineTo(0.65, 0.45);
      pulse.lineTo(0.92, 0.45);
      p.drawPath(pulse);
      break;
    }
    case Glyph::kStop: {
      p.setBrush(color);
      p.setPen(Qt::NoPen);
      p.drawRoundedRect(QRectF(0.24, 0.24, 0.52, 0.52), 0.06, 0.06);
      break;
    }
    case Glyph::kSend: {
      QPainterPath arrow;
      arrow.moveTo(0.14, 0.2);
      arrow.lineTo(0.88, 0.5);
      arrow.lineTo(0.14, 0.8);
      arrow.lineTo(0.26, 0.5);
      arrow.closeSubpath();
      p.setBrush(color);
      p.drawPath(arrow);
      break;
    }
    case Glyph::kRefresh: {
      p.drawArc(QRectF(0.18, 0.18, 0.64, 0.64), 60 * 16, 290 * 16);
      QPainterPath head;
      head.moveTo(0.66, 0.1);
      head.lineTo(0.68, 0.3);
      head.lineTo(0.86, 0.22);
      p.drawPath(head);
      break;
    }
  }
}

class GlyphIconEngine : public QIconEngine {
 public:
  explicit GlyphIconEngine(Glyph glyph) : glyph_(glyph) {}
  void paint(QPainter* painter, const QRect& rect, QIcon::Mode mode, QIcon::State) override {
    const QPalette palette = QGuiApplication::palette();
    QColor color = palette.color(QPalette::WindowText);
    if (mode == QIcon::Selected) color = palette.color(QPalette::HighlightedText);
    if (mode == QIcon::Disabled) color = palette.color(QPalette::Disabled, QPalette::WindowText);
    painter->save();
    painter->setRenderHint(QPainter::Antialiasing);
    const double side = std::min(rect.width(), rect.height());
    painter->translate(rect.x() + (rect.width() - side) / 2, rect.y() + (rect.height() - side) / 2);
    painter->scale(side, side);
    DrawGlyph(*painter, glyph_, color);
    painter->restore();
  }
  QPixmap pixmap(const QSize& size, QIcon::Mode mode, QIcon::State state) override {
    return scaledPixmap(size, mode, state, 1.0);
  }
  QPixmap scaledPixmap(const QSize& size, QIcon::Mode mode, QIcon::State state,
                       qreal scale) override {
    QPixmap pm(size * scale);
    pm.setDevicePixelRatio(scale);
    pm.fill(Qt::transparent);
    QPainter p(&pm);
    paint(&p, QRect(QPoint(0, 0), size), mode, state);
    return pm;
  }
  QIconEngine* clone() const override { return new GlyphIconEngine(glyph_); }

 private:
  Glyph glyph_;
};

}  // namespace

QIcon GlyphIcon(Glyph glyph) { return QIcon(new GlyphIconEngine(glyph)); }

QString FormatBytesIec(double bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (std::fabs(bytes) >= 1024 && unit < 4) {
    bytes /= 1024;
    ++unit;
  }
  if (unit == 0) return QStringLiteral("%1 B").arg(static_cast<qint64>(bytes));
  const int decimals = std::fabs(bytes) >= 100 ? 0 : (std::fabs(bytes) >= 10 ? 1 : 2);
  return QStringLiteral("%1 %2").arg(bytes, 0, 'f', decimals).arg(QLatin1String(kUnits[unit]));
}

QString FormatTps(double tps) {
  const int decimals = tps >= 1000 ? 0 : (tps >= 10 ? 1 : 2);
  return QLocale(QLocale::English).toString(tps, 'f', decimals) + QStringLiteral(" tok/s");
}

QString FormatMicros(double us) {
  if (us < 1000) return QStringLiteral("%1 µs").arg(us, 0, 'f', us < 10 ? 1 : 0);
  if (us < 1e6) return QStringLiteral("%1 ms").arg(us / 1000, 0, 'f', us < 1e4 ? 2 : 1);
  return QStringLiteral("%1 s").arg(us / 1e6, 0, 'f', 1);
}

}  // namespace octet::ui
