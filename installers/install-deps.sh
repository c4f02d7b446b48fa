#!/usr/bin/env bash
# Installs every distribution package Octet's build and tests need.
# Works on Debian 12 and Ubuntu 24.04 (DGX OS), amd64 and arm64. Idempotent:
# when everything is present it prints nothing and exits 0.
#
#   installers/install-deps.sh          build + test dependencies
#   installers/install-deps.sh --bench  also the comparison baselines used by
#                                       tests/bench (OpenMPI, PyTorch CPU)
set -euo pipefail

want_bench=0
for a in "$@"; do
  case "$a" in
    --bench) want_bench=1 ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "install-deps.sh: unknown argument '$a'" >&2; exit 2 ;;
  esac
done

if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-deps.sh: this script supports Debian/Ubuntu (apt); install the equivalents of the" >&2
  echo "packages listed in it by hand" >&2
  exit 1
fi

packages=(
  # toolchain
  build-essential cmake ninja-build pkg-config ccache git
  # the linker every native build uses (OCTET_FAST_LINKER): links 5x faster than GNU ld
  lld
  # the fuzz preset: clang with libFuzzer and the sanitizer runtimes (tests/fuzz)
  clang libclang-rt-dev
  # Qt 6: Core/Test for app and tests; Widgets, OpenGL (Charts needs it), Charts for the workbench
  qt6-base-dev qt6-base-dev-tools libqt6opengl6-dev qt6-charts-dev libgl-dev libxkbcommon-dev
  # gRPC + Protobuf with the C++ code generators
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  # configuration, storage, text, HTTP
  libyaml-cpp-dev libsqlite3-dev sqlite3 libpcre2-dev libicu-dev nlohmann-json3-dev libcpp-httplib-dev libssl-dev
  # RDMA (rdma-core): verbs headers, providers and tools for the device probe
  libibverbs-dev ibverbs-providers rdma-core
  # tests: Jinja2 renders the fixtures' chat templates as the reference for the C++ ones
  python3-jinja2
  # packages (tests/packaging): dpkg-dev (dpkg-shlibdeps, dpkg-deb) for cpack's .debs, binutils
  # (readelf) for the no-CUDA-link check, systemd (systemd-analyze) to rate the units
  dpkg-dev binutils systemd
  # tests: a virtual display for the window, namespaces/veth for multi-host tests, an HTTP client
  xvfb xauth iproute2 curl fonts-dejavu-core procps
  # tests: promtool (from prometheus) lints the /metrics of serve and route
  prometheus
  # tests: pip for the official `openai` Python client (below), run against octet serve
  python3-pip
)
if [ "$want_bench" = 1 ]; then
  # OpenBLAS: Debian's torch calls libblas.so.3, which is the unoptimised reference BLAS
  # unless an optimised one is installed; the PyTorch baseline must not be handicapped.
  packages+=(libopenmpi-dev openmpi-bin python3-torch python3-numpy libopenblas0-pthread)
fi

# The arm64 cross build (the arm64 preset; bootstrap.sh test runs it on x86-64
# Debian hosts): the cross compiler, qemu-user to run its tests, and Qt Test,
# ICU and PCRE2 for aarch64 from Debian's multiarch archive (every test program
# links Qt Test; the tokenizer ICU and PCRE2), hence the foreign architecture.
# The arm64 preset's packages (the .debs for aarch64) add what app/, the agent
# and the workbench link, as :arm64 packages, and yaml-cpp's headers' CMake
# config and link name from libyaml-cpp-dev:arm64, which Debian will not
# install beside libyaml-cpp-dev:amd64: it is unpacked into an overlay folder
# the toolchain file searches (/opt/octet-arm64-sysroot, below). gRPC's C++
# link names (libgrpc++-dev) are not needed: its CMake config (libgrpc-dev)
# names the libraries' own files, and the headers are the host's.
# OCTET_ARM64=0 leaves it out. On arm64 hosts the ordinary build is the arm64 one.
cross_arm64=0
if [ "${OCTET_ARM64:-1}" != 0 ] && [ "$(dpkg --print-architecture)" = amd64 ] &&
  grep -qx 'ID=debian' /etc/os-release 2>/dev/null; then
  cross_arm64=1
  packages+=(crossbuild-essential-arm64 qemu-user qt6-base-dev:arm64 libicu-dev:arm64
             libpcre2-dev:arm64
             qt6-charts-dev:arm64 libqt6opengl6-dev:arm64 libgl-dev:arm64 libxkbcommon-dev:arm64
             libgrpc-dev:arm64 libgrpc++1.51:arm64 libprotobuf-dev:arm64 libabsl-dev:arm64
             libre2-dev:arm64 libc-ares-dev:arm64 libyaml-cpp0.7:arm64 libsqlite3-dev:arm64
             libssl-dev:arm64 libcpp-httplib-dev:arm64 libbrotli-dev:arm64 zlib1g-dev:arm64
             libibverbs-dev:arm64)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
SUDO=""
if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then SUDO="sudo"; fi
if [ ${#missing[@]} -gt 0 ] && [ "$(id -u)" -ne 0 ] && [ -z "$SUDO" ]; then
  echo "install-deps.sh: missing packages (${missing[*]}) and not root; run as root or install sudo" >&2
  exit 1
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps.sh: installing ${#missing[@]} package(s): ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  if [ "$cross_arm64" = 1 ] && ! dpkg --print-foreign-architectures | grep -qx arm64; then
    $SUDO dpkg --add-architecture arm64
  fi
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  echo "install-deps.sh: done"
fi

# The arm64 overlay: libyaml-cpp-dev:arm64 unpacked (not installed), its
# library names pointing at the installed libyaml-cpp0.7:arm64. Redone when the
# version differs from the one unpacked.
if [ "$cross_arm64" = 1 ]; then
  overlay=/opt/octet-arm64-sysroot
  want=$(dpkg-query -W -f='${Version}' libyaml-cpp0.7:arm64)
  if [ "$(cat "$overlay/.libyaml-cpp-dev" 2>/dev/null)" != "$want" ]; then
    echo "install-deps.sh: unpacking libyaml-cpp-dev:arm64 $want into $overlay"
    tmp=$(mktemp -d)
    chmod 755 "$tmp"  # apt's download sandbox user writes here
    if ! (cd "$tmp" && apt-get download -qq "libyaml-cpp-dev:arm64=$want" >/dev/null 2>&1) ||
      ! ls "$tmp"/libyaml-cpp-dev_*_arm64.deb >/dev/null 2>&1; then
      echo "install-deps.sh: could not download libyaml-cpp-dev:arm64=$want (apt-get download)" >&2
      exit 1
    fi
    $SUDO rm -rf "$overlay"
    $SUDO mkdir -p "$overlay"
    $SUDO dpkg -x "$tmp"/libyaml-cpp-dev_*_arm64.deb "$overlay"
    for f in $(dpkg -L libyaml-cpp0.7:arm64 | grep '^/usr/lib/aarch64-linux-gnu/.*\.so'); do
      $SUDO ln -sf "$f" "$overlay/usr/lib/aarch64-linux-gnu/$(basename "$f")"
    done
    echo "$want" | $SUDO tee "$overlay/.libyaml-cpp-dev" >/dev/null
    rm -rf "$tmp"
  fi
fi

# GCC 13, the compiler of DGX OS (Ubuntu 24.04), for bootstrap.sh test's
# stage that compiles every file with it (tests/compat/gcc13_syntax.py): its
# libstdc++ includes fewer headers through others than Debian 12's GCC 12, so
# a file can build here and fail on a Spark. Debian 12 has no GCC 13: Debian
# 13's packages are unpacked (not installed) into /opt/octet-gcc13 with the C
# library they were built for, which /opt/octet-gcc13/run loads. amd64 Debian
# 12 hosts only (Ubuntu 24.04 has g++-13 itself); OCTET_GCC13=0 leaves it out.
gcc13=/opt/octet-gcc13
if [ "${OCTET_GCC13:-1}" != 0 ] && [ "$(dpkg --print-architecture)" = amd64 ] &&
  grep -qx 'ID=debian' /etc/os-release 2>/dev/null &&
  grep -qx 'VERSION_ID="12"' /etc/os-release 2>/dev/null && [ ! -x "$gcc13/g++" ]; then
  echo "install-deps.sh: unpacking GCC 13 of Debian 13 into $gcc13"
  tmp=$(mktemp -d)
  chmod 755 "$tmp"  # apt's download sandbox user writes here
  mkdir -p "$tmp/lists/partial" "$tmp/cache/archives/partial"
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main" \
    > "$tmp/sources.list"
  apt_tmp=(-o "Dir::Etc::sourcelist=$tmp/sources.list" -o Dir::Etc::sourceparts=-
           -o "Dir::State::Lists=$tmp/lists" -o "Dir::Cache=$tmp/cache")
  if ! apt-get -qq "${apt_tmp[@]}" update >/dev/null 2>&1 ||
    ! (cd "$tmp" && apt-get -qq "${apt_tmp[@]}" download \
         g++-13 g++-13-x86-64-linux-gnu gcc-13 gcc-13-x86-64-linux-gnu cpp-13 \
         cpp-13-x86-64-linux-gnu gcc-13-base libgcc-13-dev libstdc++-13-dev \
         libc6 libisl23 libmpc3 libmpfr6 libgmp10 zlib1g libzstd1 libstdc++6 libgcc-s1 \
         >/dev/null 2>&1); then
    echo "install-deps.sh: could not download GCC 13 from Debian 13 (apt-get download)" >&2
    exit 1
  fi
  $SUDO rm -rf "$gcc13"
  $SUDO mkdir -p "$gcc13/root" "$gcc13/rt"
  for d in "$tmp"/*.deb; do
    case "$(basename "$d")" in
      libc6_*|libisl23_*|libmpc3_*|libmpfr6_*|libgmp10_*|zlib1g_*|libzstd1_*|libstdc++6_*|libgcc-s1_*)
        $SUDO dpkg -x "$d" "$gcc13/rt" ;;
      *) $SUDO dpkg -x "$d" "$gcc13/root" ;;
    esac
  done
  printf '%s\n' '#!/bin/sh' '# A program of Debian 13 run with its own C library (install-deps.sh).' \
    "R=$gcc13/rt/usr/lib/x86_64-linux-gnu" \
    'exec "$R/ld-linux-x86-64.so.2" --library-path "$R" "$@"' | $SUDO tee "$gcc13/run" >/dev/null
  printf '%s\n' '#!/bin/sh' '# GCC 13 of Debian 13: its driver and every program it starts through run.' \
    "exec $gcc13/run $gcc13/root/usr/bin/x86_64-linux-gnu-g++-13 -wrapper $gcc13/run \"\$@\"" |
    $SUDO tee "$gcc13/g++" >/dev/null
  $SUDO chmod 755 "$gcc13/run" "$gcc13/g++"
  rm -rf "$tmp"
  if ! "$gcc13/g++" -dumpfullversion | grep -q '^13\.'; then
    echo "install-deps.sh: the GCC 13 unpacked into $gcc13 does not run" >&2
    $SUDO rm -f "$gcc13/g++"
    exit 1
  fi
fi

# PyPI: the official OpenAI Python client (Debian has no package of it), which
# tests/integration/serving/openai_client_check.py drives against octet serve.
if ! python3 -c 'import openai' >/dev/null 2>&1; then
  echo "install-deps.sh: installing the openai Python client (pip)"
  pip_flags=(--quiet --disable-pip-version-check)
  # Debian 12 marks its Python externally managed (PEP 668).
  if python3 -m pip install --help 2>/dev/null | grep -q -- --break-system-packages; then
    pip_flags+=(--break-system-packages)
  fi
  $SUDO python3 -m pip install "${pip_flags[@]}" openai
fi
