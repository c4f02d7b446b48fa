#!/usr/bin/env bash
# The two things a fresh machine does (see README.md):
#
#   installers/bootstrap.sh run    install, build, start the workbench on the local cluster
#   installers/bootstrap.sh test   install, build, run every test
#
# OCTET_PRESET picks the CMake preset (default: "default").
set -euo pipefail
cd "$(dirname "$0")/.."

mode="${1:-}"
preset="${OCTET_PRESET:-default}"
case "$mode" in
  run|test) ;;
  *) echo "usage: installers/bootstrap.sh run|test" >&2; exit 2 ;;
esac

installers/install-deps.sh
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset"

bin="build/$preset/bin"
if [ "$mode" = test ]; then
  exec ctest --preset "$preset"
fi

if [ -n "${DISPLAY:-}" ] || [ -n "${WAYLAND_DISPLAY:-}" ]; then
  exec "$bin/octet-workbench"
fi
echo "bootstrap: no display (DISPLAY/WAYLAND_DISPLAY unset): running the headless equivalent."
echo "bootstrap: for the window, run it from a desktop session, or under a virtual display:"
echo "             xvfb-run -a $bin/octet-workbench"
exec "$bin/octet" --version
