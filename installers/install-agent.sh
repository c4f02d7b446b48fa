#!/usr/bin/env bash
# Installs octet-agent on this node as a systemd service and enables it.
#
#   installers/install-agent.sh --token-file TOKEN [--listen ADDR:PORT]
#       [--tls-cert NODE.pem --tls-key NODE.key] [--model-roots DIR,...]
#       [--bin DIR] [--prefix /usr/local] [--root DIR] [--no-start]
#
# TOKEN (and the node certificate and key with TLS) come from
# `octet cluster init` on the machine that drives the cluster:
#   ~/.config/octet/clusters/<name>/token, nodes/<node>.pem, nodes/<node>.key
#
#   --listen       address the agent serves on (default 127.0.0.1:47100: this node
#                  only; give the node's cluster-network address to be reachable)
#   --model-roots  folders jobs may load models from (default /var/lib/octet/models)
#   --bin          folder with the built octet-agent and octet (default build/default/bin)
#   --prefix       where the programs go (default /usr/local: PREFIX/bin)
#   --root         install under this folder instead of / (packaging, tests); implies --no-start
#   --no-start     install the files only; do not enable or start the service
#
# Writes: PREFIX/bin/{octet-agent,octet}, /etc/octet/token (0600),
# /etc/octet/node.{pem,key} (key 0600), /etc/octet/agent.env,
# /etc/systemd/system/octet-agent.service. The agent runs as the system user
# `octet` (created here when missing; it owns /etc/octet). The octet-agent
# .deb installs the same unit (cpack; see cmake/OctetPackaging.cmake).
# Exit 2 on bad arguments, 1 on failure.
set -euo pipefail

usage() { sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "install-agent.sh: $1" >&2; exit "${2:-1}"; }

here="$(cd "$(dirname "$0")" && pwd)"
token_file="" listen="127.0.0.1:47100" tls_cert="" tls_key="" model_roots="/var/lib/octet/models"
bindir="$here/../build/default/bin" prefix="/usr/local" root="" start=1
while [ $# -gt 0 ]; do
  case "$1" in
    --token-file) token_file="${2:-}"; shift 2 ;;
    --listen) listen="${2:-}"; shift 2 ;;
    --tls-cert) tls_cert="${2:-}"; shift 2 ;;
    --tls-key) tls_key="${2:-}"; shift 2 ;;
    --model-roots) model_roots="${2:-}"; shift 2 ;;
    --bin) bindir="${2:-}"; shift 2 ;;
    --prefix) prefix="${2:-}"; shift 2 ;;
    --root) root="${2:-}"; start=0; shift 2 ;;
    --no-start) start=0; shift ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" 2 ;;
  esac
done

[ -n "$token_file" ] || die "--token-file is required (from \`octet cluster init\`)" 2
[ -r "$token_file" ] || die "cannot read token file '$token_file'" 2
[ -s "$token_file" ] || die "token file '$token_file' is empty" 2
if [ -n "$tls_cert" ] || [ -n "$tls_key" ]; then
  [ -n "$tls_cert" ] && [ -n "$tls_key" ] || die "--tls-cert and --tls-key go together" 2
  [ -r "$tls_cert" ] || die "cannot read '$tls_cert'" 2
  [ -r "$tls_key" ] || die "cannot read '$tls_key'" 2
fi
case "$listen" in
  *:*) ;;
  *) die "--listen must be ADDR:PORT (got '$listen')" 2 ;;
esac
for prog in octet-agent octet; do
  [ -x "$bindir/$prog" ] || die "no $prog in '$bindir' (build first: cmake --build --preset default, or pass --bin)" 2
done
if [ -z "$root" ] && [ "$(id -u)" -ne 0 ]; then
  die "run as root (it writes /etc and $prefix), or use --root DIR" 1
fi

etc="$root/etc/octet"
install -d -m 0755 "$root$prefix/bin" "$root/etc/systemd/system"
install -d -m 0700 "$etc"
install -m 0755 "$bindir/octet-agent" "$bindir/octet" "$root$prefix/bin/"
install -m 0600 "$token_file" "$etc/token"
args="--listen $listen --model-roots $model_roots"
if [ -n "$tls_cert" ]; then
  install -m 0644 "$tls_cert" "$etc/node.pem"
  install -m 0600 "$tls_key" "$etc/node.key"
  args="$args --tls-cert /etc/octet/node.pem --tls-key /etc/octet/node.key"
fi
umask 022
printf '# octet-agent flags (see octet-agent --help); written by install-agent.sh\nOCTET_AGENT_ARGS="%s"\n' \
  "$args" > "$etc/agent.env"
sed "s|@BINDIR@|$prefix/bin|g" "$here/systemd/octet-agent.service" \
  > "$root/etc/systemd/system/octet-agent.service"
chmod 0644 "$root/etc/systemd/system/octet-agent.service"
if [ -z "$root" ]; then
  # The unit runs the agent as `octet`: it must read its token and key.
  if ! getent passwd octet >/dev/null; then
    useradd --system --user-group --home-dir /var/lib/octet --no-create-home \
      --shell /usr/sbin/nologin --comment "Octet services" octet
  fi
  chown -R octet:octet "$etc"
fi
echo "install-agent.sh: installed octet-agent to $root$prefix/bin, configuration in $etc"

if [ "$start" = 0 ]; then
  echo "install-agent.sh: not started (enable with: systemctl daemon-reload && systemctl enable --now octet-agent)"
  exit 0
fi
if ! command -v systemctl >/dev/null 2>&1 || [ ! -d /run/systemd/system ]; then
  die "systemd is not running on this machine; files are installed, start the agent by hand:
  $prefix/bin/octet-agent --token-file /etc/octet/token --state-dir /var/lib/octet $args" 1
fi
systemctl daemon-reload
systemctl enable --now octet-agent.service
systemctl --no-pager --lines=0 status octet-agent.service || true
echo "install-agent.sh: octet-agent enabled and started (journalctl -u octet-agent for its log)"
