#!/usr/bin/env bash
# The two things a fresh machine does (see README.md):
#
#   installers/bootstrap.sh run    install, build, start the workbench on the local cluster
#   installers/bootstrap.sh test   install, build, run every test (then the sanitizer
#                                  and arm64 builds, then fuzz the parsers)
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
  ctest --preset "$preset"
  # The libraries below app/, their unit tests and the parsers' fuzz targets
  # under ASan + UBSan, in one clang build (the asan preset; its libraries
  # also carry libFuzzer's coverage hooks and get clang's thread-safety
  # analysis), and the threaded tests (collectives, thread pool, scheduler,
  # router) under TSan: README.md, "Reliability".
  cmake --preset asan >/dev/null
  cmake --build --preset asan
  ctest --preset asan
  cmake --preset tsan >/dev/null
  cmake --build --preset tsan
  ctest --preset tsan
  # The libraries below app/ and their tests built for aarch64 (Grace) and run
  # under qemu-user, with a Grace-like CPU and with plain NEON: the arm64
  # preset, on x86-64 hosts where install-deps.sh installed the cross tools.
  if [ "$(uname -m)" = x86_64 ] && command -v aarch64-linux-gnu-g++ >/dev/null &&
    command -v qemu-aarch64 >/dev/null; then
    # CI builds and runs the whole label (README.md, "arm64"): every test of
    # the libraries below app/ (the suite target octet_below_app_tests), two
    # at a time (qemu-user runs each test's program on one core).
    cmake --preset arm64 >/dev/null
    cmake --build --preset arm64 --target octet_below_app_tests
    ctest --preset arm64 --parallel 2
  fi
  # Then the parsers' fuzz targets (built above), OCTET_FUZZ_SECONDS (30)
  # each, two at a time: tests/fuzz.
  exec ctest --preset fuzz
fi

if [ -n "${DISPLAY:-}" ] || [ -n "${WAYLAND_DISPLAY:-}" ]; then
  exec "$bin/octet-workbench" --local
fi
# No display: a window cannot be shown here. Say so, and show what it would
# show: the workbench runs once under a virtual X display on the local
# cluster and saves a screenshot of each panel.
echo "bootstrap: no display (DISPLAY and WAYLAND_DISPLAY are unset): the workbench window cannot open here." >&2
echo "bootstrap: run this from a desktop session (or with ssh -X) to get the window." >&2
if command -v xvfb-run >/dev/null; then
  shots="build/$preset/screenshots"
  echo "bootstrap: meanwhile: the workbench on the local cluster under a virtual display, one screenshot per panel in $shots/" >&2
  mkdir -p "$shots"
  timeout 120 xvfb-run -a -s "-screen 0 1440x900x24" "$bin/octet-workbench" --local --screenshots "$shots" \
    --window-size 1440x900
  ls "$shots"/*.png
else
  echo "bootstrap: xvfb-run is not installed either; the cluster from the command line:" >&2
  exec "$bin/octet" cluster local --help
fi
