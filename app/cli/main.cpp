// `octet`: one command line for everything headless (see shared/docs/CLI.md).
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "command.h"
#include "octet/base/args.h"
#include "octet/base/build_info.h"
#include "octet/collectives/runtime_libraries.h"
#if OCTET_HAVE_CUDA
#include "octet/kernels/cuda/cuda_device.h"
#endif

namespace {

void PrintHelp() {
  std::cout << "usage: octet <command> [flags]   (octet <command> --help for its flags)\n\n"
               "Octet: desk-side AI cluster workbench for 1-8 DGX Spark nodes.\n\ncommands:\n";
  for (const auto& c : octet::cli::Commands()) {
    std::string name(c.name);
    std::cout << "  " << name << std::string(name.size() < 12 ? 12 - name.size() : 1, ' ') << c.summary;
    if (!c.run) std::cout << "  [not in this build yet]";
    std::cout << "\n";
  }
  std::cout << "\n  --version   print the version and what this build includes\n"
               "  help --commands   list every command and subcommand, one per line\n";
}

}  // namespace

int main(int argc, char** argv) {
  // Every command and subcommand, one per line (for scripts and the CLI tests).
  if (argc == 3 && std::string(argv[1]) == "help" && std::string(argv[2]) == "--commands") {
    std::cout << octet::cli::ListCommandWords();
    return octet::cli::kExitOk;
  }
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h" ||
      std::string(argv[1]) == "help") {
    PrintHelp();
    return argc < 2 ? octet::cli::kExitUsage : octet::cli::kExitOk;
  }
  const std::string name = argv[1];
  if (name == "--version" || name == "version") {
    std::cout << octet::GetBuildInfo().ToString() << "\n";
#if OCTET_HAVE_CUDA
    std::cout << "CUDA kernels for architectures "
              << octet::kernels::cuda::CudaCompiledArchitectures() << "\n";
#endif
    std::cout << octet::collectives::RuntimeLibrariesLine() << "\n";
    return octet::cli::kExitOk;
  }
  for (const auto& c : octet::cli::Commands()) {
    if (c.name != name) continue;
    if (!c.run) {
      std::cerr << "octet " << name << ": not available in this build yet: " << c.pending << "\n";
      return octet::cli::kExitUnavailable;
    }
    std::vector<std::string> args(argv + 2, argv + argc);
    return c.run(args);
  }
  std::vector<std::string> names = {"help", "version"};
  for (const auto& c : octet::cli::Commands()) names.emplace_back(c.name);
  // "octet --json ..." and other flags in the command's place get the same help.
  const std::string bare = name.rfind("--", 0) == 0 ? name.substr(2) : name;
  const std::string near = octet::ClosestMatch(bare, names);
  std::cerr << "octet: unknown command '" << name << "'"
            << (near.empty() ? std::string() : "; did you mean '" + near + "'?")
            << " (see octet --help)\n";
  return octet::cli::kExitUsage;
}
