# Cross build for aarch64 Linux (DGX Spark / Grace) from an x86-64 Debian or
# Ubuntu host, with the tests run under qemu-user. Used by the arm64 preset
# (CMakePresets.json), which builds the libraries below app/ and their tests
# from the same target definitions as every other build.
#
# Needs (installers/install-deps.sh installs them on x86-64 Debian hosts):
#   crossbuild-essential-arm64 qemu-user            the compiler and the emulator
#   qt6-base-dev:arm64 libicu-dev:arm64 libpcre2-dev:arm64
#                                                   Qt Test (every test program), ICU and
#                                                   PCRE2 (the tokenizer) for aarch64, from
#                                                   Debian's multiarch archive
#   and for the whole build (the packages): gRPC, Protobuf, SQLite, OpenSSL, cpp-httplib,
#   libibverbs, Qt Charts/OpenGL as :arm64 packages, yaml-cpp's -dev in an overlay
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)

set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

# Multiarch: the aarch64 libraries live in /usr/lib/aarch64-linux-gnu beside the
# host's, and the cross toolchain's own in /usr/aarch64-linux-gnu. Programs
# (moc, pkg-config) come from the host; libraries and headers from those two.
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
# The arm64 preset also builds app/, the agent and the workbench (the packages), whose
# gRPC, yaml-cpp and Qt Charts come from multiarch packages too, except two -dev
# packages Debian does not let sit beside their amd64 twins (libyaml-cpp-dev and
# libgrpc++-dev): install-deps.sh unpacks the first of them into this overlay;
# gRPC's CMake config comes with libgrpc-dev, and its headers are the host's.
set(OCTET_ARM64_OVERLAY /opt/octet-arm64-sysroot)
if(EXISTS ${OCTET_ARM64_OVERLAY})
  list(APPEND CMAKE_FIND_ROOT_PATH ${OCTET_ARM64_OVERLAY})
endif()
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)
unset(ENV{PKG_CONFIG_PATH})

# Qt's host tools (moc) for a cross build: the host's Qt of the same version.
set(QT_HOST_PATH /usr)
set(QT_HOST_PATH_CMAKE_DIR /usr/lib/x86_64-linux-gnu/cmake)

# ctest runs every test program through qemu-user. The CPU model comes from
# QEMU_CPU in each test's environment (octet_add_test registers each test once
# per model: OCTET_ARM64_QEMU_CPUS).
find_program(OCTET_QEMU_AARCH64 qemu-aarch64)
if(OCTET_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${OCTET_QEMU_AARCH64})
endif()
