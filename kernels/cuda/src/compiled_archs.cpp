// The architecture list, alone in its file: `octet --version` links only this
// object from the library, so the CLI gains no CUDA runtime dependency.
#include <algorithm>
#include <string>

#include "octet/kernels/cuda/cuda_device.h"

#ifndef OCTET_CUDA_ARCHS
#error \
    "OCTET_CUDA_ARCHS (the CUDA architectures, comma separated) comes from kernels/cuda/CMakeLists.txt"
#endif

namespace octet::kernels::cuda {

std::string CudaCompiledArchitectures() {
  // CMake passes the list comma separated (a ';' would split the definition).
  std::string archs = OCTET_CUDA_ARCHS;
  std::replace(archs.begin(), archs.end(), ',', ';');
  return archs;
}

}  // namespace octet::kernels::cuda
