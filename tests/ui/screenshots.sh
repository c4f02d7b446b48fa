#!/usr/bin/env bash
# Screenshots of every workbench panel, as a person sees them: the workbench
# starts under Xvfb (a virtual X display) on a local embedded cluster of real
# octet-agent processes, launches the bundled demo model
# (resources/models/nanochat-demo, trained by `octet train`) from the Launch
# panel through the local nodes' agents, chats with it, runs two small
# benchmark sweeps and compares them, then saves OUT/<panel>.png for each
# panel and quits. Nothing is left running.
#
#   tests/ui/screenshots.sh [OUT_DIR] [BUILD_DIR]
#     OUT_DIR    default: build/default/screenshots
#     BUILD_DIR  default: build/default (needs octet, octet-agent and
#                octet-workbench built)
# Environment: NODES (default 4), SIZE (default 1440x900), DEMO_MODEL (another
# model folder to launch; one outside $HOME runs beside the local nodes).
set -euo pipefail

root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${2:-$root/build/default}"
out="${1:-$build/screenshots}"
nodes="${NODES:-4}"
size="${SIZE:-1440x900}"
demo="${DEMO_MODEL:-$root/resources/models/nanochat-demo}"

for f in bin/octet bin/octet-agent bin/octet-workbench; do
  if [[ ! -x "$build/$f" ]]; then
    echo "screenshots.sh: $build/$f is missing; build it first:" >&2
    echo "  cmake --build $build --target octet octet-agent octet-workbench" >&2
    exit 1
  fi
done
if ! command -v xvfb-run >/dev/null; then
  echo "screenshots.sh: xvfb-run not found (apt-get install xvfb; installers/install-deps.sh does)" >&2
  exit 1
fi

scratch="$(mktemp -d /tmp/octet-screenshots.XXXXXX)"
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$out"

# The workbench's settings, profiles and cluster state stay in the scratch folder.
export XDG_CONFIG_HOME="$scratch/config" XDG_STATE_HOME="$scratch/state" \
       XDG_DATA_HOME="$scratch/data" OCTET_CONFIG_DIR="$scratch/octet-config"
export OCTET_RESOURCES_DIR="$root/resources"
w="${size%x*}"; h="${size#*x}"
timeout 300 xvfb-run -a -s "-screen 0 ${w}x${h}x24 -dpi 96" \
  "$build/bin/octet-workbench" --local --nodes "$nodes" --screenshots "$out" \
  --demo-model "$demo" --window-size "$size"
ls -l "$out"/*.png
