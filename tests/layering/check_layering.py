#!/usr/bin/env python3
"""The dependency arrows of ARCHITECTURE.md, checked on the code.

Two views of the same rule, both of which must hold:
  * includes: a file in folder F includes `octet/<lib>/...` only for a <lib>
    that F may depend on (below it in the list, or itself);
  * links: each library target links only libraries it may depend on, `ui`
    links `app` (and `base`, Qt) only, and `app`'s public interface carries
    nothing its public headers do not need.
Also: Qt only in app/ and ui/ (Widgets only in ui/ and the workbench main),
and generated protobuf code only behind its one target.

Usage: check_layering.py SOURCE_DIR LINKS_FILE
LINKS_FILE is written by tests/layering/CMakeLists.txt at configure time:
one line per library, `name|LINK_LIBRARIES|INTERFACE_LINK_LIBRARIES`.
Exit 0 when every arrow holds, 1 with one line per violation otherwise.
"""
import os
import re
import sys

# Folder -> the octet/<lib>/ include prefixes it may use. `base` is the
# foundation under everything; `wire` (job specs, figures, their protobuf
# conversions) sits on base and the generated messages (`v1`). Order of the list in ARCHITECTURE.md:
# kernels <- collectives <- engine <- trainer; router and agent on engine's
# public API; app on all of them; ui on app alone.
BELOW = {
    "base": set(),
    "kernels": {"base"},
    "collectives": {"base", "kernels"},
    "engine": {"base", "kernels", "collectives"},
    "trainer": {"base", "kernels", "collectives", "engine"},
    "router": {"base", "kernels", "collectives", "engine"},
    "wire": {"base", "v1"},
    "agent": {"base", "kernels", "collectives", "engine", "wire", "v1"},
    "app": {"base", "kernels", "collectives", "engine", "trainer", "router", "wire", "agent", "v1"},
    "ui": {"base", "app"},
}
# Narrower rules for sub-folders (longest prefix wins).
SUBFOLDER = {
    # app's public headers: what a user of octet::app (the workbench) sees.
    "app/include": {"base", "engine", "wire"},
    # The workbench's main() assembles the window.
    "app/workbench": BELOW["app"] | {"ui"},
}
# Which link targets belong to which folder.
TARGET_FOLDER = {
    "base": "base", "http": "base", "kernels": "kernels", "kernels_cuda": "kernels", "backends": "kernels",
    "collectives": "collectives", "engine_text": "engine", "engine": "engine",
    "engine_serving": "engine", "trainer": "trainer", "router": "router",
    "wire_proto": "v1", "wire": "wire", "agent": "agent", "app": "app", "ui": "ui",
}
# What a target may name in its public link interface beyond `base` (what its
# public headers include); checked for the boundaries issue 26 seals.
PUBLIC_INTERFACE = {
    "app": {"base", "wire", "engine_serving", "engine", "engine_text", "collectives", "kernels"},
    "ui": {"base", "app"},
}
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*[<"]octet/([A-Za-z0-9_]+)/', re.M)
QT_RE = re.compile(r'^\s*#\s*include\s*<(Q[A-Za-z]+|Qt[A-Za-z]+/[A-Za-z]+)>', re.M)
WIDGETS = re.compile(r'^\s*#\s*include\s*<(QtWidgets/|QtCharts/|QWidget|QMainWindow|QDialog|QApplication|QLabel|QPushButton|QChart)', re.M)
SOURCE_EXT = (".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh")


def rule_for(rel):
    best = None
    for prefix in SUBFOLDER:
        if rel.startswith(prefix + "/") and (best is None or len(prefix) > len(best)):
            best = prefix
    if best:
        return best, SUBFOLDER[best]
    top = rel.split("/", 1)[0]
    return top, BELOW.get(top)


def check_includes(src, errors):
    for top in BELOW:
        root = os.path.join(src, top)
        for dirpath, _, files in os.walk(root):
            for name in files:
                if not name.endswith(SOURCE_EXT):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, src)
                folder, allowed = rule_for(rel)
                with open(path, encoding="utf-8", errors="replace") as f:
                    text = f.read()
                for m in INCLUDE_RE.finditer(text):
                    lib = m.group(1)
                    if lib == top or lib in allowed:
                        continue
                    line = text.count("\n", 0, m.start()) + 1
                    errors.append(f"{rel}:{line}: includes octet/{lib}/, but {folder}/ may use only "
                                  f"{', '.join(sorted(allowed | {top}))} (ARCHITECTURE.md arrows)")
                if top not in ("app", "ui"):
                    for m in QT_RE.finditer(text):
                        line = text.count("\n", 0, m.start()) + 1
                        errors.append(f"{rel}:{line}: includes Qt <{m.group(1)}>; Qt belongs to app/ and ui/ only")
                elif top == "app" and not rel.startswith("app/workbench/"):
                    for m in WIDGETS.finditer(text):
                        line = text.count("\n", 0, m.start()) + 1
                        errors.append(f"{rel}:{line}: includes a Qt Widgets header; app/ may use Qt Core only")


def octet_names(value):
    """octet::x / octet_x names in a CMake link list (LINK_ONLY unwrapped)."""
    names = []
    for item in value.split(";"):
        m = re.search(r"octet(?:::|_)([A-Za-z0-9_]+)", item)
        if m:
            names.append((m.group(1), "LINK_ONLY" in item))
    return names


def check_links(links_file, errors):
    with open(links_file, encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("|") for line in f if line.strip()]
    for name, link, interface in rows:
        folder = TARGET_FOLDER.get(name)
        if folder is None:
            errors.append(f"{links_file}: library target octet_{name} has no folder in the layering table: add it")
            continue
        allowed = BELOW.get(folder, set())
        for dep, _ in octet_names(link):
            dep_folder = TARGET_FOLDER.get(dep)
            if dep_folder is None or dep_folder == folder or dep_folder in allowed:
                continue
            errors.append(f"target octet_{name} links octet::{dep} ({dep_folder}/), which {folder}/ may not depend on")
        if name in PUBLIC_INTERFACE:
            for dep, link_only in octet_names(interface):
                if not link_only and dep not in PUBLIC_INTERFACE[name]:
                    errors.append(f"target octet_{name} exports octet::{dep} in its public link interface; "
                                  f"make it PRIVATE (its public headers need only "
                                  f"{', '.join(sorted(PUBLIC_INTERFACE[name]))})")


def check_generated_code(src, links_file, errors):
    # The generated protobuf code is compiled by octet_wire_proto only: no
    # folder carries its own copy of *.pb.cc and no CMake file but the one
    # that defines that target runs protoc.
    for dirpath, dirs, files in os.walk(src):
        dirs[:] = [d for d in dirs if d not in ("build", ".git")]
        for name in files:
            rel = os.path.relpath(os.path.join(dirpath, name), src)
            if name.endswith((".pb.cc", ".pb.h", ".grpc.pb.cc")):
                errors.append(f"{rel}: generated protobuf code in the source tree; it belongs to the build tree")
            if name == "CMakeLists.txt":
                with open(os.path.join(dirpath, name), encoding="utf-8") as f:
                    text = f.read()
                if re.search(r"protobuf_generate|PROTOC_EXECUTABLE|protoc\b", text) and "octet_wire_proto" not in text:
                    errors.append(f"{rel}: runs protoc outside the one proto library target")


def main(argv):
    if len(argv) != 3:
        print(__doc__.strip().splitlines()[-4], file=sys.stderr)
        return 2
    src, links_file = argv[1], argv[2]
    errors = []
    check_includes(src, errors)
    check_links(links_file, errors)
    check_generated_code(src, links_file, errors)
    for e in errors:
        print(e)
    print(f"layering: {len(errors)} violation(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
