#!/usr/bin/env bash
# Fuzzes one target for SECONDS from its seeds (ctest's fuzz_<name>, and
# run.sh): run_target.sh BINARY SECONDS WORKDIR SEED...
# Seeds (files or folders) are copied into WORKDIR/seeds; new inputs go to
# WORKDIR/corpus, a crashing input to WORKDIR/crash-*. Prints libFuzzer's last
# status line (executions, coverage) and exits non-zero on any finding.
set -euo pipefail
bin=$1 seconds=$2 work=$3
shift 3
mkdir -p "$work/corpus" "$work/seeds"
for s in "$@"; do
  if [ -d "$s" ]; then
    find "$s" -maxdepth 1 -type f -exec cp -f {} "$work/seeds/" \;
  elif [ -f "$s" ]; then
    # Distinct names for same-named seeds (every fixture has a config.json).
    cp -f "$s" "$work/seeds/$(echo "$s" | tr '/' '_')"
  fi
done
log="$work/last-run.log"
set +e
# libFuzzer's own exit code for a finding is 77, CTest's skip code: use 1.
"$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
  -error_exitcode=1 -timeout_exitcode=1 \
  -print_final_stats=1 -artifact_prefix="$work/" "$work/corpus" "$work/seeds" >"$log" 2>&1
rc=$?
set -e
[ $rc -eq 77 ] && rc=1  # 77 is CTest's skip code: never let a finding read as a skip
grep -E "^#[0-9]+.*(DONE|pulse|NEW|REDUCE)" "$log" | tail -1 || true
grep -E "^stat::number_of_executed_units|^stat::peak_rss_mb" "$log" || true
if [ $rc -ne 0 ]; then
  tail -60 "$log"
  echo "run_target: $(basename "$bin") found a problem (exit $rc); inputs in $work" >&2
fi
exit $rc
