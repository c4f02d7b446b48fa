// Colours, glyphs and number formats of the workbench.
//
// Every colour is derived from the application palette at the time of use, so
// the window follows the desktop's light or dark scheme (and a palette change
// at run time) without a stylesheet of fixed colours. Glyphs are vector
// drawings painted at whatever size and device pixel ratio they are asked for,
// so icons stay sharp on high-DPI screens.
#pragma once

#include <QColor>
#include <QIcon>
#include <QPalette>
#include <QString>

namespace octet::ui {

enum class Glyph {
  kCluster,
  kLaunch,
  kDashboard,
  kChat,
  kRouting,
  kBenchmarks,
  kDeployments,
  kModels,
  kConnect,
  kProbe,
  kStop,
  kSend,
  kRefresh,
};

// Whether the palette is a dark one (window background darker than mid grey).
bool IsDarkPalette(const QPalette& palette);

// Status colours tuned for the palette's background: readable on both schemes.
struct StatusColors {
  QColor good;     // up, fits, running
  QColor warning;  // degraded, unexpected link, one-way
  QColor bad;      // lost, broken, failed
  QColor accent;   // selection, primary series
  QColor muted;    // secondary text, free memory
};
StatusColors StatusColorsFor(const QPalette& palette);

// The i-th colour of a categorical palette (distinct for the first ten).
QColor SeriesColor(int index, const QPalette& palette);
// Linear blend: t = 0 gives a, t = 1 gives b.
QColor Mix(const QColor& a, const QColor& b, double t);

// An icon drawing `glyph` in the palette's text colour (highlighted-text when selected).
QIcon GlyphIcon(Glyph glyph);

// "31.8 GiB", "512 MiB", "0 B" (binary units, 3 significant digits).
QString FormatBytesIec(double bytes);
// "1,234 tok/s", "12.5 tok/s", "0.42 tok/s".
QString FormatTps(double tokens_per_second);
// "820 µs", "1.25 ms", "3.1 s".
QString FormatMicros(double microseconds);

}  // namespace octet::ui
