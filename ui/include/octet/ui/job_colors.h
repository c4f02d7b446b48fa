// One colour per job across the whole window: a job's memory in the cluster
// view, its series in the dashboard and its row in the jobs table share it.
// Colours are handed out in the order jobs are first seen (GUI thread only).
#pragma once

#include <QColor>
#include <QPalette>
#include <QString>

namespace octet::ui {

int JobColorIndex(const QString& job_id);
QColor JobColor(const QString& job_id, const QPalette& palette);

}  // namespace octet::ui
