#!/usr/bin/env python3
"""Every C++ file of a configured build tree, compiled by GCC 13 (-fsyntax-only).

DGX OS (Ubuntu 24.04) builds Octet with GCC 13, whose libstdc++ includes fewer
headers through others than Debian 12's GCC 12 (<cstdint>, <string>, <cstdio>,
<cstdlib>, <system_error>): a file that builds here can fail on a Spark. This
runs each translation unit of BUILD_DIR/compile_commands.json with its own
flags through GCC 13, parsing and instantiating only (no code, no objects).
Generated files are left out: Qt's moc output (*_autogen/, which only
includes the project's headers, each checked through its own .cpp) and
protoc's *.pb.cc (Ubuntu's protoc writes its own): a quarter of the files.
So are the test programs (tests/, 175 of 404 files) unless --all is given:
what DGX OS builds to run are the libraries, programs and workbench, and a
test program sees most of the standard library through Qt Test's headers
anyway. CI checks the rest (4 min on the slow AMD machine, where all files
took 13); --all, run by hand, checks every file.

    tests/compat/gcc13_syntax.py BUILD_DIR [--all]

GCC 13 is $OCTET_GCC13 (a g++ command), else g++-13 on PATH (Ubuntu 24.04),
else the copy installers/install-deps.sh unpacks on Debian 12
(/opt/octet-gcc13/g++). Exit 0: every file compiles; 1: some do not (each
named, with its first errors); 77: no GCC 13 here (skipped).
"""
import concurrent.futures
import json
import os
import shlex
import shutil
import subprocess
import sys

SKIP = 77
# Flags that name outputs: with -fsyntax-only nothing is written.
DROP_WITH_VALUE = {"-o", "-MT", "-MF", "-MQ"}
DROP = {"-c", "-MD", "-MMD"}


def find_gcc13():
    if os.environ.get("OCTET_GCC13"):
        return shlex.split(os.environ["OCTET_GCC13"])
    if shutil.which("g++-13"):
        return ["g++-13"]
    if os.access("/opt/octet-gcc13/g++", os.X_OK):
        return ["/opt/octet-gcc13/g++"]
    return None


def gcc13_command(gcc, entry):
    args = entry.get("arguments") or shlex.split(entry["command"])
    while args and os.path.basename(args[0]) == "ccache":
        args = args[1:]
    if not args or "nvcc" in os.path.basename(args[0]):
        return None
    out, i = list(gcc), 1
    while i < len(args):
        if args[i] in DROP_WITH_VALUE:
            i += 2
            continue
        if args[i] not in DROP:
            out.append(args[i])
        i += 1
    return out + ["-fsyntax-only", "-w"]


def main():
    args = sys.argv[1:]
    everything = "--all" in args
    args = [a for a in args if a != "--all"]
    if len(args) != 1:
        print(__doc__.strip().splitlines()[0], file=sys.stderr)
        print("usage: tests/compat/gcc13_syntax.py BUILD_DIR [--all]", file=sys.stderr)
        return 2
    build_dir = args[0]
    source_dir = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    tests_dir = os.path.join(source_dir, "tests") + os.sep
    db = os.path.join(build_dir, "compile_commands.json")
    try:
        with open(db) as f:
            entries = json.load(f)
    except (OSError, ValueError) as e:
        print(f"gcc13_syntax: cannot read {db}: {e}", file=sys.stderr)
        return 1
    cache = {}
    try:
        with open(os.path.join(build_dir, "CMakeCache.txt")) as f:
            for line in f:
                key, _, value = line.strip().partition("=")
                cache[key.split(":")[0]] = value
    except OSError:
        pass
    if cache.get("CMAKE_CXX_COMPILER_ID") == "GNU" and \
            cache.get("CMAKE_CXX_COMPILER_VERSION", "").startswith("13."):
        print("gcc13_syntax: this build tree is compiled with GCC 13 already")
        return 0
    gcc = find_gcc13()
    if gcc is None:
        print("gcc13_syntax: no GCC 13 (g++-13, /opt/octet-gcc13/g++ or $OCTET_GCC13): skipped")
        return SKIP
    version = subprocess.run(gcc + ["-dumpfullversion"], capture_output=True, text=True)
    if version.returncode != 0 or not version.stdout.startswith("13."):
        print(f"gcc13_syntax: {' '.join(gcc)} is not GCC 13: "
              f"{(version.stdout + version.stderr).strip()[:200]}", file=sys.stderr)
        return 1
    jobs = []
    for e in entries:
        if os.path.splitext(e["file"])[1] not in (".cpp", ".cc", ".cxx"):
            continue
        if "_autogen/" in e["file"] or e["file"].endswith(".pb.cc"):
            continue  # generated (see above)
        if not everything and os.path.abspath(e["file"]).startswith(tests_dir):
            continue  # a test program (see above)
        cmd = gcc13_command(gcc, e)
        if cmd:
            jobs.append((e["file"], e["directory"], cmd))

    def run(job):
        name, cwd, cmd = job
        r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
        return name, r.returncode, r.stderr

    failed = []
    with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 2) as pool:
        for name, rc, err in pool.map(run, jobs):
            if rc != 0:
                failed.append(name)
                print(f"--- {name}: does not compile with GCC 13")
                print("\n".join(err.splitlines()[:20]))
    if failed:
        print(f"gcc13_syntax: {len(failed)} of {len(jobs)} C++ files do not compile with "
              f"GCC {version.stdout.strip()} (DGX OS's compiler); most often a header "
              "used without its #include")
        return 1
    scope = "" if everything else " (tests/ left out; --all checks them too)"
    print(f"gcc13_syntax: all {len(jobs)} C++ files compile with GCC {version.stdout.strip()}"
          f"{scope}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
