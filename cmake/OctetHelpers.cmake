# Helpers shared by every folder's CMakeLists.txt.

# Compile definitions every Octet target sees, describing what was built in.
function(octet_target_defaults target)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${OCTET_CXX_WARNINGS}>)
  target_compile_definitions(${target} PRIVATE
    OCTET_VERSION="${PROJECT_VERSION}"
    OCTET_HAVE_CUDA=$<BOOL:${OCTET_HAVE_CUDA}>
    OCTET_HAVE_NCCL=$<BOOL:${OCTET_HAVE_NCCL}>
    OCTET_HAVE_VERBS=$<BOOL:${OCTET_HAVE_VERBS}>)
endfunction()

# octet_add_library(<folder> SOURCES ... [DEPS ...] [PRIVATE_DEPS ...])
# Creates octet_<folder> (alias octet::<folder>) with public headers in
# <folder>/include and internals beside the sources.
function(octet_add_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(octet_${name} STATIC ${ARG_SOURCES})
  add_library(octet::${name} ALIAS octet_${name})
  target_include_directories(octet_${name}
    PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/include
    PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/src)
  target_link_libraries(octet_${name} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  octet_target_defaults(octet_${name})
endfunction()

# octet_hot_code(<target> [SOURCES ...])
# Code whose loops the tests run hot (the kernels, the model's forward pass,
# the trainer's ops, encoding and chat templates, grammar masks, the kernel
# conformance test's reference matmuls): the whole target, or the
# named sources of it, compile with OCTET_HOT_CXX_FLAGS after the build's own
# flags (the last -O wins). The asan preset builds everything else at -O0,
# which compiles 2.5x faster than -O1 under ASan + UBSan, and this at -O1, so
# the sanitized tests still run in minutes (CI's time: README.md, "Reliability").
function(octet_hot_code target)
  cmake_parse_arguments(ARG "" "" "SOURCES" ${ARGN})
  if(NOT OCTET_HOT_CXX_FLAGS)
    return()
  endif()
  separate_arguments(_hot_flags UNIX_COMMAND "${OCTET_HOT_CXX_FLAGS}")
  # Hot code goes without the tests' shared PCH, which was built at the build's
  # own -O (clang refuses it under another; tests/support/CMakeLists.txt).
  if(ARG_SOURCES)
    set_property(SOURCE ${ARG_SOURCES} APPEND PROPERTY COMPILE_OPTIONS ${_hot_flags})
    set_property(SOURCE ${ARG_SOURCES} PROPERTY SKIP_PRECOMPILE_HEADERS ON)
  else()
    target_compile_options(${target} PRIVATE ${_hot_flags})
    set_target_properties(${target} PROPERTIES DISABLE_PRECOMPILE_HEADERS ON)
  endif()
endfunction()

# octet_add_test(<name> SOURCES ... DEPS ... [LABELS ...] [TIMEOUT s] [GUI])
# A Qt Test executable registered with ctest. Every test gets the fixtures
# directory and the build's bin directory through the environment, and a
# deadline so nothing hangs CI. A program is skipped only by exiting with 77
# (tests/support/octet_test.h says when); no output text can make a test pass
# or skip.
function(octet_add_test name)
  cmake_parse_arguments(ARG "GUI" "TIMEOUT" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  set_target_properties(${name} PROPERTIES AUTOMOC ON
                        RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  target_link_libraries(${name} PRIVATE Qt6::Test ${ARG_DEPS})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests/support)
  octet_target_defaults(${name})
  # The default preset compiles the test programs at -O1: a test's own code
  # is not what it measures, and ~130 of them at -O2 were most of CI's build.
  if(OCTET_TEST_CXX_FLAGS)
    separate_arguments(_test_flags UNIX_COMMAND "${OCTET_TEST_CXX_FLAGS}")
    target_compile_options(${name} PRIVATE ${_test_flags})
  endif()
  # The shared precompiled header (tests/support/CMakeLists.txt); not for the
  # GUI tests, whose QT_GUI_LIB changes what qtest.h declares. Every test
  # that uses it compiles with -pthread (some get it from gRPC's and
  # protobuf's flags, and a PCH is only used under the _REENTRANT it was
  # built with) and sees base's headers (test_pch.h includes one).
  if(TARGET octet_test_pch AND NOT ARG_GUI)
    target_compile_options(${name} PRIVATE -pthread)
    target_link_libraries(${name} PRIVATE octet::base)
    target_precompile_headers(${name} REUSE_FROM octet_test_pch)
    # AUTOMOC's mocs_compilation.cpp is empty for a test that includes its
    # own .moc: loading the header (~300 MB with debug info) would cost more.
    set_source_files_properties(
      ${CMAKE_CURRENT_BINARY_DIR}/${name}_autogen/mocs_compilation.cpp
      PROPERTIES SKIP_PRECOMPILE_HEADERS ON)
  endif()
  set(_args)
  if(ARG_GUI)
    set(_args -platform offscreen)
  endif()
  add_test(NAME ${name} COMMAND ${name} ${_args})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  # Sanitizers slow programs down: ASan about 2x, TSan 5-15x.
  if(OCTET_SANITIZE MATCHES "thread")
    math(EXPR ARG_TIMEOUT "${ARG_TIMEOUT} * 4")
  elseif(OCTET_SANITIZE)
    math(EXPR ARG_TIMEOUT "${ARG_TIMEOUT} * 2")
  endif()
  # Tests of the libraries below app/ (tests/unit/CMakeLists.txt sets the
  # suite for those folders) and those labelled tsan: see _octet_join_suite.
  # (A deferred call's arguments are read when it runs: EVAL fixes them now.)
  if(OCTET_TEST_SUITE_LABEL)
    cmake_language(EVAL CODE
      "cmake_language(DEFER CALL _octet_join_suite ${OCTET_TEST_SUITE_LABEL} ${name})")
  endif()
  if("tsan" IN_LIST ARG_LABELS)
    cmake_language(EVAL CODE "cmake_language(DEFER CALL _octet_join_suite tsan ${name})")
  endif()
  if(NOT ARG_GUI)
    cmake_language(EVAL CODE "cmake_language(DEFER CALL _octet_join_programs_suite ${name})")
  endif()
  set_tests_properties(${name} PROPERTIES
    TIMEOUT ${ARG_TIMEOUT}
    LABELS "${ARG_LABELS}"
    SKIP_RETURN_CODE 77
    ENVIRONMENT "OCTET_FIXTURES_DIR=${OCTET_FIXTURES_DIR};OCTET_BIN_DIR=${CMAKE_BINARY_DIR}/bin;OCTET_SOURCE_DIR=${PROJECT_SOURCE_DIR};QT_QPA_PLATFORM=offscreen")
  # An aarch64 cross build (cmake/toolchains/aarch64-linux-gnu.cmake) runs each
  # test under qemu-user (QEMU_CPU) with the first CPU model of
  # OCTET_ARM64_QEMU_CPUS, under the test's own name; a test labelled isa
  # (its code takes a different path per instruction set: the kernels, the
  # reductions, the model's numerics) runs again with each of the others, as
  # <name>.<cpu>; all labelled arm64. Emulation is slow: four times the
  # deadline, for the program and for each Qt Test function (whose own limit
  # is 5 minutes). The slowest of these tests takes 2-3 minutes under qemu on
  # an idle 2-core host (up to 11 on a crowded one); a hung one must fail
  # inside CI's 90 minutes and name itself (at ten times, one hang ran CI past
  # them with nothing said).
  if(CMAKE_CROSSCOMPILING AND CMAKE_SYSTEM_PROCESSOR STREQUAL "aarch64")
    get_test_property(${name} ENVIRONMENT _env)
    get_test_property(${name} LABELS _labels)
    math(EXPR _timeout "${ARG_TIMEOUT} * 4")
    set(_test ${name})
    set(_cpus ${OCTET_ARM64_QEMU_CPUS})
    if(NOT "isa" IN_LIST ARG_LABELS)
      list(GET _cpus 0 _cpus)
    endif()
    foreach(_cpu ${_cpus})
      if(_cpu_done)
        set(_test ${name}.${_cpu})
        add_test(NAME ${_test} COMMAND ${name} ${_args})
      endif()
      set(_cpu_done ON)
      set_tests_properties(${_test} PROPERTIES
        TIMEOUT ${_timeout}
        LABELS "${_labels};arm64"
        SKIP_RETURN_CODE 77
        ENVIRONMENT "${_env};QEMU_CPU=${_cpu};QTEST_FUNCTION_TIMEOUT=${_timeout}000")
    endforeach()
  endif()
endfunction()

# The suites (tests/unit/CMakeLists.txt makes their targets): the target
# octet_<suite>_tests builds the tests octet_add_test put in <suite>
# (below_app: the unit tests of the libraries below app/; tsan: those
# labelled tsan), and they get the label <suite>, except those that run the
# programs (octet, octet-agent): those link app/ and everything else, which
# the sanitizer stages leave out to keep CI's time (the default build runs
# them). Called at the end of the test's folder, after its add_dependencies.
function(_octet_join_suite suite test)
  get_target_property(_deps ${test} MANUALLY_ADDED_DEPENDENCIES)
  if(_deps AND ("octet" IN_LIST _deps OR "octet-agent" IN_LIST _deps))
    get_test_property(${test} LABELS _labels)
    list(REMOVE_ITEM _labels ${suite})
    set_tests_properties(${test} PROPERTIES LABELS "${_labels}")
    return()
  endif()
  add_dependencies(octet_${suite}_tests ${test})
  set_property(TEST ${test} APPEND PROPERTY LABELS ${suite})
endfunction()

# The suite app_programs: the tests that run the programs octet or
# octet-agent (their targets depend on one), less those labelled packaging
# (they check the build that ships). The asan preset builds them with the
# programs (octet_app_programs_tests) and runs them, so that the programs
# themselves meet the tests' bad input, dead peers and full disks under ASan +
# UBSan (the sanitizer options reach them through the environment). GUI tests
# are left out (the asan build has no workbench). Called at the end of the
# test's folder, after its add_dependencies.
function(_octet_join_programs_suite test)
  get_target_property(_deps ${test} MANUALLY_ADDED_DEPENDENCIES)
  if(NOT _deps OR NOT ("octet" IN_LIST _deps OR "octet-agent" IN_LIST _deps))
    return()
  endif()
  get_test_property(${test} LABELS _labels)
  if("packaging" IN_LIST _labels)
    return()
  endif()
  add_dependencies(octet_app_programs_tests ${test})
  set_property(TEST ${test} APPEND PROPERTY LABELS app_programs)
endfunction()

function(octet_print_summary)
  message(STATUS "")
  message(STATUS "Octet ${PROJECT_VERSION} configuration")
  message(STATUS "  build type      : ${CMAKE_BUILD_TYPE}")
  message(STATUS "  linker          : ${OCTET_LINKER} (OCTET_FAST_LINKER=${OCTET_FAST_LINKER})")
  message(STATUS "  GUI (Qt)        : ${OCTET_WITH_GUI}")
  message(STATUS "  CUDA            : ${OCTET_HAVE_CUDA} (archs ${OCTET_CUDA_ARCHITECTURES})")
  message(STATUS "  NCCL            : ${OCTET_HAVE_NCCL}")
  message(STATUS "  RDMA verbs      : ${OCTET_HAVE_VERBS}")
  message(STATUS "  sanitizers      : ${OCTET_SANITIZE}")
  message(STATUS "  fixtures        : ${OCTET_FIXTURES_DIR}")
  if(OCTET_SUMMARY_LEFT_OUT)
    foreach(_l ${OCTET_SUMMARY_LEFT_OUT})
      message(STATUS "  left out        : ${_l}")
    endforeach()
  else()
    message(STATUS "  left out        : nothing")
  endif()
  message(STATUS "")
endfunction()
