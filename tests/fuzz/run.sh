#!/usr/bin/env bash
# Run one fuzz harness for a budget:  tests/fuzz/run.sh HARNESS SECONDS
#   DIAG_FUZZ_RUNS=N stops after N executions; DIAG_FUZZ_INSTRUMENT=0 skips coverage
#   instrumentation (mutation of the corpus only: 10-50x more executions per second)
#   HARNESS: line_grammar | config_reader | rule_loader | pyspy_json | bundle | analyze_file
# Coverage-guided with atheris (pip install -e '.[fuzz]'); without it, a seeded random
# driver over the same generators (DIAG_FUZZ_FALLBACK=1 forces it). Crashes are written
# to $DIAG_FUZZ_WORK (default /tmp/diag-fuzz-HARNESS/crash-*); each becomes a test in
# tests/test_hostile_*.py. One core: the machine is shared.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
name="${1:?usage: run.sh HARNESS SECONDS}"
secs="${2:-60}"
py="${PYTHON:-$root/.venv/bin/python}"
[ -x "$py" ] || py=python3
exec nice -n 10 "$py" "$here/fuzz_${name}.py" "$secs"
