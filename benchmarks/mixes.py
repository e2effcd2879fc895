"""Generated log mixes for the analyser benchmark (and, small, for the equality tests).

Each mix is a realistic shape of log that a user hands to ``diag analyze``; every one is
written to a target size by repeating its serving tail (line numbers and time stamps keep
moving). ``MIXES`` maps a mix name to ``(description, writer)``; a writer takes
``(path, size_bytes, seed)`` and writes a file (or, for ``folder8``, a folder).

usage: python benchmarks/mixes.py NAME OUT [--size-mib 128] [--seed 0]
"""

# ruff: noqa: E501  (real log lines are long)
from __future__ import annotations

import argparse
import datetime as dt
import gzip
import random
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gen_log import _startup  # noqa: E402

__all__ = ["MIXES", "write_mix"]

RANKS = 8
_BLOCK = 4000  # lines per write


def _tag(r: int) -> str:
    return f"DP{r} TP{r} EP{r}"


def _ts(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%d %H:%M:%S")


# Warnings real SGLang / vLLM / torch logs print while serving (with their varying parts).
_WARNINGS = (
    "[{ts} {tag}] WARNING scheduler.py:1422: The request queue is long; consider increasing "
    "--max-running-requests.",
    "[{ts} {tag}] WARNING tokenizer_manager.py:{n}: Request {hex} exceeded the max length "
    "{n} and was truncated.",
    "[{ts}] WARNING serving_chat.py:{n}: Invalid tool call format from request {hex}",
    "[{ts} {tag}] Scheduler watchdog: forward batch took {f} s",
)
_NCCL = (
    "gpu-node-0:{pid}:{tid} [{r}] NCCL INFO Channel {c:02d}/0 : {r}[{r}] -> {r2}[{r2}] via "
    "P2P/CUMEM/read",
    "gpu-node-0:{pid}:{tid} [{r}] NCCL INFO Connected all rings, use ring PXN 0 GDR 1",
    "gpu-node-0:{pid}:{tid} [{r}] NCCL INFO comm 0x{hex} rank {r} nranks 8 cudaDev {r} "
    "nvmlDev {r} busId {r}8000 commId 0x{hex} - Init START",
)


def _decode(rng: random.Random, stamp: str, r: int, spec: bool) -> str:
    run = rng.randint(1, 256)
    mid = ""
    if spec:
        mid = f"accept len: {1 + rng.random() * 2.5:.2f}, accept rate: {rng.random():.2f}, "
    return (
        f"[{stamp} {_tag(r)}] Decode batch, #running-req: {run}, #token: "
        f"{run * rng.randint(200, 900)}, token usage: {run / 1000:.2f}, {mid}"
        f"cuda graph: True, gen throughput (token/s): {rng.random() * 4000:.2f}, "
        f"#queue-req: {rng.randint(0, 3)}, "
    )


def _prefill(rng: random.Random, stamp: str, r: int) -> str:
    run = rng.randint(1, 256)
    return (
        f"[{stamp} {_tag(r)}] Prefill batch, #new-seq: {rng.randint(1, 8)}, #new-token: "
        f"{rng.randint(16, 8192)}, #cached-token: {rng.randint(0, 4096)}, token usage: "
        f"{run / 1000:.2f}, #running-req: {run}, #queue-req: {rng.randint(0, 9)}, "
    )


def _access(rng: random.Random, stamp: str, port: int) -> str:
    path = rng.choice(("/v1/chat/completions", "/generate", "/v1/completions"))
    return f'[{stamp}] INFO:     10.0.3.{rng.randint(2, 250)}:{port} - "POST {path} HTTP/1.1" 200 OK'


def _odd(rng: random.Random, stamp: str, r: int) -> str:
    if rng.random() < 0.5:
        form = rng.choice(_WARNINGS)
        return form.format(
            ts=stamp, tag=_tag(r), n=rng.randint(100, 9000), hex=f"{rng.getrandbits(40):x}",
            f=f"{rng.random() * 30:.1f}",
        )
    form = rng.choice(_NCCL)
    pid = 4100 + r
    return form.format(
        pid=pid, tid=pid + rng.randint(1, 90), r=r, r2=(r + 1) % RANKS, c=rng.randint(0, 31),
        hex=f"{rng.getrandbits(32):x}",
    )


def _sglang_tail(
    rng: random.Random, t: dt.datetime, *, odd: float = 0.0, spec: bool = False,
    access_only: bool = False, spam: bool = False,
) -> Iterator[str]:
    step = 0
    port = 40200
    while True:
        step += 1
        if step % 40 == 0:
            t += dt.timedelta(seconds=1)
        stamp = _ts(t)
        r = step % RANKS
        if spam:
            yield f"[{stamp} {_tag(r)}] WARNING scheduler.py:1422: The request queue is long."
            continue
        if access_only:
            port += 1
            yield _access(rng, stamp, port)
            continue
        if odd and rng.random() < odd:
            yield _odd(rng, stamp, r)
        elif step % 11 == 0:
            yield _prefill(rng, stamp, r)
        elif step % 97 == 0:
            port += 1
            yield _access(rng, stamp, port)
        else:
            yield _decode(rng, stamp, r, spec)


_VLLM_START = """\
INFO 03-10 16:19:00 [__init__.py:239] Automatically detected platform cuda.
(APIServer pid=1) INFO 03-10 16:19:04 [api_server.py:1805] vLLM API server version 0.10.1
(APIServer pid=1) INFO 03-10 16:19:04 [utils.py:326] non-default args: {'model': 'meta-llama/Llama-3.1-70B-Instruct', 'tensor_parallel_size': 8, 'speculative_config': {'method': 'eagle3', 'model': 'yuhuili/EAGLE3-LLaMA3.1-Instruct-70B', 'num_speculative_tokens': 3}}
(EngineCore_0 pid=210) INFO 03-10 16:19:12 [core.py:654] Waiting for init message from front-end.
(EngineCore_0 pid=210) INFO 03-10 16:19:12 [core.py:71] Initializing a V1 LLM engine (v0.10.1) with config: model='meta-llama/Llama-3.1-70B-Instruct', speculative_config=SpeculativeConfig(method='eagle3', model='yuhuili/EAGLE3-LLaMA3.1-Instruct-70B', num_spec_tokens=3), tensor_parallel_size=8
"""


def _vllm_start(t: dt.datetime) -> list[str]:
    out = _VLLM_START.rstrip("\n").split("\n")
    for r in range(RANKS):
        pid = 300 + r
        out.append(f"(VllmWorker TP{r} pid={pid}) INFO 03-10 16:19:20 [parallel_state.py:1134] "
                   f"rank {r} in world size 8 is assigned as DP rank 0, PP rank 0, TP rank {r}")
        out.append(f"(VllmWorker TP{r} pid={pid}) INFO 03-10 16:19:25 [gpu_model_runner.py:1953] "
                   "Starting to load model meta-llama/Llama-3.1-70B-Instruct...")
    for r in range(RANKS):
        out.append(f"(VllmWorker TP{r} pid={300 + r}) INFO 03-10 16:21:02 [default_loader.py:262] "
                   "Loading weights took 96.12 seconds")
    out += [
        "(EngineCore_0 pid=210) INFO 03-10 16:21:40 [kv_cache_utils.py:829] GPU KV cache size: "
        "1,234,560 tokens",
        "(EngineCore_0 pid=210) INFO 03-10 16:22:10 [core.py:214] init engine (profile, create kv "
        "cache, warmup model) took 60.21 seconds",
        "(APIServer pid=1) INFO 03-10 16:22:12 [api_server.py:1880] Starting vLLM API server 0 on "
        "http://0.0.0.0:8000",
        "(APIServer pid=1) INFO:     Started server process [1]",
        "(APIServer pid=1) INFO:     Application startup complete.",
    ]
    return out


def _vllm_tail(rng: random.Random, t: dt.datetime, *, ansi: bool = False) -> Iterator[str]:
    step = 0
    pre, post = ("\x1b[1;36m(APIServer pid=1)\x1b[0;0m ", "") if ansi else ("(APIServer pid=1) ", "")
    while True:
        step += 1
        t += dt.timedelta(seconds=10)
        stamp = t.strftime("%m-%d %H:%M:%S")
        k = step % 5
        if k == 0:
            acc = rng.randint(0, 300)
            dr = 900
            yield (
                f"{pre}INFO {stamp} [metrics.py:100] SpecDecoding metrics: Mean acceptance length: "
                f"{1 + 3 * acc / dr:.2f}, Accepted throughput: {acc / 10:.2f} tokens/s, Drafted "
                f"throughput: {dr / 10:.2f} tokens/s, Accepted: {acc} tokens, Drafted: {dr} tokens, "
                f"Per-position acceptance rate: {rng.random():.3f}, {rng.random() / 2:.3f}, "
                f"{rng.random() / 4:.3f}, Avg Draft acceptance rate: {100 * acc / dr:.1f}%{post}"
            )
        elif k == 1:
            yield (
                f"{pre}INFO {stamp} [loggers.py:123] Engine 000: Avg prompt throughput: "
                f"{rng.random() * 900:.1f} tokens/s, Avg generation throughput: "
                f"{rng.random() * 400:.1f} tokens/s, Running: {rng.randint(0, 64)} reqs, Waiting: "
                f"{rng.randint(0, 9)} reqs, GPU KV cache usage: {rng.random() * 90:.1f}%, Prefix "
                f"cache hit rate: {rng.random() * 60:.1f}%{post}"
            )
        else:
            yield (
                f'{pre}INFO:     10.1.{rng.randint(0, 9)}.{rng.randint(2, 250)}:{40000 + step % 20000}'
                f' - "POST /v1/chat/completions HTTP/1.1" 200 OK'
            )


def _write(path: Path, head: list[str], tail: Iterator[str], size: int) -> None:
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        block = "\n".join(head) + "\n"
        fh.write(block)
        written = len(block.encode())
        while written < size:
            block = "\n".join(next(tail) for _ in range(_BLOCK)) + "\n"
            fh.write(block)
            written += len(block)


def _sg(**kw: object) -> Callable[[Path, int, int], None]:
    def writer(path: Path, size: int, seed: int) -> None:
        rng = random.Random(seed)
        head, t = _startup(RANKS, dt.datetime(2026, 2, 22, 22, 35, 21), rng)
        _write(path, head, _sglang_tail(rng, t, **kw), size)  # type: ignore[arg-type]

    return writer


def _vllm(ansi: bool) -> Callable[[Path, int, int], None]:
    def writer(path: Path, size: int, seed: int) -> None:
        rng = random.Random(seed)
        t = dt.datetime(2026, 3, 10, 16, 22, 20)
        head = _vllm_start(t)
        if ansi:
            head = [h.replace("(APIServer pid=1) ", "\x1b[1;36m(APIServer pid=1)\x1b[0;0m ")
                    for h in head]
        _write(path, head, _vllm_tail(rng, t, ansi=ansi), size)

    return writer


def _folder8(path: Path, size: int, seed: int) -> None:
    """The 1% interleaved mix, one file per rank (as `--log-dir` style launchers write)."""
    path.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    head, t = _startup(RANKS, dt.datetime(2026, 2, 22, 22, 35, 21), rng)
    files = [open(path / f"rank{r}.log", "w", encoding="utf-8") for r in range(RANKS)]  # noqa: SIM115
    try:
        for line in head:
            r = next((k for k in range(RANKS) if f" TP{k} " in line or f"[{k}] NCCL" in line), 0)
            files[r].write(line + "\n")
        written = 0
        tail = _sglang_tail(rng, t, odd=0.01)
        while written < size:
            bufs: list[list[str]] = [[] for _ in range(RANKS)]
            for _ in range(_BLOCK):
                line = next(tail)
                r = next((k for k in range(RANKS) if f"TP{k} " in line or f"[{k}] NCCL" in line), 0)
                bufs[r].append(line)
                written += len(line) + 1
            for r, b in enumerate(bufs):
                if b:
                    files[r].write("\n".join(b) + "\n")
    finally:
        for f in files:
            f.close()


def _gz(path: Path, size: int, seed: int) -> None:
    """The 1% interleaved mix, gzip-compressed (``size`` is the uncompressed size)."""
    plain = path.with_suffix(".plain")
    _sg(odd=0.01)(plain, size, seed)
    with open(plain, "rb") as src, gzip.open(path, "wb", compresslevel=1) as dst:
        while True:
            piece = src.read(16 << 20)
            if not piece:
                break
            dst.write(piece)
    plain.unlink()


def _real(path: Path, size: int, seed: int) -> None:
    """The real corpus logs (tuning part of the split only), concatenated and repeated."""
    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root / "tools"))
    from corpus_split import case_dirs, part_of

    logs = [d / "log.txt" for d in case_dirs() if (d / "log.txt").is_file()
            and part_of(d) == "tuning"]
    data = b"".join(p.read_bytes().rstrip(b"\n") + b"\n" for p in logs)
    with open(path, "wb") as fh:
        written = 0
        while written < size:
            fh.write(data)
            written += len(data)


MIXES: dict[str, tuple[str, Callable[[Path, int, int], None]]] = {
    "clean": ("SGLang, 8 ranks: start-up then a clean serving tail", _sg()),
    "warn0.1": ("serving tail, WARNING + NCCL INFO lines interleaved at 0.1%", _sg(odd=0.001)),
    "warn1": ("serving tail, WARNING + NCCL INFO lines interleaved at 1%", _sg(odd=0.01)),
    "warn5": ("serving tail, WARNING + NCCL INFO lines interleaved at 5%", _sg(odd=0.05)),
    "acceptlen": ("SGLang spec decoding: `accept len` on every decode line", _sg(spec=True)),
    "vllm-spec": ("vLLM serving tail with SpecDecoding metrics lines", _vllm(False)),
    "ansi": ("the vLLM tail with ANSI colour codes", _vllm(True)),
    "http": ("HTTP access lines only (after the start-up)", _sg(access_only=True)),
    "spam": ("one warning repeated (5 M times in 1 GiB)", _sg(spam=True)),
    "folder8": ("the 1% mix as a folder of 8 per-rank files", _folder8),
    "gz": ("the 1% mix gzip-compressed (size = uncompressed)", _gz),
    "real": ("the real corpus logs (tuning part), concatenated, repeated", _real),
}


def write_mix(name: str, path: Path, size: int, seed: int = 0) -> Path:
    MIXES[name][1](path, size, seed)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("name", choices=sorted(MIXES))
    ap.add_argument("out", type=Path)
    ap.add_argument("--size-mib", type=float, default=128)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    write_mix(a.name, a.out, int(a.size_mib * (1 << 20)), a.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
