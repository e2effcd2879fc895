"""What the records as a whole say: framework, version, config, and who wrote each line.

Run on the record drafts once reading is done (:func:`diag.parse.pipeline.read_sources`):

- :func:`detect_framework`: SGLang or vLLM, by votes (line formats, process prefixes,
  names, catalogue messages only one of them prints);
- :func:`config_of`: the merged launch config from the args lines (``server_args=...``,
  ``non-default args: {...}``, ``Namespace(...)``), read with :mod:`ast`, never eval;
- :func:`version_of`: the framework version a line names;
- :func:`attribute`: a rank for rank-less lines where the log says which one (a pid's own
  ``rank=N`` line, vLLM V0's worker order, single-rank layouts), always with the reason;
- :func:`any_log_word`: does a log without any known line format still hold a log line?
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from diag.model import RankId
from diag.parse.config import detect_config_line, normalise, parse_config_message
from diag.parse.records import Draft, apply_layout

if TYPE_CHECKING:
    from diag.phases import Catalogue

__all__ = ["any_log_word", "attribute", "config_of", "detect_framework", "version_of"]


def _catalogue() -> Catalogue:
    from diag.phases import load_catalogue

    return load_catalogue()


# Lines that say "a process ran and stopped" even with no log format around them.
_LOG_LINE = re.compile(
    r"^(?:[\w.]+(?:Error|Exception|Interrupt|Exit)(?:: |$)|Killed$|Aborted(?: \(core dumped\))?$|"
    r"Segmentation fault|terminate called after throwing|Fatal Python error: |"
    # a shell's report of a job a signal ended (bash: "./run.sh: line 22:  5255 Aborted
    # (core dumped) vllm serve ..."); ROCm's runtime on a GPU fault (ROCR-Runtime:
    # "Memory access fault by GPU node-1 (Agent handle: ...)", "HW Exception by GPU node-1")
    r".*: line \d+: +\d+ (?:Killed|Aborted|Segmentation fault|Bus error)\b|"
    r"(?:Memory access fault|HW Exception) by GPU node-\d+|"
    r'(?:\((?:Python|C)\) )?File "[^"]+", line \d+,? in \S+|'  # traceback/faulthandler/pystack
    r"#\d+ \S+ from \S+:\d+$|"  # a frame of torch's failed-collective report
    r"[\w<>.]+ \([^()\s]+\.py:\d+\)$|"  # a py-spy frame (a dump's frames without a header)
    # stack dumps (diag.stacks.textdump): pystack and py-spy thread headers, py-spy --json,
    # pytest-timeout's per-thread title, torch's fatal-signal printer
    r"Traceback for thread \d+ |Thread (?:0x[0-9a-fA-F]+|\d+) \((?:idle|active|gil)|"
    r'"owns_gil": (?:true|false)|\[\{"pid": ?\d+|~{3,} Stack of |!{3,} ?\w[\w ]* encountered|'
    # Ascend CANN's error-code lines ("EZ9999: [PID: 696742] 2025-10-31-21:35:03.992 ...");
    # UCX's fatal-signal report ("[host:pid:tid] Caught signal 11 (Segmentation fault: ...)",
    # then "==== backtrace (tid: N) ====")
    r"[A-Z]{2}[0-9]{4}: \[PID: ?[0-9]+\]|\[[\w.\-]+:[0-9]+:[0-9]+:[0-9]+\] +Caught signal [0-9]+|"
    r"=+ backtrace \(tid: *[0-9]+\) =+$|"
    # ... and its frames, where the paste lost the header (" 1 0x000000000006a920 SaveProxy()
    # /src/proxy.cc:518")
    r"[0-9]{1,4} 0x[0-9a-fA-F]{8,16} \S.*\(\)  \S+:[0-9]+$)"
)


def any_log_word(drafts: Sequence[Draft]) -> bool:
    """Plain lines only: is any of them a log line all the same (an exception's last line,
    the shell's "Killed", a message of the phase catalogue)?"""
    cat = _catalogue()
    for d in drafts[:20000]:
        msg = d.p.message.strip()
        if _LOG_LINE.match(msg) or cat.matches_message(msg):
            return True
        if any(_LOG_LINE.match(c.strip()) for c in (*d.continuation[:40], *d.continuation[-3:])):
            return True
    return False


# ---------------------------------------------------------------------------
# attribution


_WORLD_RANK = re.compile(r"world_size=([0-9]{1,9}) rank=([0-9]{1,9}) local_rank=[0-9]")
# vllm/distributed/parallel_state.py (initialize_model_parallel, 0.8.5 .. 0.20.0): each
# worker names its place; with Ray's "(RayWorkerWrapper pid=N, ip=X)" prefix it binds the
# pid (on that host) to its rank
_ASSIGNED = re.compile(
    r"rank [0-9]{1,9} in world size [0-9]{1,9} is assigned as DP rank ([0-9]{1,9}), "
    r"PP rank ([0-9]{1,9}), (?:PCP rank [0-9]{1,9}, )?TP rank ([0-9]{1,9})"
)


def _place(
    m: re.Match[str] | None, host: str | None, config: Mapping[str, object]
) -> RankId | None:
    """The rank an ``is assigned as DP rank d, PP rank p, TP rank t`` line names (dp and
    pp only where the layout has more than one, as the expected ranks have them)."""
    if m is None:
        return None
    dp, pp = config.get("dp"), config.get("pp")
    return RankId(
        node=host,
        dp=int(m.group(1)) if isinstance(dp, int) and dp > 1 else None,
        pp=int(m.group(2)) if isinstance(pp, int) and pp > 1 else None,
        tp=int(m.group(3)),
    )


def detect_framework(drafts: Sequence[Draft]) -> str:
    """Votes: SGLang's line format and names, vLLM's process prefixes and names, and
    messages of the phase catalogue that only one of the two prints. vLLM-format lines
    count for vLLM, a little (SGLang logs carry some from the vLLM code it imports)."""
    cat = _catalogue()
    sg = vl = 0
    # (speed) a message's own votes (its words, the catalogue's entries), per message:
    # every rank logs the same messages
    votes: dict[str, tuple[int, int]] = {}
    for d in drafts:
        g = d.p.grammar
        msg = d.p.message
        if g == "sglang":
            sg += 3
        elif g == "vllm":
            vl += 1
        if d.p.process and d.p.process.startswith(
            ("VllmWorker", "Worker", "EngineCore", "APIServer", "RayWorker")
        ):
            vl += 3
        vote = votes.get(msg)
        if vote is None:
            vote = votes[msg] = _message_votes(cat, msg)
        sg += vote[0]
        vl += vote[1]
        for c in d.continuation[:50]:
            if "/sglang/" in c:
                sg += 1
            elif "/vllm/" in c:
                vl += 1
    if sg == 0 and vl == 0:
        return "unknown"
    return "sglang" if sg >= vl else "vllm"


def _message_votes(cat: Catalogue, msg: str) -> tuple[int, int]:
    """A message's votes for (SGLang, vLLM): the names it holds, and the framework of the
    first framework-specific catalogue entry that matches it."""
    sg = vl = 0
    low = msg[:400].lower()
    if "sglang" in low or "server_args=" in low or "sgl_kernel" in low:
        sg += 2
    if "vllm" in low or "llm engine" in low or "enginecore" in low:
        vl += 1
    fw = cat.framework_of(msg)
    if fw == "sglang":
        sg += 2
    elif fw is not None:
        vl += 2
    return sg, vl


def config_of(drafts: Sequence[Draft]) -> tuple[dict[str, object], str | None]:
    merged: dict[str, object] = {}
    version: str | None = None
    raw_all: dict[str, object] = {}
    # (speed) an args line's parse, per text: every rank (every launch of a log pasted
    # twice) prints the same line, and its parse (ast, literal_eval) is only read here
    parsed: dict[str, tuple[dict[str, object], str | None]] = {}
    for i, d in enumerate(drafts):
        msg = d.p.message
        if not detect_config_line(msg):
            continue
        text = msg
        if d.continuation:
            text = msg + " " + " ".join(c.strip() for c in d.continuation)
        got = parsed.get(text)
        if got is None:
            got = parsed[text] = parse_config_message(text)
        raw, v = got
        if not raw and "LLM engine" not in msg:
            # a paste that hard-wrapped the args line: join the plain lines after it
            wrapped = [text]
            for nxt in drafts[i + 1 : i + 400]:
                if nxt.p.grammar != "plain" or nxt.line - d.line > 400:
                    break
                wrapped.append(nxt.raw)
            joined = "".join(wrapped)
            got = parsed.get(joined)
            if got is None:
                got = parsed[joined] = parse_config_message(joined)
            raw, v = got
        if v and not version:
            version = v
        for k, val in raw.items():
            raw_all.setdefault(k, val)
    if raw_all:
        merged = normalise(raw_all)
        merged["raw"] = raw_all
    return merged, version


# each with a literal every match holds (tested first: most messages name no version)
_VERSION_RE = (
    ("vLLM API server version ", re.compile(r"vLLM API server version (\d+\.\d+\.\d+\S*)")),
    ("LLM engine (v", re.compile(r"LLM engine \(v(\d+\.\d+[^)]*)\)")),
    ("sglang", re.compile(r"\bsglang[=:]{1,2}v?(\d+\.\d+\.\d+(?:\.post\d+)?)")),
)


def version_of(drafts: Sequence[Draft], framework: str) -> str | None:
    for d in drafts:
        msg = d.p.message
        for lit, rx in _VERSION_RE:
            if lit not in msg:
                continue
            m = rx.search(msg)
            if m and (framework != "sglang" or "sglang" in rx.pattern):
                return m.group(1)
    return None


def attribute(drafts: Sequence[Draft], framework: str, config: dict[str, object]) -> None:
    """Give rank-less lines a rank where the log says which one, always with the reason."""
    # 0. global ranks read as TP become PP x TP with pp > 1; vLLM engine cores that run the
    #    model themselves (dp > 1, tp = pp = 1) are their DP rank (diag.parse.records)
    apply_layout(drafts, config.get("tp"), config.get("pp"), config.get("dp"))
    # 1. vLLM workers without rank in their prefix: the pid's own "rank=N" line. Pids
    #    are per source (one file per node: pids of two hosts may collide)
    pid_rank: dict[tuple[str, int], tuple[RankId, str]] = {}
    driver: RankId | None = None  # the V0 driver's own place, where it logs one
    for d in drafts:
        if d.p.pid is None:
            if driver is None and d.p.process is None and "is assigned as DP rank" in d.p.message:
                driver = _place(_ASSIGNED.search(d.p.message), None, config)
            continue
        m = _WORLD_RANK.search(d.p.message)
        if m and (d.rank is None or d.rank_reason != "tag"):
            reason = f"pid {d.p.pid} logged world_size={m.group(1)} rank={m.group(2)}"
            rank = RankId(node=d.p.host, tp=int(m.group(2)))
            pid_rank.setdefault((d.source, d.p.pid), (rank, reason))
        a = _ASSIGNED.search(d.p.message) if "is assigned as DP rank" in d.p.message else None
        if a and (d.rank is None or d.rank_reason != "tag"):
            rank = _place(a, d.p.host, config) or RankId(tp=0)
            where = f" on {d.p.host}" if d.p.host else ""
            pid_rank[(d.source, d.p.pid)] = (rank, f"pid {d.p.pid}{where} logged its place "
                                             f"({a.group(0)[a.group(0).index('DP rank'):]})")
    # ... and a process whose other lines name its rank (NCCL lines of a tagged worker)
    tagged_pids: dict[tuple[str, int], set[RankId]] = defaultdict(set)
    for d in drafts:
        if d.p.pid is not None and d.rank is not None and d.rank_reason == "tag":
            tagged_pids[(d.source, d.p.pid)].add(d.rank)
    for key, ranks in tagged_pids.items():
        if len(ranks) == 1 and key not in pid_rank:
            (rank,) = ranks
            pid_rank[key] = (rank, f"pid {key[1]} is {rank.label} (its other lines are tagged)")
    if pid_rank:
        for d in drafts:
            if d.rank is None and d.p.pid is not None and (d.source, d.p.pid) in pid_rank:
                d.rank, d.rank_reason = pid_rank[(d.source, d.p.pid)]
    tagged = any(d.rank is not None and d.rank_reason == "tag" for d in drafts)
    procs = {d.p.process for d in drafts if d.p.process}
    # 2. vLLM V0 multiprocessing workers: rank by pid order (with the driver as TP0)
    v0 = framework == "vllm" and any(
        p in ("VllmWorkerProcess", "RayWorkerWrapper", "RayWorkerVllm") for p in procs
    )
    v1 = any(
        p.startswith(("EngineCore", "APIServer", "VllmWorker", "Worker"))
        and p != "VllmWorkerProcess"
        for p in procs
    )
    if v0 and not v1:
        worker_pids = sorted(
            {d.p.pid for d in drafts if d.p.process == "VllmWorkerProcess" and d.p.pid}
        )
        ranked = {pid for _, pid in pid_rank}
        for i, pid in enumerate(worker_pids, start=1):
            if pid in ranked:
                continue
            reason = (
                "VllmWorkerProcess pid order (vLLM V0 starts workers in rank order; "
                "the driver is TP0)"
            )
            for d in drafts:
                if d.p.pid == pid and d.rank is None:
                    d.rank, d.rank_reason = RankId(tp=i), reason
        for d in drafts:
            if d.rank is None and d.p.process is None and d.p.grammar == "vllm":
                d.rank = driver or RankId(tp=0)
                d.rank_reason = (f"vLLM V0 driver (lines with no process prefix) is "
                                 f"{d.rank.label}")
        return
    # 3. single-rank layouts: every line belongs to the one rank
    world = 1
    for k in ("tp", "pp", "dp"):
        v = config.get(k)
        if isinstance(v, int) and v > 0:
            world *= v
    if config and world == 1 and not tagged and not pid_rank:
        reason = "single-rank layout (tp=pp=dp=1): every line belongs to TP0"
        for d in drafts:
            if d.rank is None and d.p.grammar not in ("uvicorn",) and d.p.process not in (
                "APIServer",
            ):
                d.rank, d.rank_reason = RankId(tp=0), reason
        return
    for d in drafts:
        if d.rank is None and d.p.grammar == "progress":
            d.rank_reason = "unattributed: progress bar has no rank prefix"


