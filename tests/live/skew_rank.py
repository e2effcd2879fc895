"""One rank of a two-node job whose log writer's clock is shifted: for the clock-skew test.

Real torch.distributed ranks on gloo, joined across network namespaces, write SGLang's line
shapes (``[YYYY-mm-dd HH:MM:SS TPn] ...``) with the time of their own clock plus
``--clock-shift`` seconds (the node whose clock is wrong). What they log, in order:

- ``Init torch distributed begin.`` / ``Init torch distributed ends.`` around
  ``init_process_group`` and a barrier (every rank leaves the rendezvous together);
- ``Load weight begin/end``, then each rank works for a while of its own (a different
  time per rank) before the ranks meet in all-reduces standing for CUDA-graph capture,
  ``Capture cuda graph end.`` when they leave;
- then every rank waits in one more all-reduce that rank ``--hang-rank`` never joins (it
  sleeps), so the job hangs with every rank quiet from the same moment.

    python skew_rank.py --rank 2 --world 4 --master-addr 10.232.0.1 --master-port 29650 \\
        --clock-shift -400.25 --ready-dir DIR
"""

from __future__ import annotations

import argparse
import datetime as dt
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--master-addr", default="127.0.0.1")
    ap.add_argument("--master-port", type=int, required=True)
    ap.add_argument("--clock-shift", type=float, default=0.0)
    ap.add_argument("--hang-rank", type=int, default=-1)
    ap.add_argument("--ready-dir", required=True)
    args = ap.parse_args()
    shift = dt.timedelta(seconds=args.clock_shift)
    tag = f"TP{args.rank}"

    def log(msg: str) -> None:
        now = dt.datetime.now() + shift
        print(f"[{now:%Y-%m-%d %H:%M:%S} {tag}] {msg}", flush=True)

    log("Init torch distributed begin.")
    import torch
    import torch.distributed as dist

    dist.init_process_group(
        "gloo",
        init_method=f"tcp://{args.master_addr}:{args.master_port}",
        rank=args.rank,
        world_size=args.world,
        timeout=dt.timedelta(hours=1),
    )
    dist.barrier()
    log("Init torch distributed ends. mem usage=0.00 GB")
    log("Load weight begin. avail mem=20.00 GB")
    time.sleep(0.3 + 0.4 * args.rank)  # each rank's own work, a different time each
    log("Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16")
    log("Capture cuda graph begin. This can take up to several minutes.")
    t = torch.ones(8)
    for _ in range(3):
        dist.all_reduce(t)
    dist.barrier()
    log("Capture cuda graph end. Time elapsed: 1.00 s. mem usage=0.10 GB. avail mem=19.9 GB.")
    Path(args.ready_dir, f"rank{args.rank}").write_text("ready")
    if args.rank == args.hang_rank:
        time.sleep(3600)
    dist.all_reduce(t)


if __name__ == "__main__":
    main()
