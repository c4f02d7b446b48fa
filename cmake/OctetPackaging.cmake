# .deb packages with CPack (cpack -G DEB in a build directory, or the
# `package` target): one per component.
#   octet            the CLI and engine, resources, octet-serve@/octet-route@ units
#   octet-agent      the node agent and its systemd unit
#   octet-workbench  the Qt workbench, its .desktop entry and icon set
# The architecture is the target's: the build host's (dpkg --print-architecture)
# for a native build, arm64 for the aarch64 cross build (the arm64 preset, built
# with the arm64-packages build preset; its packages have no CUDA engine: build
# on the Spark for that).
# Library dependencies come from dpkg-shlibdeps; CUDA, NCCL and libibverbs are
# not among them: they are loaded at run time when present (see
# collectives/include/octet/collectives/runtime_libraries.h).
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME octet)
set(CPACK_PACKAGE_VENDOR "Octet")
set(CPACK_PACKAGE_CONTACT "Octet maintainers <octet@localhost>")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
# (No CPACK_PACKAGE_DESCRIPTION_SUMMARY: each package's description below starts
# with its own summary line; CPack indents the lines after it.)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL octet agent)
if(OCTET_WITH_GUI)
  list(APPEND CPACK_COMPONENTS_ALL workbench)
endif()
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
if(CMAKE_CROSSCOMPILING AND CMAKE_SYSTEM_PROCESSOR STREQUAL "aarch64")
  set(CPACK_DEBIAN_PACKAGE_ARCHITECTURE arm64)
endif()
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)
set(CPACK_DEBIAN_ENABLE_COMPONENT_DEPENDS ON)
# Maintainer scripts (installers/debian/<package>/): keep their mode 0755.
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
# Debug info stays in the build tree; the packages carry stripped programs.
set(CPACK_STRIP_FILES ON)

set(_deb ${PROJECT_SOURCE_DIR}/installers/debian)
set(CPACK_DEBIAN_OCTET_PACKAGE_NAME octet)
set(CPACK_DEBIAN_OCTET_DESCRIPTION
    "Octet command line and embedded LLM engine\ngenerate, chat, serve (OpenAI-compatible HTTP), route, bench, train, cluster.\nRuns on CPUs everywhere; uses CUDA, NCCL and RDMA verbs where installed.")
set(CPACK_DEBIAN_OCTET_PACKAGE_CONTROL_EXTRA "${_deb}/octet/postinst;${_deb}/octet/postrm")
set(CPACK_DEBIAN_AGENT_PACKAGE_NAME octet-agent)
set(CPACK_DEBIAN_AGENT_DESCRIPTION
    "Octet node agent\nPer-node gRPC daemon: node facts, telemetry, link discovery, jobs.\nRuns as the system user octet under a sandboxed systemd unit.")
set(CPACK_DEBIAN_AGENT_PACKAGE_CONTROL_EXTRA
    "${_deb}/octet-agent/postinst;${_deb}/octet-agent/prerm;${_deb}/octet-agent/postrm")
set(CPACK_DEBIAN_WORKBENCH_PACKAGE_NAME octet-workbench)
set(CPACK_DEBIAN_WORKBENCH_DESCRIPTION
    "Octet workbench (Qt)\nThe cluster in one window: nodes, launch, dashboard, chat, routing, benchmarks.")
set(CPACK_DEBIAN_WORKBENCH_PACKAGE_SECTION x11)

include(CPack)
cpack_add_component(octet DISPLAY_NAME "octet" DESCRIPTION "CLI and engine")
# The agent starts `octet` for its jobs; the workbench's local cluster runs both.
cpack_add_component(agent DISPLAY_NAME "octet-agent" DEPENDS octet)
cpack_add_component(workbench DISPLAY_NAME "octet-workbench" DEPENDS octet agent)

# The systemd units, with the packages' program folder (/usr/bin). A source
# install uses installers/install-agent.sh, which writes its own copy.
foreach(_unit octet-agent.service octet-serve@.service octet-route@.service)
  file(READ ${PROJECT_SOURCE_DIR}/installers/systemd/${_unit} _text)
  string(REPLACE "@BINDIR@" "${CPACK_PACKAGING_INSTALL_PREFIX}/bin" _text "${_text}")
  file(GENERATE OUTPUT ${CMAKE_BINARY_DIR}/systemd/${_unit} CONTENT "${_text}")
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
               ${PROJECT_SOURCE_DIR}/installers/systemd/${_unit})
endforeach()
install(FILES ${CMAKE_BINARY_DIR}/systemd/octet-agent.service
        DESTINATION lib/systemd/system COMPONENT agent)
install(FILES ${CMAKE_BINARY_DIR}/systemd/octet-serve@.service
              ${CMAKE_BINARY_DIR}/systemd/octet-route@.service
        DESTINATION lib/systemd/system COMPONENT octet)
