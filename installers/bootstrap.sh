#!/usr/bin/env bash
# The two things a fresh machine does (see README.md):
#
#   installers/bootstrap.sh run    install, build, start the workbench on the local cluster
#   installers/bootstrap.sh test   install, build, run every test (then the libraries'
#                                  and programs' files with DGX OS's GCC 13, the
#                                  sanitizer and arm64 builds and packages, then fuzz
#                                  the parsers)
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

# Each stage says how long it took, and the test run ends with the table: CI
# has 90 minutes for all of it (README.md, "Reliability").
declare -a stage_times=()
timed() {
  local name=$1 start=$SECONDS
  shift
  "$@"
  stage_times+=("$(printf '%-28s %6d s' "$name" $((SECONDS - start)))")
  echo "bootstrap: $name: $((SECONDS - start)) s (${SECONDS} s so far)" >&2
}

timed "install dependencies" installers/install-deps.sh
cmake --preset "$preset" >/dev/null
timed "build ($preset)" cmake --build --preset "$preset"

bin="build/$preset/bin"
if [ "$mode" = test ]; then
  timed "tests ($preset)" ctest --preset "$preset"
  # Every C++ file of the libraries, programs and workbench again with GCC 13,
  # DGX OS's compiler (syntax only; GCC 13 from install-deps.sh on Debian 12;
  # the test programs only with --all, by hand): tests/compat/gcc13_syntax.py.
  # Exit 77, no GCC 13 on this host, is a skip; anything else fails the run.
  gcc13_check() {
    local rc=0
    tests/compat/gcc13_syntax.py "build/$preset" || rc=$?
    [ "$rc" = 0 ] || [ "$rc" = 77 ]
  }
  timed "DGX OS compiler (GCC 13)" gcc13_check
  # The libraries below app/, their unit tests and the parsers' fuzz targets
  # under ASan + UBSan, in one clang build (the asan preset: -O0 but for the
  # hot loops at -O1; the libraries also carry libFuzzer's coverage hooks and
  # get clang's thread-safety analysis), and the threaded tests (collectives,
  # thread pool, scheduler, router) under TSan: README.md, "Reliability".
  cmake --preset asan >/dev/null
  timed "build (asan + fuzz targets)" cmake --build --preset asan
  timed "tests (asan)" ctest --preset asan
  cmake --preset tsan >/dev/null
  timed "build (tsan)" cmake --build --preset tsan
  timed "tests (tsan)" ctest --preset tsan
  # The libraries below app/ and their tests built for aarch64 (Grace) and run
  # under qemu-user, with a Grace-like CPU and with plain NEON: the arm64
  # preset, on x86-64 hosts where install-deps.sh installed the cross tools.
  if [ "$(uname -m)" = x86_64 ] && command -v aarch64-linux-gnu-g++ >/dev/null &&
    command -v qemu-aarch64 >/dev/null; then
    # Every test of the libraries below app/ (the suite target
    # octet_below_app_tests), two at a time (qemu-user runs each program on
    # one core); the second CPU only for the tests labelled isa (README.md,
    # "arm64").
    cmake --preset arm64 >/dev/null
    timed "build (arm64)" cmake --build --preset arm64 --target octet_below_app_tests
    timed "tests (arm64, qemu)" ctest --preset arm64 --parallel 2
    # The arm64 .deb packages (CLI and engine, agent, workbench; no CUDA from
    # an x86 host), checked as the amd64 ones are: installed into a scratch
    # root, their programs run under qemu (tests/packaging). Same build
    # folder: the libraries come from the stage above.
    timed "build (arm64 packages)" cmake --build --preset arm64-packages
    timed "tests (arm64 packages)" ctest --preset arm64-packages
  fi
  # Then the parsers' fuzz targets (built above), OCTET_FUZZ_SECONDS each, two
  # at a time: tests/fuzz.
  timed "fuzz" ctest --preset fuzz
  echo "bootstrap: the test run, stage by stage:" >&2
  printf '  %s\n' "${stage_times[@]}" >&2
  echo "  total                        $(printf '%6d' $SECONDS) s" >&2
  exit 0
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
