#!/usr/bin/env bash
# One GPU run on the device machine, everything in one command (see fixtures/gpu/README.md):
#   bash tests/gpu/device_run.sh            (from the repo root; wheels carried in .whl/)
# 1. the driver: the mini server hung each way, read by diag snapshot, raw py-spy, NVML;
# 2. the live GPU test (pytest, marked gpu);
# 3. the snapshot benchmark (benchmarks/bench_snapshot.py), when it exists.
# Whatever happens, every mini server started here is killed by its process group at the end,
# and what was written comes back under $OUT (at most 8 files: one tarball plus logs).
set -uo pipefail
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
RUN=/tmp/gpu-run
SCENARIOS=${SCENARIOS:-collective-barrier,collective,cpu,collective-sync@8/5,cpu@8}
DRIVE_S=${DRIVE_S:-330}

if [ -d .whl ] && [ -z "${NO_WHEELS:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH
fi
export PYTHONUNBUFFERED=1 COLUMNS=160

cleanup() {
  # Kill each mini server by its launcher's process group (it runs in its own session).
  for f in "$RUN"/*/ready/pids.json /tmp/pytest-of-*/pytest-*/*/ready/pids.json; do
    [ -f "$f" ] || continue
    pid=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["launcher"])' "$f")
    kill -9 -- "-$pid" 2>/dev/null
  done
}

date -u
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv
timeout "$DRIVE_S" python3 tests/gpu/drive.py --out "$RUN" --scenarios "$SCENARIOS" \
  --backend "${BACKEND:-nccl}" --weights-gb "${WEIGHTS_GB:-3}" --host-gb "${HOST_GB:-1.5}" --budget $((DRIVE_S - 15)) 2>&1 | tee "$OUT/drive.log" | cut -c1-400
cleanup
tar czf "$OUT/gpu-run.tar.gz" -C "$(dirname "$RUN")" "$(basename "$RUN")"

date -u
timeout 200 python3 -m pytest -q -rA -p no:cacheprovider tests/gpu/test_gpu_live.py 2>&1 \
  | tee "$OUT/live-test.log" | tail -25
cleanup

if [ -f benchmarks/bench_snapshot.py ] && [ -z "${SKIP_BENCH:-}" ]; then
  date -u
  timeout 150 python3 benchmarks/bench_snapshot.py --ranks 8 --repeat 3 2>&1 \
    | tee "$OUT/bench.log" | tail -25
fi
date -u
ps -eo pid,stat,pcpu,comm | grep -E 'sglang|python' | grep -v grep || true
exit 0
