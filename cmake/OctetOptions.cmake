# Build options. Backends are AUTO by default: on when the toolchain/library is
# found, off (with a line in the configure summary saying so) when it is not.
# ON makes a missing dependency a configure error; OFF skips the probe.
option(OCTET_WITH_GUI "Build the Qt workbench (octet-workbench, ui/)" ON)
set(OCTET_WITH_CUDA AUTO CACHE STRING "CUDA kernels and transport: AUTO, ON or OFF")
set(OCTET_WITH_NCCL AUTO CACHE STRING "NCCL collectives backend: AUTO, ON or OFF")
set(OCTET_WITH_VERBS AUTO CACHE STRING "RDMA verbs transport (rdma-core): AUTO, ON or OFF")
set_property(CACHE OCTET_WITH_CUDA PROPERTY STRINGS AUTO ON OFF)
set_property(CACHE OCTET_WITH_NCCL PROPERTY STRINGS AUTO ON OFF)
set_property(CACHE OCTET_WITH_VERBS PROPERTY STRINGS AUTO ON OFF)
set(OCTET_CUDA_ARCHITECTURES "90;121" CACHE STRING
    "CUDA architectures: 90 = H100/H200, 121 = GB10 (DGX Spark)")
set(OCTET_SANITIZE "" CACHE STRING "Sanitizers, comma separated (e.g. address,undefined)")
set(OCTET_TEST_CXX_FLAGS "" CACHE STRING
  "Flags after the build's own for the test programs (not the libraries they test), e.g. -O1")
set(OCTET_HOT_CXX_FLAGS "" CACHE STRING
  "Flags after the build's own for the hot code (octet_hot_code), e.g. -O1 in a -O0 build")
option(OCTET_WARNINGS_AS_ERRORS "Treat compiler warnings as errors" OFF)
option(OCTET_FUZZ "Build tests/fuzz with libFuzzer (clang; the asan preset sets it)" OFF)
# The libraries below app/ (base, kernels, collectives, engine, trainer) and
# their tests, without agent/, router/, app/ or ui/: no gRPC, yaml-cpp, SQLite,
# cpp-httplib or Qt Widgets needed (Qt Core + Test only). The arm64 cross
# preset builds this.
option(OCTET_BELOW_APP_ONLY "Build only the libraries below app/ and their tests" OFF)
# Cross builds run their tests under qemu-user, each once per CPU model here
# (QEMU_CPU): the first with every feature a Grace core has (qemu's max: SVE2,
# BF16, I8MM, DOTPROD; Debian 12's qemu has no neoverse-v2 model), the second
# an ARMv8.0 core with plain NEON only.
set(OCTET_ARM64_QEMU_CPUS "max;cortex-a53" CACHE STRING
    "qemu-user CPU models the tests of an aarch64 cross build run under")
set(OCTET_FIXTURES_DIR "${CMAKE_CURRENT_SOURCE_DIR}/../shared/fixtures" CACHE PATH
    "Reference fixtures made by independent implementations; tests skip when absent")

foreach(_opt OCTET_WITH_CUDA OCTET_WITH_NCCL OCTET_WITH_VERBS)
  string(TOUPPER "${${_opt}}" _v)
  if(_v STREQUAL "TRUE" OR _v STREQUAL "1" OR _v STREQUAL "YES")
    set(_v ON)
  elseif(_v STREQUAL "FALSE" OR _v STREQUAL "0" OR _v STREQUAL "NO")
    set(_v OFF)
  endif()
  if(NOT _v MATCHES "^(AUTO|ON|OFF)$")
    message(FATAL_ERROR "${_opt} must be AUTO, ON or OFF (got '${${_opt}}')")
  endif()
  set(${_opt} ${_v} CACHE STRING "" FORCE)
endforeach()

if(NOT CMAKE_BUILD_TYPE AND NOT CMAKE_CONFIGURATION_TYPES)
  set(CMAKE_BUILD_TYPE RelWithDebInfo CACHE STRING "Build type" FORCE)
endif()

find_program(OCTET_CCACHE ccache)
if(OCTET_CCACHE)
  set(CMAKE_C_COMPILER_LAUNCHER ${OCTET_CCACHE})
  set(CMAKE_CXX_COMPILER_LAUNCHER ${OCTET_CCACHE})
  set(CMAKE_CUDA_COMPILER_LAUNCHER ${OCTET_CCACHE})
endif()

# The linker: LLVM's lld where the compiler can drive it (Debian's lld
# package, installers/install-deps.sh), else GNU gold (binutils; what a GCC
# cross compiler finds, as it looks for <target>-ld.lld). CI links some 700
# programs across its builds, each against gRPC, Protobuf, Qt and, under ASan,
# large objects: one ASan test program took GNU ld 4.3 s, gold 1.9 s, lld
# 0.8 s. Off, or with neither, the toolchain's own linker links as before.
option(OCTET_FAST_LINKER "Link with lld (else gold) when the compiler can use it" ON)
set(OCTET_LINKER "default")
if(OCTET_FAST_LINKER)
  include(CheckLinkerFlag)
  check_linker_flag(CXX "-fuse-ld=lld" OCTET_HAVE_LLD)
  if(OCTET_HAVE_LLD)
    set(OCTET_LINKER lld)
  else()
    check_linker_flag(CXX "-fuse-ld=gold" OCTET_HAVE_GOLD)
    if(OCTET_HAVE_GOLD)
      set(OCTET_LINKER gold)
    endif()
  endif()
  if(NOT OCTET_LINKER STREQUAL "default")
    add_link_options($<$<LINK_LANGUAGE:C,CXX>:-fuse-ld=${OCTET_LINKER}>)
  endif()
endif()

# Warnings and sanitizers apply to Octet's own targets (octet_target_defaults).
set(OCTET_CXX_WARNINGS -Wall -Wextra -Wpedantic -Wno-unused-parameter -Wno-missing-field-initializers)
if(OCTET_WARNINGS_AS_ERRORS)
  list(APPEND OCTET_CXX_WARNINGS -Werror)
endif()
if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  # Clang's thread-safety analysis holds shared state to its GUARDED_BY /
  # REQUIRES annotations (base/include/octet/base/thread_annotations.h); a
  # finding fails the build. CI's clang build is the asan preset's.
  list(APPEND OCTET_CXX_WARNINGS -Wthread-safety -Werror=thread-safety)
endif()
if(OCTET_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "OCTET_FUZZ needs clang (libFuzzer); the asan preset sets it")
  endif()
  # Coverage feedback from every Octet library the targets reach.
  add_compile_options($<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=fuzzer-no-link>)
endif()
if(OCTET_SANITIZE)
  string(REPLACE "," ";" _sans "${OCTET_SANITIZE}")
  list(JOIN _sans "," _san_flag)
  add_compile_options($<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=${_san_flag}>
                      $<$<COMPILE_LANGUAGE:C,CXX>:-fno-omit-frame-pointer>
                      $<$<COMPILE_LANGUAGE:C,CXX>:-fno-sanitize-recover=undefined>)
  add_link_options(-fsanitize=${_san_flag})
endif()
