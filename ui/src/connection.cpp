#include "octet/ui/connection.h"

#include <algorithm>

#include "octet/app/cluster_import.h"

namespace octet::ui {

bool ConnectionSpec::operator==(const ConnectionSpec& o) const {
  if (kind != o.kind) return false;
  if (kind == Kind::kProfile) return profile == o.profile;
  return local_nodes == o.local_nodes && local_cabling == o.local_cabling &&
         local_memory_bytes == o.local_memory_bytes && local_model_roots == o.local_model_roots;
}

QString ConnectionSpec::Describe() const {
  if (kind == Kind::kProfile) return QStringLiteral("cluster '%1'").arg(profile);
  return QStringLiteral("local cluster · %1 node%2 · %3")
      .arg(local_nodes)
      .arg(local_nodes == 1 ? "" : "s")
      .arg(local_cabling);
}

ConnectionSpec ConnectionSpec::Load(QSettings& s, bool* remembered) {
  ConnectionSpec c;
  const QString kind = s.value(QStringLiteral("connection/kind")).toString();
  if (remembered) *remembered = kind == QLatin1String("local") || kind == QLatin1String("profile");
  c.kind = kind == QLatin1String("profile") ? Kind::kProfile : Kind::kLocal;
  c.profile = s.value(QStringLiteral("connection/profile")).toString();
  c.local_nodes = std::clamp(s.value(QStringLiteral("local/nodes"), 4).toInt(), 1, 8);
  c.local_cabling = s.value(QStringLiteral("local/cabling"), QStringLiteral("switch")).toString();
  if (c.local_cabling != QLatin1String("ring")) c.local_cabling = QStringLiteral("switch");
  c.local_memory_bytes =
      s.value(QStringLiteral("local/memory_bytes"), QVariant::fromValue<qulonglong>(128ull << 30))
          .toULongLong();
  if (c.local_memory_bytes < (1ull << 30)) c.local_memory_bytes = 1ull << 30;
  c.local_model_roots = s.value(QStringLiteral("local/model_roots")).toStringList();
  return c;
}

void ConnectionSpec::Save(QSettings& s) const {
  s.setValue(QStringLiteral("connection/kind"),
             kind == Kind::kProfile ? QStringLiteral("profile") : QStringLiteral("local"));
  s.setValue(QStringLiteral("connection/profile"), profile);
  s.setValue(QStringLiteral("local/nodes"), local_nodes);
  s.setValue(QStringLiteral("local/cabling"), local_cabling);
  s.setValue(QStringLiteral("local/memory_bytes"),
             QVariant::fromValue<qulonglong>(local_memory_bytes));
  s.setValue(QStringLiteral("local/model_roots"), local_model_roots);
}

ConnectionSpec StartupConnection(QSettings& settings, const std::string& config_dir) {
  bool remembered = false;
  ConnectionSpec c = ConnectionSpec::Load(settings, &remembered);
  if (remembered) return c;
  // A profile of real agents ("default" first, as `octet cluster init` names it).
  QString chosen;
  for (const auto& p : app::ListProfiles(config_dir)) {
    if (p.local || !p.error.empty() || p.nodes == 0) continue;
    if (chosen.isEmpty() || p.name == "default") chosen = QString::fromStdString(p.name);
  }
  if (!chosen.isEmpty()) {
    c.kind = ConnectionSpec::Kind::kProfile;
    c.profile = chosen;
    return c;
  }
  c.kind = ConnectionSpec::Kind::kLocal;
  return c;
}

}  // namespace octet::ui
