#!/usr/bin/env bash
# The long fuzz run: every target for MINUTES each, from the fuzz preset's build
# (ASan + UBSan, libFuzzer), one after another; a table of executions,
# coverage and findings at the end. Corpora grow in build/asan/fuzz-work/.
#
#   tests/fuzz/run.sh [--minutes N]     (default 5)
set -euo pipefail
cd "$(dirname "$0")/../.."
minutes=5
if [ "${1:-}" = "--minutes" ]; then minutes=$2; fi
cmake --preset asan >/dev/null
cmake --build --preset fuzz --target octet_fuzz_targets
status=0
printf "%-14s %14s %10s %8s\n" target executions coverage result
for bin in build/asan/tests/fuzz_*; do
  name=${bin##*/fuzz_}
  seeds=(tests/fuzz/corpus/"$name")
  set +e
  out=$(tests/fuzz/run_target.sh "$bin" $((minutes * 60)) "build/asan/fuzz-work/$name" "${seeds[@]}" 2>&1)
  rc=$?
  set -e
  execs=$(echo "$out" | sed -n 's/^stat::number_of_executed_units: *//p' | tail -1)
  cov=$(echo "$out" | grep -oE "cov: [0-9]+" | tail -1 | cut -d' ' -f2)
  result=$([ $rc -eq 0 ] && echo ok || echo FOUND)
  [ $rc -eq 0 ] || status=1
  printf "%-14s %14s %10s %8s\n" "$name" "${execs:-?}" "${cov:-?}" "$result"
done
exit $status
