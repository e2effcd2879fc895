#!/usr/bin/env bash
# Run several fuzz harnesses at once, each with its own number of workers, for one budget:
#   tests/fuzz/campaign.sh SECONDS LOGDIR HARNESS:WORKERS [HARNESS:WORKERS ...]
# Each worker is the uninstrumented mutation driver (DIAG_FUZZ_FALLBACK=1,
# DIAG_FUZZ_INSTRUMENT=0) with its own seed, mutating the harness's seeds and the guided
# corpus in $DIAG_FUZZ_CORPUS/HARNESS when that folder exists. Logs are
# LOGDIR/HARNESS.MODE-N.log (MODE: $DIAG_FUZZ_MODE, default "parallel"), the form
# `benchmarks/hostile_table.py --fuzz-logs LOGDIR` sums. Exits non-zero if any worker found
# a crash (its input is kept under the worker's work folder, named in its log).
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
secs="${1:?usage: campaign.sh SECONDS LOGDIR HARNESS:WORKERS ...}"
logs="${2:?usage: campaign.sh SECONDS LOGDIR HARNESS:WORKERS ...}"
shift 2
mode="${DIAG_FUZZ_MODE:-parallel}"
mkdir -p "$logs"
pids=()
for spec in "$@"; do
  name="${spec%%:*}"
  workers="${spec##*:}"
  for ((i = 1; i <= workers; i++)); do
    work="$(mktemp -d "/tmp/diag-fuzz-$name-XXXX")"
    if [ -n "${DIAG_FUZZ_CORPUS:-}" ] && [ -d "$DIAG_FUZZ_CORPUS/$name" ]; then
      cp "$DIAG_FUZZ_CORPUS/$name"/* "$work"/ 2>/dev/null || true
    fi
    DIAG_FUZZ_FALLBACK=1 DIAG_FUZZ_INSTRUMENT=0 DIAG_FUZZ_SEED="$((1000 + i))" \
      DIAG_FUZZ_WORK="$work" "$here/run.sh" "$name" "$secs" \
      > "$logs/$name.$mode-$i.log" 2>&1 &
    pids+=("$!")
  done
done
rc=0
for pid in "${pids[@]}"; do
  wait "$pid" || rc=1
done
grep -h "fallback driver" "$logs"/*.log
exit "$rc"
