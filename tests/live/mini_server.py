"""A multi-process "mini server" that looks like SGLang or vLLM and really hangs.

Real torch.distributed ranks on gloo, the process titles the frameworks set
(``sglang::scheduler_TP0``, ``sglang::detokenizer``; ``VLLM::EngineCore``,
``VLLM::Worker_TP0``), their log line shapes, and a launcher whose command line reads like
``python -m sglang.launch_server ... --port P`` / ``vllm serve ... --port P`` and which
listens on its HTTP port only once every rank reported healthy.

    python mini_server.py launcher --framework sglang --tp 3 --mode collective \\
        --port 31000 --ready-dir DIR

Hang modes (what each rank does after init_process_group):
- ``collective``: every rank enters all_reduce except the last, which never joins;
- ``store``: every rank waits in a TCPStore get of a key nobody sets;
- ``store_missing``: every rank but the last joins a second TCPStore and waits there; the
  last never connects to it (busy elsewhere), so the store's master waits for it;
- ``compile``: the last rank blocks on a compile-cache FileLock the launcher holds while
  the others wait in all_reduce for it;
- ``ipc``: the ranks (and vLLM's engine core) wait on each other over
  multiprocessing connections: a request that is never sent;
- ``fr_mismatch``: Flight Recorder on (``TORCH_FR_BUFFER_SIZE``); after three matching
  all_reduces, ``--odd-rank`` issues a different collective: ``--odd-kind type`` an
  all_gather [4096] bf16 where the others all_reduce [8192] bf16 (gloo keeps the two apart,
  so every rank hangs in its own), ``--odd-kind size`` an all_reduce [4096] fp32 (the same
  bytes: gloo completes it, as NCCL would), after which the odd rank is busy elsewhere and
  the others wait in the next all_reduce. Each rank writes its recorder's dump
  (``torch._C._distributed_c10d._dump_fr_trace()``, the pickle torch's DebugInfoWriter
  writes) to ``TORCH_FR_DUMP_TEMP_FILE`` + rank right after issuing its last collective:
  torch 2.13 writes FR dumps by itself only from ProcessGroupNCCL (timeout, debug pipe).
  With ``--backend nccl`` (one GPU per rank) the tensors are on the GPUs, the ranks block
  in ``torch.cuda.synchronize()`` behind the kernel that never completes, and the dumps
  come from NCCL's recorder through its debug pipe (``diag snapshot --fr-dump``).
- ``healthy``: all_reduce completes, ranks idle in their event loop, the launcher listens.

Each rank writes ``DIR/rank<r>`` just before it starts to wait; the launcher writes
``DIR/launcher`` (a JSON line with pids and port) once the server is up or hung. Tests poll
those files (a "ready" handshake), never sleep blindly.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import socket
import subprocess
import sys
import time
from multiprocessing.connection import Client, Listener
from pathlib import Path

__all__ = ["MODES", "main"]

MODES = ("collective", "store", "store_missing", "compile", "ipc", "fr_mismatch", "healthy")
HERE = Path(__file__).resolve()


def _set_title(title: str) -> None:
    import setproctitle

    setproctitle.setproctitle(title)


def _log(framework: str, tag: str, msg: str, source: str = "scheduler.py:1") -> None:
    now = dt.datetime.now()
    if framework == "sglang":
        prefix = f"[{now:%Y-%m-%d %H:%M:%S} {tag}] " if tag else f"[{now:%Y-%m-%d %H:%M:%S}] "
        line = prefix + msg
    else:
        who = f"({tag} pid={os.getpid()}) " if tag else ""
        line = f"{who}INFO {now:%m-%d %H:%M:%S} [{source}] {msg}"
    print(line, flush=True)


def _ready(ready_dir: Path, name: str, payload: dict[str, object]) -> None:
    tmp = ready_dir / f".{name}.tmp"
    tmp.write_text(json.dumps(payload))
    tmp.rename(ready_dir / name)


# --------------------------------------------------------------------------- ranks


def handle_first_request(seconds: float) -> None:
    """The rank that never joins the collective: busy with something else."""
    time.sleep(seconds)


def compile_kernels(lock_path: Path) -> None:
    """Wait for the shared compile cache lock (held by another process)."""
    from filelock import FileLock

    with FileLock(str(lock_path)):
        pass


def on_idle() -> None:
    time.sleep(0.05)


def event_loop_normal() -> None:
    while True:
        on_idle()


def recv_requests_from_engine(conn: object) -> object:
    return conn.recv()  # type: ignore[attr-defined]


def write_fr_dump(rank: int) -> None:
    """This rank's Flight Recorder entries, where torch would write them."""
    import torch

    data = torch._C._distributed_c10d._dump_fr_trace()
    path = Path(os.environ["TORCH_FR_DUMP_TEMP_FILE"] + str(rank))
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    tmp.rename(path)


def fr_mismatch(r: int, n: int, odd: int, kind: str, device: str = "cpu") -> tuple[object, bool]:
    """The collective each rank issues at seq 4 (see ``fr_mismatch`` above)."""
    import torch
    import torch.distributed as dist

    def ones(k: int, dtype: object = torch.float32) -> object:
        return torch.ones(k, dtype=dtype, device=device)  # type: ignore[call-overload]

    for _ in range(3):
        dist.all_reduce(ones(8))
    bf16 = torch.bfloat16
    if r == odd and kind == "type":
        out = [torch.empty(4096, dtype=bf16, device=device) for _ in range(n)]
        return dist.all_gather(out, ones(4096, bf16), async_op=True), False
    if r == odd:
        dist.all_reduce(ones(4096))
        return None, True
    work = dist.all_reduce(ones(8192, bf16), async_op=True)
    if kind == "size":
        work.wait()
        work = dist.all_reduce(ones(8), async_op=True)
    return work, False


def rank_main(args: argparse.Namespace) -> None:
    r, n, fw = args.rank, args.tp, args.framework
    tag = f"TP{r}" if fw == "sglang" else f"Worker_TP{r}"
    _set_title(f"sglang::scheduler_TP{r}" if fw == "sglang" else f"VLLM::Worker_TP{r}")
    ready_dir = Path(args.ready_dir)
    _log(fw, tag, "Init torch distributed begin.", "parallel_state.py:1")
    import datetime

    import torch
    import torch.distributed as dist

    device = "cpu"
    if args.backend == "nccl":
        torch.cuda.set_device(r % torch.cuda.device_count())
        device = f"cuda:{r % torch.cuda.device_count()}"
    dist.init_process_group(
        args.backend,
        init_method=f"tcp://{getattr(args, 'master_addr', '127.0.0.1')}:{args.master_port}",
        rank=r,
        world_size=n,
        timeout=datetime.timedelta(hours=1),
    )
    _log(fw, tag, f"world_size={n} rank={r} local_rank={r} backend={args.backend}",
         "parallel_state.py:2")
    _log(fw, tag, "Init torch distributed ends. mem usage=0.00 GB", "parallel_state.py:3")
    _log(fw, tag, "Load weight begin. avail mem=20.00 GB", "model_runner.py:1")
    _log(
        fw, tag, "Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16", "model_runner.py:2"
    )
    t = torch.ones(8)
    mode = args.mode
    last = n - 1
    if mode == "collective":
        _ready(ready_dir, f"rank{r}", {"pid": os.getpid()})
        if r == last:
            handle_first_request(3600)
        dist.all_reduce(t)
    elif mode == "store":
        store = dist.TCPStore(
            "127.0.0.1",
            args.store_port,
            n,
            is_master=(r == 0),
            timeout=datetime.timedelta(hours=1),
        )
        _ready(ready_dir, f"rank{r}", {"pid": os.getpid()})
        store.get("weights_ready")  # nobody ever sets it
    elif mode == "store_missing":
        _ready(ready_dir, f"rank{r}", {"pid": os.getpid()})
        if r == last:
            handle_first_request(3600)
        store = dist.TCPStore(
            "127.0.0.1",
            args.store_port,
            n,
            is_master=(r == 0),
            timeout=datetime.timedelta(hours=1),
        )
        store.get("weights_ready")
    elif mode == "compile":
        _log(fw, tag, "Compiling kernels (cache lock) ...", "compile_utils.py:1")
        _ready(ready_dir, f"rank{r}", {"pid": os.getpid()})
        if r == last:
            compile_kernels(Path(args.lock))
        dist.all_reduce(t)
    elif mode == "fr_mismatch":
        odd = last if args.odd_rank < 0 else args.odd_rank
        work, busy = fr_mismatch(r, n, odd, args.odd_kind, device)
        if args.backend == "gloo":
            write_fr_dump(r)  # NCCL's recorder dumps itself (debug pipe, timeout)
        _ready(ready_dir, f"rank{r}", {"pid": os.getpid()})
        if busy:
            handle_first_request(3600)
        work.wait()  # type: ignore[attr-defined]
        if device != "cpu":
            torch.cuda.synchronize()  # the kernel that never completes
    elif mode == "ipc":
        conn = Client(args.ipc_address, authkey=b"mini")
        _ready(ready_dir, f"rank{r}", {"pid": os.getpid()})
        recv_requests_from_engine(conn)
    else:  # healthy
        dist.all_reduce(t)
        _log(fw, tag, "KV Cache is allocated. #tokens: 8192", "memory_pool.py:1")
        if args.report:
            with Client(args.report, authkey=b"mini") as c:
                c.send(("ready", r))
        _ready(ready_dir, f"rank{r}", {"pid": os.getpid()})
        event_loop_normal()


# ---------------------------------------------------------------- helper processes


def wait_for_ranks(listener: Listener, count: int) -> None:
    """The engine core / launcher waiting to hear from every rank."""
    conns = [listener.accept() for _ in range(count)]
    for c in conns:
        c.recv()


def detokenizer_main(args: argparse.Namespace) -> None:
    _set_title("sglang::detokenizer")
    conn = Client(args.ipc_address, authkey=b"mini")
    _ready(Path(args.ready_dir), "detokenizer", {"pid": os.getpid()})
    recv_requests_from_engine(conn)


def _spawn(role: str, args: argparse.Namespace, **extra: object) -> subprocess.Popen[bytes]:
    argv = [sys.executable, str(HERE), role]
    for key, value in {**vars(args), **extra}.items():
        if key in ("role",) or value is None or value is False:
            continue
        flag = "--" + key.replace("_", "-")
        argv += [flag] if value is True else [flag, str(value)]
    return subprocess.Popen(argv)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def engine_core_main(args: argparse.Namespace) -> None:
    """vLLM's EngineCore: starts the workers, then waits for them over IPC."""
    _set_title("VLLM::EngineCore")
    _log(
        "vllm",
        "EngineCore",
        "Initializing a V1 LLM engine (v0.0.0-mini) with config: ...",
        "core.py:1",
    )
    address = os.path.join(args.ready_dir, "engine.sock")
    listener = Listener(address, authkey=b"mini")
    children = [
        _spawn("rank", args, rank=r, ipc_address=address if args.mode == "ipc" else None)
        for r in range(args.tp)
    ]
    _ready(
        Path(args.ready_dir), "engine", {"pid": os.getpid(), "workers": [c.pid for c in children]}
    )
    if args.mode == "ipc":
        wait_for_ranks(listener, args.tp)
    for c in children:
        c.wait()


def _hold_lock(path: Path) -> object:
    from filelock import FileLock

    lock = FileLock(str(path))
    lock.acquire()
    return lock


def launcher_main(args: argparse.Namespace) -> None:
    fw = args.framework
    # the real launchers set no title, so their environ stays readable; the title here
    # fits in this command line, and SPT_NOENV keeps setproctitle off the environ (the
    # ranks, which do set titles as SGLang's schedulers do, still clobber theirs)
    os.environ["SPT_NOENV"] = "1"
    if fw == "sglang":
        _set_title(
            f"python -m sglang.launch_server --model-path mini --tp {args.tp} "
            f"--host 127.0.0.1 --port {args.port}"
        )
    else:
        _set_title(
            f"vllm serve mini --tensor-parallel-size {args.tp} --host 127.0.0.1 --port {args.port}"
        )
    del os.environ["SPT_NOENV"]
    ready_dir = Path(args.ready_dir)
    args.master_port = _free_port()
    args.store_port = _free_port()
    lock = None
    if args.mode == "fr_mismatch" and args.backend == "gloo":
        os.environ.setdefault("TORCH_FR_BUFFER_SIZE", "2000")
        os.environ.setdefault("TORCH_FR_DUMP_TEMP_FILE", str(ready_dir / "fr_trace_rank_"))
    if args.mode == "compile":
        args.lock = str(ready_dir / "compile_cache.lock")
        lock = _hold_lock(Path(args.lock))
    report_addr = str(ready_dir / "report.sock")
    report = Listener(report_addr, authkey=b"mini") if args.mode == "healthy" else None
    if report is not None:
        args.report = report_addr
    _log(fw, "", f"server_args=ServerArgs(model_path='mini', tp_size={args.tp}, port={args.port})")
    children: list[subprocess.Popen[bytes]] = []
    ipc: Listener | None = None
    if fw == "sglang":
        if args.mode == "ipc":
            ipc = Listener(str(ready_dir / "sched.sock"), authkey=b"mini")
            args.ipc_address = str(ready_dir / "sched.sock")
        children += [_spawn("rank", args, rank=r) for r in range(args.tp)]
        children.append(
            _spawn("detokenizer", args, ipc_address=args.ipc_address or _detok_socket(ready_dir))
        )
    else:
        children.append(_spawn("engine", args))
    info = {"pid": os.getpid(), "port": args.port, "children": [c.pid for c in children]}
    if report is not None:
        wait_for_ranks(report, args.tp)
        server = socket.socket()
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", args.port))
        server.listen(16)
        _log(fw, "", f"Uvicorn running on http://127.0.0.1:{args.port} (Press CTRL+C to quit)")
        _ready(ready_dir, "launcher", info)
        while True:
            conn, _ = server.accept()
            conn.close()
    _ready(ready_dir, "launcher", info)
    if ipc is not None:
        wait_for_ranks(ipc, args.tp + 1)
    for c in children:
        c.wait()
    del lock


def _detok_socket(ready_dir: Path) -> str:
    """The detokenizer's IPC endpoint: a listener that never sends (it waits for output)."""
    path = str(ready_dir / "detok.sock")
    listener = Listener(path, authkey=b"mini")
    _KEEP.append(listener)
    import threading

    threading.Thread(target=lambda: _KEEP.append(listener.accept()), daemon=True).start()
    return path


_KEEP: list[object] = []


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("role", choices=("launcher", "engine", "rank", "detokenizer"))
    ap.add_argument("--framework", choices=("sglang", "vllm"), default="sglang")
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--mode", choices=MODES, default="collective")
    ap.add_argument("--port", type=int, default=30000)
    ap.add_argument("--ready-dir", required=True)
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--master-port", type=int, default=0)
    ap.add_argument("--master-addr", default="127.0.0.1")
    ap.add_argument("--store-port", type=int, default=0)
    ap.add_argument("--lock", default=None)
    ap.add_argument("--ipc-address", default=None)
    ap.add_argument("--report", default=None)
    ap.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    ap.add_argument("--odd-rank", type=int, default=-1)
    ap.add_argument("--odd-kind", choices=("type", "size"), default="type")
    args = ap.parse_args(argv)
    {
        "launcher": launcher_main,
        "engine": engine_core_main,
        "rank": rank_main,
        "detokenizer": detokenizer_main,
    }[args.role](args)


if __name__ == "__main__":
    main()
