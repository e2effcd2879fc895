"""Rank coordinates: the one parser of every form a log, a process title or a file name
uses to say which rank (or process) wrote a line.

Forms (FORMATS.md; sglang ``scheduler.py`` ``run_scheduler_process`` builds the prefix as
`` DP{d} PP{p} ATTN_CP{c} MOE_DP{m} TP{t} EP{e}``, each only when its size is > 1; older
versions add ``NP{n}`` for the node; vLLM's ``multiproc_executor.py`` names workers
``Worker_DP{d}_PP{p}_TP{t}_EP{e}``):

- SGLang tags after the time: ``TP3``, ``DP0 TP3 EP3``, ``PP1 TP0``, ``TP2 PP0`` (old
  order), ``NP1 TP9``, ``DP0 ATTN_CP1 MOE_DP1 TP3 EP3`` (:func:`parse_tags`);
- process titles and worker names: ``sglang::scheduler_DP0_TP3_EP3``, ``VLLM::Worker_TP1``,
  ``Worker_PP1_TP0``, ``EngineCore_DP1`` (:func:`parse_name`, :func:`rank_from_title`);
- vLLM / Ray process prefixes: ``(VllmWorker rank=3 pid=1090)``, ``(Worker_TP3 pid=..)``,
  ``(RayWorkerWrapper pid=1, ip=10.0.0.2)``, ``(pid=10414)`` (:func:`match_proc_prefix`);
- torch's ``[rank3]:`` (:func:`match_torch_rank`); torchrun's ``[default3]:`` is a
  wrapper (:mod:`diag.parse.unwrap`) that gives a local rank the same way;
- NCCL ``host:pid:tid [3]`` (:func:`match_nccl_prefix`: host, pid and CUDA device);
- vLLM-Omni's ``[Stage-1] `` engine stage (:func:`match_stage`; an engine, not a rank);
- SGLang 0.1-0.2's rank at the start of a bare message (its loggers printed
  ``%(message)s`` only): ``Rank 0: load weight end.``, ``[gpu_id=1] Init nccl begin.``
  (:func:`match_message_rank`);
- file names: ``rank2.log``, ``tp3.log``, ``worker_3.log``, ``node1/...``,
  ``scheduler_DP0_TP3.log`` (:func:`rank_from_path`).

What :class:`~diag.model.RankId` carries: node, dp, pp, tp, ep. The other tags
(``ATTN_CP``, ``ATTN_DP``, ``MOE_DP``, ``CP``, ``PD``, ``DCP`` ...) are *not* the DP rank and
not part of a rank's identity: SGLang derives them from the TP rank (``attn_cp_rank``,
``moe_dp_rank`` are slices of ``tp_rank``), so two lines of one rank always carry the same
ones. They are kept in :attr:`Coords.extra` (name, value) for whoever wants them, and a tag
set made only of them names no rank.

Everything here is a pure function over ``str``, bounded: digit runs are ASCII only and
at most 9 long before ``int()`` sees them (``²`` passes ``str.isdigit``; a 5000-digit run
never reaches ``int``), and nothing raises on any input.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, replace

from diag.model import RankId

__all__ = [
    "KEY_RE",
    "RANK_KEY_PORTABLE",
    "TAG_NAME",
    "TAGS_RE_SRC",
    "Coords",
    "NcclPrefix",
    "ProcPrefix",
    "key_coords",
    "match_nccl_prefix",
    "match_message_rank",
    "match_proc_prefix",
    "match_stage",
    "match_torch_rank",
    "parse_name",
    "parse_tags",
    "rank_from_path",
    "rank_from_title",
    "rank_key",
    "rank_keys",
    "small_int",
    "tags_rank",
]

# a tag name: DP, TP, ATTN_CP, MOE_DP, PD, DCP ... (two to six capitals, one optional
# capital prefix); its number is 1-9 ASCII digits not followed by another digit
TAG_NAME = r"(?:[A-Z]{2,6}_)?[A-Z]{2,6}"
_TAG_NUM = r"[0-9]{1,9}(?![0-9])"
# the tags of an SGLang prefix, as a regex fragment: " DP0 TP3 EP3" (leading spaces)
TAGS_RE_SRC = r"(?: " + TAG_NAME + _TAG_NUM + r")+"

_IDENTITY = {"DP": "dp", "PP": "pp", "TP": "tp", "EP": "ep"}
_NODE_TAGS = frozenset({"NP", "NODE", "NNODE"})
_MAX_EXTRA = 8


def small_int(s: str | None) -> int | None:
    """``int(s)`` for 1-9 ASCII digits, else None (never raises, never big)."""
    if not s or len(s) > 9 or not s.isascii() or not s.isdigit():
        return None
    return int(s)


@dataclass(frozen=True, slots=True)
class Coords:
    """Coordinates one prefix or name gives. ``extra`` holds the tags that are not part
    of a rank's identity (``(("ATTN_CP", 1), ("MOE_DP", 0))``); ``global_rank`` marks a
    lone global rank (torch ``[rank3]``, vLLM ``rank=3``) read as TP, which holds where
    the job is tensor-parallel only; ``replica`` marks a vLLM engine core (``EngineCore_DP1``):
    its DP names a replica whose workers are the ranks."""

    node: str | None = None
    dp: int | None = None
    pp: int | None = None
    tp: int | None = None
    ep: int | None = None
    extra: tuple[tuple[str, int], ...] = ()
    global_rank: bool = False
    replica: bool = False

    @property
    def has_rank(self) -> bool:
        return not self.replica and (
            self.tp is not None or self.pp is not None or self.dp is not None
            or self.ep is not None or self.node is not None
        )

    def rank(self) -> RankId | None:
        """The rank these coordinates name; None for a replica or extras alone."""
        if not self.has_rank:
            return None
        return RankId(node=self.node, dp=self.dp, pp=self.pp, tp=self.tp, ep=self.ep)

    def under(self, outer: Coords | None) -> Coords:
        """These (inner) coordinates completed by an outer prefix's: vLLM's
        ``(EngineCore_DP1 pid=..) (VllmWorker rank=0 pid=..)`` is DP1 TP0."""
        if outer is None:
            return self
        return Coords(
            node=self.node if self.node is not None else outer.node,
            dp=self.dp if self.dp is not None else outer.dp,
            pp=self.pp if self.pp is not None else outer.pp,
            tp=self.tp if self.tp is not None else outer.tp,
            ep=self.ep if self.ep is not None else outer.ep,
            extra=self.extra or outer.extra,
            global_rank=self.global_rank,
            replica=self.replica and outer.replica,
        )


def _build(pairs: list[tuple[str, str]]) -> Coords | None:
    vals: dict[str, int] = {}
    node: str | None = None
    extra: list[tuple[str, int]] = []
    for name, num in pairs:
        v = small_int(num)
        if v is None:
            continue
        key = _IDENTITY.get(name)
        if key is not None:
            vals.setdefault(key, v)
        elif name in _NODE_TAGS:
            node = node if node is not None else str(v)
        elif name == "MOE_EP":
            extra.append((name, v))
            vals.setdefault("_moe_ep", v)
        elif len(extra) < _MAX_EXTRA:
            extra.append((name, v))
    if "ep" not in vals and "_moe_ep" in vals:
        vals["ep"] = vals["_moe_ep"]
    if not vals and node is None and not extra:
        return None
    return Coords(
        node=node,
        dp=vals.get("dp"),
        pp=vals.get("pp"),
        tp=vals.get("tp"),
        ep=vals.get("ep"),
        extra=tuple(extra),
    )


_TAG_TOKEN = re.compile(r"(" + TAG_NAME + r")(" + _TAG_NUM + r")")


def parse_tags(tags: str) -> Coords | None:
    """SGLang's space-separated tags (``"DP0 TP3 EP3"``, ``" ATTN_CP1 TP3"``); None when
    there are none. A token that is not a whole tag (``xTP3``, ``TP3x``) is ignored."""
    if len(tags) > 400:
        return None
    pairs: list[tuple[str, str]] = []
    for tok in tags.split():
        m = _TAG_TOKEN.fullmatch(tok)
        if m:
            pairs.append((m.group(1), m.group(2)))
    return _build(pairs) if pairs else None


# inside a name: a tag between separators (`_`, `::`, space, brackets, start/end)
_NAME_TAG = re.compile(
    r"(?:^|(?<=[\s_:\[(]))(" + TAG_NAME + r")(" + _TAG_NUM + r")(?=$|[\s_\]),:.\-])"
)
_RANK_EQ = re.compile(r"(?:^|(?<=[\s(,]))rank[= ]([0-9]{1,9})(?![0-9])|\[rank([0-9]{1,9})\]")


def parse_name(name: str | None) -> Coords | None:
    """Coordinates in a process name or title: ``sglang::scheduler_DP0_PP1_TP3_EP3``,
    ``Worker_DP1_TP0_EP2``, ``VLLM::Worker_TP1``, ``EngineCore_DP1`` (a replica),
    ``VllmWorker rank=3`` / ``[rank3]`` (a global rank, read as TP)."""
    if not name or len(name) > 400:
        return None
    pairs = [(a, b) for a, b in _NAME_TAG.findall(name)]
    c = _build(pairs) if pairs else None
    if c is None or c.tp is None:
        m = _RANK_EQ.search(name)
        if m:
            r = small_int(m.group(1) or m.group(2))
            if r is not None:
                c = replace(c or Coords(), tp=r, global_rank=True)
    if c is None:
        return None
    if "EngineCore" in name and c.tp is None and c.pp is None:
        c = replace(c, replica=True)
    return c


@functools.lru_cache(maxsize=4096)
def tags_rank(tags: str) -> RankId | None:
    """The rank SGLang's tags name (:func:`parse_tags`), cached: a log repeats a few tag
    strings millions of times."""
    c = parse_tags(tags)
    return None if c is None else c.rank()


def rank_from_title(title: str | None) -> RankId | None:
    """The rank a process title or prefix names (see :func:`parse_name`); None when none
    (``sglang::detokenizer``, ``VLLM::EngineCore``)."""
    c = parse_name(title)
    return None if c is None else c.rank()


# ---------------------------------------------------------------------------
# per-line prefixes


@dataclass(frozen=True, slots=True)
class ProcPrefix:
    """``(Name rank=3 pid=12, ip=10.0.0.2) ``: what it says and where it ends."""

    name: str | None
    pid: int | None
    ip: str | None
    coords: Coords | None
    end: int


# (the name may end in a space and its rank tags: vLLM 0.10.1's WorkerProc names its log
# prefix "VllmWorker" plus " PP{i}_TP{j}" / " TP{j}" / " PP{i}" where those sizes exceed 1,
# vllm/v1/executor/multiproc_executor.py: decorate_logs(process_name))
_PROC_PREFIX = re.compile(
    r"\((?:(?P<name>[A-Za-z][\w:.\-]{0,80}(?: (?:[A-Z]{2}[0-9]{1,5}_){0,3}[A-Z]{2}[0-9]{1,5})?)"
    r"\s*)?(?:rank=(?P<rank>[0-9]{1,9})\s*)?"
    r"pid=(?P<pid>[0-9]{1,9})(?:,\s*ip=(?P<ip>[\w.:\-]{1,80}))?\)\s?"
)


def match_proc_prefix(line: str, pos: int = 0) -> ProcPrefix | None:
    """A vLLM / Ray process prefix at ``pos``: ``(VllmWorker rank=3 pid=1090)``,
    ``(Worker_PP1_TP0 pid=7)``, ``(EngineCore_DP1 pid=5)``, ``(RayWorkerWrapper pid=1,
    ip=10.0.0.2)``, ``(pid=10414)``."""
    if line[pos : pos + 1] != "(" or "pid=" not in line[pos : pos + 120]:
        return None
    m = _PROC_PREFIX.match(line, pos)
    if m is None:
        return None
    # one process prints the same prefix on every line: parse each distinct one once
    pp = _proc_prefix(m.group(0))
    return pp if pos == 0 else ProcPrefix(pp.name, pp.pid, pp.ip, pp.coords, m.end())


@functools.lru_cache(maxsize=4096)
def _proc_prefix(text: str) -> ProcPrefix:
    """The prefix ``text`` (the whole of it) read at position 0."""
    m = _PROC_PREFIX.match(text)
    assert m is not None
    name = m.group("name")
    rank = m.group("rank")
    coords: Coords | None = None
    if name:
        if rank is not None and name.startswith(("VllmWorker", "Worker")):
            coords = Coords(tp=small_int(rank), global_rank=True)
        elif name.startswith(("Worker", "VllmWorker", "EngineCore", "sglang", "VLLM", "vllm")):
            coords = parse_name(name)
    return ProcPrefix(name, small_int(m.group("pid")), m.group("ip"), coords, len(text))


_TORCH_RANK = re.compile(r"\[rank([0-9]{1,9})\]:\s?")


def match_torch_rank(line: str, pos: int = 0) -> tuple[int, int] | None:
    """torch's ``[rank3]:`` at ``pos``: (global rank, end)."""
    if not line.startswith("[rank", pos):
        return None
    m = _TORCH_RANK.match(line, pos)
    if m is None:
        return None
    r = small_int(m.group(1))
    return None if r is None else (r, m.end())


# vLLM-Omni's multi-stage engines: "[Stage-1] INFO ..." after (or instead of) the process
# prefix; each stage is its own engine (its own model), not a rank coordinate of another
_STAGE = re.compile(r"\[Stage-([0-9]{1,4})\] ")


def match_stage(line: str, pos: int = 0) -> tuple[int, int] | None:
    """vLLM-Omni's ``[Stage-1] `` at ``pos``: (stage, end)."""
    if not line.startswith("[Stage-", pos):
        return None
    m = _STAGE.match(line, pos)
    if m is None:
        return None
    n = small_int(m.group(1))
    return None if n is None else (n, m.end())


# SGLang 0.1-0.2 configured its loggers with ``format="%(message)s"`` (no time, no tag) and
# wrote the rank into the message: ``Rank {tp_rank}: ...`` (0.1.5-0.1.17,
# managers/router/model_rpc.py and model_runner.py: 'Rank 0: load weight end.',
# 'Rank 1: max_total_num_token=...') and ``[gpu_id={gpu_id}] ...`` (0.1.17-0.2.x,
# managers/controller/: 'Init nccl begin.', 'Load weight end. ...', 'max_total_num_tokens=').
# A gpu_id is the GPU its TP rank runs on: the TP rank itself on one node without data
# parallelism (manager_single: gpu_ids = range(tp_size_local)), dp * tp_size + tp_rank under
# manager_multi, the local index on each node of a multi-node job. Both are read as TP, as a
# global rank is (a per-GPU identity; apply_layout reads it as PP x TP where pp > 1).
_MSG_RANK = re.compile(r"Rank ([0-9]{1,9}): |\[gpu_id=([0-9]{1,9})\] ")


def match_message_rank(message: str) -> tuple[Coords, int] | None:
    """SGLang 0.1-0.2's rank at the start of a message (``Rank 3: ``, ``[gpu_id=3] ``):
    (coordinates, end of the prefix), else None."""
    if not message.startswith(("Rank ", "[gpu_id=")):
        return None
    m = _MSG_RANK.match(message)
    if m is None:
        return None
    r = small_int(m.group(1) or m.group(2))
    return None if r is None else (Coords(tp=r, global_rank=True), m.end())


@dataclass(frozen=True, slots=True)
class NcclPrefix:
    """``host:pid:tid [dev] ``: NCCL's line prefix (``dev`` is the CUDA device, a local
    index, not a rank)."""

    host: str
    pid: int | None
    tid: int | None
    device: int | None
    end: int


_NCCL = re.compile(r"([\w.\-]{1,253}):([0-9]{1,9}):([0-9]{1,9}) \[([0-9]{1,9})\] ")


def match_nccl_prefix(line: str, pos: int = 0) -> NcclPrefix | None:
    if ":" not in line[pos : pos + 300]:
        return None
    m = _NCCL.match(line, pos)
    if m is None:
        return None
    return NcclPrefix(
        m.group(1), small_int(m.group(2)), small_int(m.group(3)), small_int(m.group(4)), m.end()
    )


# ---------------------------------------------------------------------------
# file names

_PATH_PART = re.compile(
    r"(?:^|[^A-Za-z0-9])(?P<k>rank|tp|pp|dp|ep|worker|node|gpu)[_\-]?(?P<v>[0-9]{1,9})(?![0-9])",
    re.I,
)


def rank_from_path(path: str) -> RankId | None:
    """The rank a per-rank file's path names: ``rank2.log``, ``tp3.log``, ``worker_3.log``,
    ``node1/rank0.log``, ``scheduler_DP0_TP3_EP3.log``, ``logs/pp1_tp0.txt``. ``rank``,
    ``worker`` and ``gpu`` are read as TP (a global rank); a node in a folder name is
    kept. Only the last two path parts are read; None when they name no rank."""
    if not path or len(path) > 4096:
        return None
    parts = path.replace("\\", "/").rstrip("/").split("/")[-2:]
    node: str | None = None
    vals: dict[str, int] = {}
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        stem = part.rsplit(".", 1)[0] if last and "." in part else part
        # SGLang's own names (its log files carry the process title's tags)
        c = parse_name(stem)
        if c is not None and c.has_rank:
            for k in ("dp", "pp", "tp", "ep"):
                v = getattr(c, k)
                if v is not None:
                    vals.setdefault(k, v)
            node = c.node if c.node is not None else node
            continue
        for m in _PATH_PART.finditer(stem):
            k = m.group("k").lower()
            v = small_int(m.group("v"))
            if v is None:
                continue
            if k == "node":
                node = str(v)
            elif not last:
                continue  # a folder's rank-like name (rank0/) is too loose a hint
            elif k in ("rank", "worker", "gpu"):
                vals.setdefault("tp", v)
            else:
                vals.setdefault(k, v)
    if not vals and node is None:
        return None
    if not vals:
        return None  # a node alone is a host, not a rank
    return RankId(node=node, dp=vals.get("dp"), pp=vals.get("pp"), tp=vals.get("tp"),
                  ep=vals.get("ep"))


# ---------------------------------------------------------------------------
# the prefilter's cheap rank key

# A rank key is a literal substring that every line of one rank's stream carries: SGLang's
# tags with the closing bracket (" DP0 TP3 EP3] "), vLLM's process prefix with its colour
# code ("(VllmWorker rank=3 pid=12) "), torch's "[rank3]:". The prefilter finds a rank's
# last line in a chunk with ``rfind(key)``.
KEY_RE = re.compile(
    r"\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(" + TAGS_RE_SRC + r"\] )"
    r"|(\((?:[A-Za-z][\w\-]{0,80}\s*)?(?:rank=[0-9]{1,9}\s*)?pid=[0-9]{1,9}"
    r"(?:,\s*ip=[\w.:\-]{1,80})?\)"
    r"(?:(?:\x1b|\^\[)?\[[0-9;]*m)? )"  # vLLM colours the prefix: the code is part of the key
    r"|(\[rank[0-9]{1,9}\]:)"
)
# The same keys for regex engines without look-around (polars / the Rust regex crate):
# one capture group, the key; SGLang's tags are not anchored at the time before them.
_TAG_PORTABLE = r"(?:[A-Z]{2,6}_)?[A-Z]{2,6}[0-9]{1,9}"
RANK_KEY_PORTABLE = (
    r"((?: " + _TAG_PORTABLE + r")+\] "
    r"|\((?:[A-Za-z][A-Za-z0-9_\-]{0,80}\s*)?(?:rank=[0-9]{1,9}\s*)?pid=[0-9]{1,9}"
    r"(?:,\s*ip=[A-Za-z0-9_.:\-]{1,80})?\)"
    r"|\[rank[0-9]{1,9}\]:)"
)
_KEY_HINT = re.compile(r":\d\d[.,\d]* [A-Z]|pid=|\[rank")


# (speed) rank_keys reads KEY_RE's three alternatives apart, each found from a literal: no
# match of one can overlap a match of another (a tag key holds no "(" and no "[", a process
# prefix no "[rank" and no "] ", torch's no "(" and no ":" but its last), so the keys are
# those of KEY_RE.findall (the tests compare them). SGLang's tags are found from the colon
# before the seconds, the hours and minutes before it checked after: the search from every
# digit of the text was the slow part (most of the prefilter's key search on a real log).
_KEY_TAIL_RE = re.compile(r":\d\d(?:[.,]\d{1,9})?(" + TAGS_RE_SRC + r"\] )")
_KEY_HEAD_RE = re.compile(r"\d\d:\d\d")
_KEY_PID_RE = re.compile(
    r"\((?:[A-Za-z][\w\-]{0,80}\s*)?(?:rank=[0-9]{1,9}\s*)?pid=[0-9]{1,9}"
    r"(?:,\s*ip=[\w.:\-]{1,80})?\)"
    r"(?:(?:\x1b|\^\[)?\[[0-9;]*m)? "
)
_KEY_RANK_RE = re.compile(r"\[rank[0-9]{1,9}\]:")


def rank_keys(text: str) -> set[str]:
    """Every rank key in a text (a chunk or many lines joined): those KEY_RE finds."""
    head = _KEY_HEAD_RE.fullmatch
    out = {m.group(1) for m in _KEY_TAIL_RE.finditer(text)
           if m.start() >= 5 and head(text, m.start() - 5, m.start())}
    if "pid=" in text:
        out.update(_KEY_PID_RE.findall(text))
    if "[rank" in text:
        out.update(_KEY_RANK_RE.findall(text))
    return out


def rank_key(line: str) -> str | None:
    """The rank key of one raw line (the first), or None. Cheap: a literal guard first."""
    if _KEY_HINT.search(line, 0, 400) is None:
        return None
    m = KEY_RE.search(line, 0, 600)
    if m is None:
        return None
    return m.group(1) or m.group(2) or m.group(3)


def key_coords(key: str) -> Coords | None:
    """The coordinates a rank key names (None for a prefix of no rank: APIServer)."""
    if key.endswith("] ") and not key.startswith("("):
        return parse_tags(key[:-2])
    if key.startswith("[rank"):
        m = match_torch_rank(key + " ")
        return None if m is None else Coords(tp=m[0], global_rank=True)
    p = match_proc_prefix(key)
    return None if p is None else p.coords
