"""Generate a realistic multi-rank SGLang log for the analyser benchmark.

The log is what ``python -m sglang.launch_server --tp 8 --dp 8 --enable-dp-attention ...
2>&1 | tee server.log`` gives:
the args line, per-rank startup with SGLang's real message strings (distributed init,
weight loading with the shard progress bar, KV cache, CUDA-graph capture with its bar),
NCCL INFO chatter from every rank, uvicorn's start-up lines, the warm-up request, then a
long serving tail of Prefill/Decode batch lines and HTTP access lines until the size is
reached. A few warnings are sprinkled through the tail, as in real logs.

usage: python benchmarks/gen_log.py OUT [--size-mib 1024] [--ranks 8] [--seed 0]
"""

from __future__ import annotations

import argparse
import datetime as dt
import random
import sys
from pathlib import Path

__all__ = ["generate", "main"]

MODEL = "moonshotai/Kimi-K2-Instruct"


def _tag(r: int) -> str:
    """SGLang's rank tag with DP attention: every rank is its own DP group, so every rank
    logs its own Prefill/Decode batch lines (without it only TP0 does)."""
    return f"DP{r} TP{r} EP{r}"


def _ts(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%d %H:%M:%S")


def _startup(ranks: int, t0: dt.datetime, rng: random.Random) -> tuple[list[str], dt.datetime]:
    out: list[str] = []
    t = t0
    out.append(
        f"[{_ts(t)}] server_args=ServerArgs(model_path='{MODEL}', tokenizer_path='{MODEL}', "
        f"tokenizer_mode='auto', load_format='auto', trust_remote_code=True, dtype='auto', "
        f"kv_cache_dtype='auto', quantization='compressed-tensors', context_length=None, "
        f"device='cuda', served_model_name='{MODEL}', host='0.0.0.0', port=30000, "
        f"mem_fraction_static=0.85, max_running_requests=None, tp_size={ranks}, "
        f"pp_size=1, dp_size={ranks}, ep_size={ranks}, nnodes=1, node_rank=0, "
        f"attention_backend=None, speculative_algorithm=None, enable_dp_attention=True, "
        f"random_seed=1234, log_level='info', watchdog_timeout=300, dist_timeout=None)"
    )
    for _ in range(ranks):
        out.append(  # noqa: PERF401
            f"INFO {t:%m-%d %H:%M:%S} [__init__.py:216] Automatically detected platform cuda."
        )
    t += dt.timedelta(seconds=6)
    for r in range(ranks):
        out.append(
            f"[{_ts(t)} {_tag(r)}] Attention backend not set. Use triton_attn backend by default."
        )
        out.append(f"[{_ts(t)} {_tag(r)}] Init torch distributed begin.")
    host = "gpu-node-0"
    for r in range(ranks):
        pid = 4100 + r
        for k in range(rng.randint(180, 260)):
            out.append(  # noqa: PERF401
                f"{host}:{pid}:{pid} [{r}] NCCL INFO Channel {k % 32:02d}/0 : {r}[{r}] -> "
                f"{(r + 1) % ranks}[{(r + 1) % ranks}] via P2P/CUMEM/read"
            )
        out.append(
            f"{host}:{pid}:{pid} [{r}] NCCL INFO comm 0x{0x55aa0000 + r:x} rank {r} nranks "
            f"{ranks} cudaDev {r} nvmlDev {r} busId {r + 1}8000 commId 0x9c1e - Init COMPLETE"
        )
    t += dt.timedelta(seconds=4)
    for r in range(ranks):
        out.append(f"[{_ts(t)} {_tag(r)}] Init torch distributed ends. mem usage=1.12 GB")
        out.append(f"[{_ts(t)} {_tag(r)}] Load weight begin. avail mem=176.43 GB")
    for r in range(ranks):
        if r % 3 == 1:
            out.append(  # noqa: PERF401
                f"[{_ts(t)} {_tag(r)}] Acceleration for non-quantized schemes is not supported by "
                "Compressed Tensors. Falling back to UnquantizedLinearMethod"
            )
    shards = 64
    start = t
    for k in range(shards + 1):
        el = int(34 * k / shards)
        rate = 0.53 + rng.random() * 0.05
        pct = int(100 * k / shards)
        out.append(
            f"Loading safetensors checkpoint shards: {pct:3d}% Completed | {k}/{shards} "
            f"[00:{el:02d}<00:{34 - el:02d}, {1 / rate:.2f}it/s]"
        )
    t = start + dt.timedelta(seconds=34)
    for r in range(ranks):
        out.append(  # noqa: PERF401
            f"[{_ts(t)} {_tag(r)}] Load weight end. type=DeepseekV3ForCausalLM, "
            "dtype=torch.bfloat16, avail mem=108.21 GB, mem usage=68.22 GB."
        )
    t += dt.timedelta(seconds=2)
    for r in range(ranks):
        out.append(
            f"[{_ts(t)} {_tag(r)}] KV Cache is allocated. #tokens: 1214528, KV size: 79.60 GB"
        )
        out.append(f"[{_ts(t)} {_tag(r)}] Memory pool end. avail mem=27.62 GB")
    for r in range(ranks):
        out.append(  # noqa: PERF401
            f"[{_ts(t)} {_tag(r)}] Capture cuda graph begin. This can take up to several minutes. "
            "avail mem=27.10 GB"
        )
    bs = [1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64]
    for i, b in enumerate(bs):
        out.append(
            f"Capturing batches (bs={b} avail_mem=26.9{i % 10} GB): "
            f"{int(100 * i / len(bs)):3d}%|###       | {i}/{len(bs)} "
            f"[00:{i * 2:02d}<00:20, 1.9it/s]"
        )
    t += dt.timedelta(seconds=24)
    for r in range(ranks):
        out.append(  # noqa: PERF401
            f"[{_ts(t)} {_tag(r)}] Capture cuda graph end. Time elapsed: 24.18 s. "
            "mem usage=0.91 GB. avail mem=26.19 GB."
        )
    out.append(
        f"[{_ts(t)} {_tag(0)}] max_total_num_tokens=1214528, chunked_prefill_size=8192, "
        "max_prefill_tokens=16384, max_running_requests=4096, context_len=131072"
    )
    t += dt.timedelta(seconds=1)
    out.append(f"[{_ts(t)}] INFO:     Started server process [4095]")
    out.append(f"[{_ts(t)}] INFO:     Waiting for application startup.")
    out.append(f"[{_ts(t)}] INFO:     Application startup complete.")
    out.append(
        f"[{_ts(t)}] INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)"
    )
    out.append(f'[{_ts(t)}] INFO:     127.0.0.1:40162 - "GET /get_model_info HTTP/1.1" 200 OK')
    out.append(
        f"[{_ts(t)} {_tag(0)}] Prefill batch. #new-seq: 1, #new-token: 7, #cached-token: 0, "
        "token usage: 0.00, #running-req: 0, #queue-req: 0, "
    )
    out.append(f'[{_ts(t)}] INFO:     127.0.0.1:40178 - "POST /generate HTTP/1.1" 200 OK')
    out.append(f"[{_ts(t)}] The server is fired up and ready to roll!")
    return out, t


def generate(path: Path, size_mib: int = 1024, ranks: int = 8, seed: int = 0) -> int:
    """Write the log; returns its size in bytes."""
    rng = random.Random(seed)
    target = size_mib << 20
    t = dt.datetime(2026, 2, 22, 22, 35, 21)
    lines, t = _startup(ranks, t, rng)
    written = 0
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        block = "\n".join(lines) + "\n"
        fh.write(block)
        written += len(block.encode())
        port = 40200
        step = 0
        while written < target:
            buf: list[str] = []
            for _ in range(2000):
                step += 1
                if step % 40 == 0:
                    t += dt.timedelta(seconds=1)
                stamp = _ts(t)
                r = step % ranks
                run = rng.randint(1, 256)
                if step % 11 == 0:
                    buf.append(
                        f"[{stamp} {_tag(r)}] Prefill batch. #new-seq: {rng.randint(1, 8)}, "
                        f"#new-token: {rng.randint(16, 8192)}, #cached-token: "
                        f"{rng.randint(0, 4096)}, token usage: {run / 1000:.2f}, "
                        f"#running-req: {run}, #queue-req: {rng.randint(0, 9)}, "
                    )
                elif step % 97 == 0:
                    port += 1
                    buf.append(
                        f'[{stamp}] INFO:     10.0.3.{rng.randint(2, 250)}:{port} - '
                        '"POST /v1/chat/completions HTTP/1.1" 200 OK'
                    )
                elif step % 250_000 == 0:
                    buf.append(
                        f"[{stamp} {_tag(r)}] WARNING scheduler.py:1422: The request queue is "
                        "long; consider increasing --max-running-requests."
                    )
                else:
                    buf.append(
                        f"[{stamp} {_tag(r)}] Decode batch. #running-req: {run}, #token: "
                        f"{run * rng.randint(200, 900)}, token usage: {run / 1000:.2f}, "
                        f"cuda graph: True, gen throughput (token/s): "
                        f"{rng.random() * 4000:.2f}, #queue-req: 0, "
                    )
            block = "\n".join(buf) + "\n"
            fh.write(block)
            written += len(block)
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    n = generate(a.out, a.size_mib, a.ranks, a.seed)
    print(f"wrote {a.out} ({n / (1 << 20):.0f} MiB)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
