# Third-party dependencies, all from the distribution (installers/install-deps.sh).
# Required ones fail the configure with the package to install; optional backends
# are probed and recorded for the summary.
find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)

find_package(nlohmann_json 3.10 REQUIRED)   # JSON: configs, tokenizer.json, CLI --json
if(NOT OCTET_BELOW_APP_ONLY)
  find_package(yaml-cpp REQUIRED)             # routing policy
  find_package(SQLite3 REQUIRED)              # benchmark run store
endif()
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)   # Unicode split regexes
# ICU (common library only): NFC/NFKC normalisation and Unicode properties for the
# tokenizer. Already a runtime dependency of Qt 6 Core on Debian and Ubuntu.
find_package(ICU 70 REQUIRED COMPONENTS uc)
if(NOT OCTET_BELOW_APP_ONLY)
  pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib) # OpenAI-compatible HTTP

  # gRPC + Protobuf: the agent wire API. Protobuf is found through gRPC's config.
  find_package(gRPC CONFIG REQUIRED)
  find_package(Protobuf REQUIRED)
  find_program(OCTET_GRPC_CPP_PLUGIN grpc_cpp_plugin REQUIRED)
endif()

# Qt: Core + Test are needed by app/ and the tests; Widgets + Charts by ui/.
set(_qt_components Core Test)
if(OCTET_WITH_GUI AND NOT OCTET_BELOW_APP_ONLY)
  list(APPEND _qt_components Gui Widgets Charts)
endif()
find_package(Qt6 6.4 REQUIRED COMPONENTS ${_qt_components})

# ---- Optional backends ------------------------------------------------------
set(OCTET_SUMMARY_LEFT_OUT "")

# CUDA
set(OCTET_HAVE_CUDA OFF)
if(NOT OCTET_WITH_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER)
    find_program(_nvcc nvcc HINTS /usr/local/cuda/bin ENV CUDA_HOME PATH_SUFFIXES bin)
    if(_nvcc)
      set(CMAKE_CUDA_COMPILER ${_nvcc})
    endif()
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(CMAKE_CUDA_ARCHITECTURES ${OCTET_CUDA_ARCHITECTURES})
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(OCTET_HAVE_CUDA ON)
  elseif(OCTET_WITH_CUDA STREQUAL "ON")
    message(FATAL_ERROR "OCTET_WITH_CUDA=ON but no CUDA compiler (nvcc) was found")
  else()
    list(APPEND OCTET_SUMMARY_LEFT_OUT "CUDA (nvcc not found)")
  endif()
else()
  list(APPEND OCTET_SUMMARY_LEFT_OUT "CUDA (OCTET_WITH_CUDA=OFF)")
endif()

# NCCL (ships with the CUDA toolkit on DGX OS and in /usr/local/cuda here)
set(OCTET_HAVE_NCCL OFF)
if(NOT OCTET_WITH_NCCL STREQUAL "OFF")
  if(OCTET_HAVE_CUDA)
    find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
    find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib /usr/local/cuda/lib64)
  endif()
  if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
    # Headers only: libnccl is loaded at run time (collectives/src/nccl_loader.h),
    # so the programs start on machines without it.
    add_library(octet_nccl_dep INTERFACE IMPORTED)
    target_include_directories(octet_nccl_dep INTERFACE ${NCCL_INCLUDE_DIR})
    get_filename_component(_nccl_dir "${NCCL_LIBRARY}" DIRECTORY)
    target_compile_definitions(octet_nccl_dep INTERFACE OCTET_NCCL_LIBRARY_DIR="${_nccl_dir}")
    set(OCTET_HAVE_NCCL ON)
  elseif(OCTET_WITH_NCCL STREQUAL "ON")
    message(FATAL_ERROR "OCTET_WITH_NCCL=ON but nccl.h / libnccl were not found (needs CUDA)")
  else()
    list(APPEND OCTET_SUMMARY_LEFT_OUT "NCCL (nccl.h/libnccl not found or CUDA off)")
  endif()
else()
  list(APPEND OCTET_SUMMARY_LEFT_OUT "NCCL (OCTET_WITH_NCCL=OFF)")
endif()

# RDMA verbs (rdma-core)
set(OCTET_HAVE_VERBS OFF)
if(NOT OCTET_WITH_VERBS STREQUAL "OFF")
  find_path(IBVERBS_INCLUDE_DIR infiniband/verbs.h)
  find_library(IBVERBS_LIBRARY ibverbs)
  if(IBVERBS_INCLUDE_DIR AND IBVERBS_LIBRARY)
    # Headers only: libibverbs is loaded at run time (octet/collectives/verbs_api.h).
    add_library(octet_verbs_dep INTERFACE IMPORTED)
    target_include_directories(octet_verbs_dep INTERFACE ${IBVERBS_INCLUDE_DIR})
    set(OCTET_HAVE_VERBS ON)
  elseif(OCTET_WITH_VERBS STREQUAL "ON")
    message(FATAL_ERROR "OCTET_WITH_VERBS=ON but libibverbs was not found (install libibverbs-dev)")
  else()
    list(APPEND OCTET_SUMMARY_LEFT_OUT "RDMA verbs (libibverbs-dev not found)")
  endif()
else()
  list(APPEND OCTET_SUMMARY_LEFT_OUT "RDMA verbs (OCTET_WITH_VERBS=OFF)")
endif()

if(NOT OCTET_WITH_GUI)
  list(APPEND OCTET_SUMMARY_LEFT_OUT "Qt workbench (OCTET_WITH_GUI=OFF)")
endif()
