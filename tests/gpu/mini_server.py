"""A mini "SGLang" server that really hangs: one process per GPU, real torch.distributed.

Used by the GPU run (tests/gpu/drive.py, tests/gpu/test_gpu_live.py). It imitates the
process layout and the log lines of SGLang so that ``diag snapshot`` and ``diag analyze``
see what they would see on a real server, but the hangs are real: the ranks really sit in
NCCL (or gloo) collectives, TCPStore waits and file locks.

Layout (as SGLang's ``launch_server``): the launcher spawns one scheduler process per rank,
titled ``sglang::scheduler_TP<r>`` (setproctitle), plus ``sglang::detokenizer``; it then
waits on each scheduler's pipe for its "ready" message, which never comes. The HTTP port
named on the command line is never opened.

Hang modes (after init, "weight loading" of ``--weights-gb`` on the GPU and ``--host-gb``
of touched host memory per rank, and a warm-up all-reduce):

* ``collective`` (mode A): every rank except ``--outlier-rank`` enters an all-reduce
  (during "Capture cuda graph begin"); the outlier blocks on a file lock that the
  launcher holds (a JIT-cache lock) and never joins. With NCCL the waiting GPUs spin in
  the NCCL kernel at ~100% utilization, the outlier's GPU is idle.
  ``--wait blocking`` (default) sets TORCH_NCCL_BLOCKING_WAIT=1 and then copies the result
  to the CPU (``.cpu()``); with torch 2.11 ``all_reduce`` returned at once all the same, so
  the CPU waits in that copy (fixtures/gpu/README.md). ``--wait sync`` blocks in
  ``torch.cuda.synchronize()`` (the GPU lab's picture); ``--wait barrier`` calls
  ``dist.barrier()`` instead of the all-reduce (the CPU blocks inside it).
* ``cpu`` (mode B, the story's picture): every rank blocks CPU-side after weight loading
  in a TCPStore wait for a key nobody sets: idle GPUs, high RSS, no port.

Each rank creates ``<ready-dir>/hang.<rank>`` right before it enters its hang, and the
launcher writes ``<ready-dir>/pids.json`` (launcher, detokenizer, ranks) once they exist.

Runs without a GPU with ``--backend gloo`` (tensors on the CPU), which is how it is
tested on machines without one; ``--backend gloo --device cuda`` keeps the weights on the
GPU. With more ranks than GPUs, ranks share GPUs round-robin (NCCL then needs each rank
to pose as its own host: see ``scheduler``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import fcntl
import json
import multiprocessing as mp
import os
import sys
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

__all__ = ["main"]

HANG_SECONDS = 2 * 3600


def _now() -> str:
    return dt.datetime.now().strftime("%Y-%m-%d %H:%M:%S")


def log(prefix: str, msg: str) -> None:
    """One line in SGLang's format: ``[2026-02-22 22:35:21 TP4] msg``."""
    tag = f" {prefix}" if prefix else ""
    sys.stdout.write(f"[{_now()}{tag}] {msg}\n")
    sys.stdout.flush()


def _set_title(title: str, *, keep_environ: bool = False) -> None:
    """setproctitle, as SGLang does. It moves the environment to make room for the title,
    which zeroes ``/proc/<pid>/environ`` -- as with SGLang's titled schedulers. The launcher
    (untitled in SGLang, its environ readable) keeps its environment: ``SPT_NOENV`` limits
    the title to the room of the original argv (long enough here)."""
    if keep_environ:
        os.environ["SPT_NOENV"] = "1"
    else:
        os.environ.pop("SPT_NOENV", None)  # inherited from the launcher
    try:
        import setproctitle
    except ImportError:  # the title is a nicety; the hang is real without it
        log("", f"setproctitle missing: title {title!r} not set")
        return
    setproctitle.setproctitle(title)


def _touch(path: Path) -> None:
    path.write_text(str(os.getpid()))


def _mmss(seconds: float) -> str:
    m, sec = divmod(int(seconds), 60)
    return f"{m:02d}:{sec:02d}"


def _gib(n: float) -> str:
    return f"{n:.2f}"


def wait_for_jit_cache_lock(lock_path: Path) -> None:
    """The outlier of mode A: blocks on the JIT cache lock the launcher holds."""
    with lock_path.open("a") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)  # never granted


def wait_for_peer_node(store: Any, timeout: dt.timedelta) -> None:
    """Mode B: every rank waits in the TCPStore for a key no process ever sets."""
    store.wait(["mini/peer_node_ready"], timeout)


def capture_cuda_graph(torch: Any, dist: Any, x: Any, nccl: bool, wait: str) -> None:
    """Mode A, the ranks that join: a collective the outlier never joins."""
    if wait == "barrier":
        dist.barrier()  # NCCL: an all-reduce, then the CPU blocks on the stream
        return
    dist.all_reduce(x)
    if nccl and wait == "sync":
        torch.cuda.synchronize()
    else:
        x.cpu()  # gloo / blocking wait returned only on completion: never reached


def scheduler(
    rank: int,
    args: argparse.Namespace,
    pipe: Connection,
) -> None:
    """One scheduler process (one rank, one GPU)."""
    prefix = f"TP{rank}"
    _set_title(f"sglang::scheduler_{prefix}")
    use_cuda = args.device == "cuda"
    nccl = args.backend == "nccl"
    if nccl and args.mode == "collective" and args.wait == "blocking":
        os.environ["TORCH_NCCL_BLOCKING_WAIT"] = "1"
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(args.master_port),
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(args.world),
    )
    import torch
    import torch.distributed as dist

    timeout = dt.timedelta(seconds=HANG_SECONDS)
    device = torch.device("cpu")
    if use_cuda:
        gpus = torch.cuda.device_count()
        gpu = rank % gpus
        torch.cuda.set_device(gpu)
        device = torch.device("cuda", gpu)
        if nccl and args.world > gpus:
            # More ranks than GPUs: NCCL refuses two ranks on one GPU ("Duplicate GPU
            # detected") unless each rank looks like its own host; then its peers are
            # reached over sockets on loopback.
            os.environ.update(
                NCCL_HOSTID=f"diag-mini-rank{rank}",
                NCCL_P2P_DISABLE="1",
                NCCL_SHM_DISABLE="1",
                NCCL_IB_DISABLE="1",
                NCCL_SOCKET_IFNAME="lo",
            )
        log(prefix, f"rank {rank} on cuda:{gpu} of {gpus}")
    comm_device = device if nccl else torch.device("cpu")

    def avail() -> str:
        if not use_cuda:
            return "n/a"
        return _gib(torch.cuda.mem_get_info()[0] / 2**30)

    log(prefix, f"Init torch distributed begin. backend={args.backend}")
    dist.init_process_group(args.backend, rank=rank, world_size=args.world, timeout=timeout)
    log(prefix, f"Init torch distributed ends. mem usage={_gib(0.0)} GB")
    log(prefix, f"Load weight begin. avail mem={avail()} GB")
    shards = args.shards
    per_shard = int(args.weights_gb * 2**30) // shards
    weights = []
    t_load = time.monotonic()
    for i in range(shards):
        t = torch.empty(per_shard, dtype=torch.uint8, device=device)
        t.fill_(1)
        weights.append(t)
        if rank == 0:
            pct = int(100 * (i + 1) / shards)
            took = time.monotonic() - t_load
            left = took / (i + 1) * (shards - i - 1)
            rate = (i + 1) / took if took > 0 else 0.0
            sys.stdout.write(
                f"Loading safetensors checkpoint shards: {pct:3d}% Completed | "
                f"{i + 1}/{shards} [{_mmss(took)}<{_mmss(left)}, {rate:.2f}it/s]\n"
            )
            sys.stdout.flush()
    host = bytearray(int(args.host_gb * 2**30))
    for off in range(0, len(host), 4096):  # touch every page: real RSS
        host[off] = 1
    x = torch.ones(1024, device=comm_device)
    dist.all_reduce(x)  # warm-up: the communicator exists before the hang
    if use_cuda:
        torch.cuda.synchronize()
    log(
        prefix,
        f"Load weight end. type=MiniForCausalLM, dtype=torch.bfloat16, avail mem={avail()} GB, "
        f"mem usage={_gib(args.weights_gb)} GB.",
    )
    log(prefix, "KV Cache is allocated. #tokens: 65536, K size: 0.50 GB, V size: 0.50 GB")
    log(prefix, f"Memory pool end. avail mem={avail()} GB")

    ready = Path(args.ready_dir)
    if args.mode == "collective":
        log(
            prefix,
            "Capture cuda graph begin. This can take up to several minutes. "
            f"avail mem={avail()} GB",
        )
        _touch(ready / f"hang.{rank}")
        if rank == args.outlier_rank:
            wait_for_jit_cache_lock(ready / "jit_cache.lock")
        else:
            capture_cuda_graph(torch, dist, x, nccl, args.wait)
    else:  # cpu
        store = dist.distributed_c10d._get_default_store()
        _touch(ready / f"hang.{rank}")
        wait_for_peer_node(store, timeout)
    pipe.send({"status": "ready"})  # never reached while hung
    del weights, host


def detokenizer(pipe: Connection) -> None:
    """``sglang::detokenizer``: waits for output from the schedulers (an IPC wait)."""
    _set_title("sglang::detokenizer")
    pipe.recv()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--world", type=int, default=2, help="ranks (one process per GPU)")
    p.add_argument("--mode", choices=("collective", "cpu"), default="collective")
    p.add_argument("--backend", choices=("nccl", "gloo"), default="nccl")
    p.add_argument(
        "--device",
        choices=("cuda", "cpu"),
        default=None,
        help="where the 'weights' live (default: cuda with nccl, cpu with gloo)",
    )
    p.add_argument("--wait", choices=("blocking", "sync", "barrier"), default="blocking")
    p.add_argument("--outlier-rank", type=int, default=1)
    p.add_argument("--weights-gb", type=float, default=4.0, help="GPU 'weights' per rank")
    p.add_argument("--host-gb", type=float, default=2.0, help="touched host memory per rank")
    p.add_argument("--shards", type=int, default=8)
    p.add_argument("--port", type=int, default=30000, help="HTTP port (never opened)")
    p.add_argument("--master-port", type=int, default=29511)
    p.add_argument("--ready-dir", required=True)
    p.add_argument("--model-path", default="diag-mini")
    args = p.parse_args(argv)
    if args.device is None:
        args.device = "cuda" if args.backend == "nccl" else "cpu"
    if args.backend == "nccl" and args.device == "cpu":
        p.error("--backend nccl needs --device cuda")
    if not 0 <= args.outlier_rank < args.world:
        p.error("--outlier-rank must be a rank of --world")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    ready = Path(args.ready_dir)
    ready.mkdir(parents=True, exist_ok=True)
    # The launcher's command line, as SGLang's would read (`ps`, /proc/<pid>/cmdline).
    _set_title(
        f"python3 -m sglang.launch_server --model-path {args.model_path} "
        f"--tp-size {args.world} --port {args.port} --host 127.0.0.1",
        keep_environ=True,
    )
    log(
        "",
        f"server_args=ServerArgs(model_path='{args.model_path}', tp_size={args.world}, "
        f"port={args.port}, host='127.0.0.1', dist_init_addr=None, nnodes=1, node_rank=0, "
        f"attention_backend='triton', disable_cuda_graph=False)",
    )
    lock_fh = (ready / "jit_cache.lock").open("a")
    fcntl.flock(lock_fh.fileno(), fcntl.LOCK_EX)  # held for the launcher's lifetime

    ctx = mp.get_context("spawn")
    readers: list[Connection] = []
    procs = []
    for rank in range(args.world):
        reader, writer = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=scheduler, args=(rank, args, writer), name=f"TP{rank}")
        proc.start()
        readers.append(reader)
        procs.append(proc)
    detok_reader, _detok_writer = ctx.Pipe(duplex=False)
    detok = ctx.Process(target=detokenizer, args=(detok_reader,), name="detokenizer")
    detok.start()
    pids = {
        "launcher": os.getpid(),
        "detokenizer": detok.pid,
        "ranks": [p.pid for p in procs],
        "port": args.port,
    }
    (ready / "pids.json").write_text(json.dumps(pids))
    # As SGLang's launcher: wait for every scheduler's "ready" on its pipe.
    infos = [r.recv() for r in readers]
    log("", f"all schedulers ready: {infos}")
    log("", "The server is fired up and ready to roll!")
    for p in procs:
        p.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
