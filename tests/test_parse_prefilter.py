"""The streaming prefilter: same timeline as the full parse, every line that matters kept."""

# ruff: noqa: E501  (real log lines are long)
from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path

import pytest

import diag.parse.reader
import diag.rules
from diag.analyze import _literals, analyze
from diag.errors import InputError
from diag.model import Analysis, Record
from diag.parse.pipeline import read_sources
from diag.parse.prefilter import BULK_ENTRIES, required_literals
from diag.parse.reader import resolve_inputs
from diag.phases import load_catalogue

ROOT = Path(__file__).resolve().parents[1]

INJECTED = """\
[2026-02-23 01:00:00 TP3] WARNING scheduler.py:1422: The request queue is long.
[2026-02-23 01:00:01 TP5] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2736, in run_scheduler_process
    scheduler.event_loop_overlap()
RuntimeError: CUDA error: an illegal memory access was encountered
gpu-node-0:4105:4105 [5] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 10.0.0.3<43369> failed
[2026-02-23 01:00:02] Pyspy dump for PID 4105 (py-spy dump --native --pid 4105):
Process 4105: sglang::scheduler_TP5
Thread 0x7F1B0C1FF640 (idle): "MainThread"
    recv (zmq/sugar/socket.py:812)
[2026-02-23 01:00:03 TP1] Acceleration for non-quantized schemes is not supported by Compressed Tensors. Falling back to UnquantizedLinearMethod
Loading safetensors checkpoint shards:  50% Completed | 2/4 [02:56<02:57, 88.81s/it]\rLoading safetensors checkpoint shards:  75% Completed | 3/4 [04:27<01:29, 89.93s/it]
Killed
"""


def _gen_log(path: Path, mib: int) -> None:
    spec = importlib.util.spec_from_file_location("gen_log", ROOT / "benchmarks" / "gen_log.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.generate(path, size_mib=mib, ranks=8, seed=1)


@pytest.fixture(scope="module")
def big_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    p = tmp_path_factory.mktemp("pf") / "server.log"
    _gen_log(p, 2)
    lines = p.read_text().rstrip("\n").split("\n")
    cut = len(lines) * 2 // 3
    lines[cut:cut] = INJECTED.rstrip("\n").split("\n")
    p.write_text("\n".join(lines))  # no final newline: the last line must still count
    return p


def _run(path: Path, prefilter: bool) -> tuple[Analysis, list[Record]]:
    seen: list[Record] = []
    real = diag.rules.apply_rules

    def spy(analysis: Analysis, records: Sequence[Record], **kw: object) -> Analysis:
        seen.extend(records)
        return real(analysis, records, **kw)  # type: ignore[arg-type]

    diag.rules.apply_rules = spy  # type: ignore[assignment]
    try:
        a = analyze([path], prefilter=prefilter)
    finally:
        diag.rules.apply_rules = real  # type: ignore[assignment]
    return a, seen


def _summary(a: Analysis) -> object:
    return (
        a.framework,
        {k: v for k, v in a.config.items() if k != "raw"},
        [
            (t.rank.label, t.last_phase, t.last_ts, t.silent_s,
             [(p.phase, p.start, p.end, p.ended) for p in t.phases])
            for t in a.ranks
        ],
        [(p.phase, p.start) for p in a.global_phases],
        a.log_end,
        a.last_phase,
        a.missing_ranks,
        a.stragglers,
    )


def _key(r: Record) -> tuple[int, str, tuple[str, ...]]:
    return (r.line, r.message, r.continuation)


@pytest.mark.parametrize("chunk", [256 << 10, 8 << 20])
def test_prefilter_matches_full_parse(
    big_log: Path, chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(diag.parse.reader, "CHUNK_BYTES", chunk)
    full, full_recs = _run(big_log, prefilter=False)
    fast, fast_recs = _run(big_log, prefilter=True)
    assert _summary(fast) == _summary(full)
    assert full.last_phase == "serving"
    assert [f.id for f in fast.findings] == [f.id for f in full.findings]
    fast_keys = {_key(r) for r in fast_recs}
    needles = [n for n in getattr(diag.rules, "needles", list)() if len(n) >= 3]
    must = [
        r for r in full_recs
        if r.level in ("WARNING", "ERROR", "CRITICAL")
        or r.grammar in ("traceback", "pyspy", "faulthandler", "progress")
        or r.continuation
        or r.message == "Killed"
        or any(n in r.text.lower() for n in needles)
    ]
    assert len(must) > 20
    missing = [r for r in must if _key(r) not in fast_keys]
    assert not missing, missing[:3]
    # the bulk really is skipped
    assert len(fast_recs) < len(full_recs) / 20
    lines = big_log.read_bytes().decode().count("\n") + 1
    assert fast.records == full.records == lines


def test_injected_lines_keep_their_line_numbers(big_log: Path) -> None:
    _, recs = _run(big_log, prefilter=True)
    text_lines = big_log.read_bytes().decode().split("\n")
    tb = next(r for r in recs if "Scheduler hit an exception" in r.message)
    assert text_lines[tb.line - 1].endswith("Traceback (most recent call last):")
    assert tb.continuation[-1].startswith("RuntimeError: CUDA error: an illegal memory access")
    bars = [r for r in recs if r.grammar == "progress" and "75% Completed | 3/4" in r.message]
    assert bars and "50% Completed" in text_lines[bars[0].line - 1]
    assert recs[-1].line == len(text_lines)


def _prefixed_traceback_log(frames: int) -> str:
    """A vLLM V1 engine core's start-up failure as multiprocessing prints it: every line
    under the child's '(EngineCore pid=7)' prefix, the frames indented after it."""
    p = "(EngineCore pid=7) "
    head = [f"{p}INFO 08-07 21:51:00 [gpu_model_runner.py:2100] Model loading took "
            "14.5 GiB and 20.1 seconds"]
    # an earlier server's serving tail in the same file: bulk lines, no candidates
    head += [f"INFO 08-07 21:{i // 60 % 60:02d}:{i % 60:02d} [loggers.py:122] Engine 000: Avg "
             f"prompt throughput: {i % 7}.0 tokens/s, Avg generation throughput: 70.2 "
             "tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.1%, Prefix "
             "cache hit rate: 0.0%" for i in range(3000)]
    tb = [f"{p}Process EngineCore_DP0:", f"{p}Traceback (most recent call last):"]
    for i in range(frames):
        tb += [f'{p}  File "/venv/lib/python3.12/site-packages/vllm/v1/worker/m{i}.py", '
               f"line {i + 10}, in step_{i}", f"{p}    return self.step_{i + 1}(batch)",
               f"{p}           ^^^^^^^^^^^^^^^^^^^^^^"]
    tb += [f'{p}  File "/venv/lib/python3.12/site-packages/vllm/v1/worker/gpu_worker.py", '
           "line 300, in determine_available_memory",
           f"{p}    self.model_runner.profile_run()",
           f"{p}torch.AcceleratorError: CUDA error: no kernel image is available",
           f"{p}ERROR 08-07 21:52:01 [core.py:1330] EngineCore failed to start."]
    # the API server's own traceback under its prefix, to the file's end
    a = "(APIServer pid=1) "
    api = [f"{a}Traceback (most recent call last):"]
    for i in range(frames):
        api += [f'{a}  File "/venv/lib/python3.12/site-packages/vllm/v1/engine/c{i}.py", '
                f"line {i + 5}, in launch_{i}", f"{a}    launch_{i + 1}(",
                f"{a}    ^^^^^^^^^^^^^^^^^^^^"]
    api += [f"{a}RuntimeError: Engine core initialization failed. See root cause above."]
    return "\n".join(head + tb + api) + "\n"


@pytest.mark.parametrize("chunk", [4 << 10, 8 << 20])
def test_traceback_under_a_process_prefix_keeps_its_frames(
    tmp_path: Path, chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the frames' indentation follows the prefix, so no frame is a candidate by its own
    # text: the traceback's body is handed over whole, across a chunk's end too
    monkeypatch.setattr(diag.parse.reader, "CHUNK_BYTES", chunk)
    log = tmp_path / "enginecore.log"
    log.write_text(_prefixed_traceback_log(60))
    full, full_recs = _run(log, prefilter=False)
    fast, fast_recs = _run(log, prefilter=True)
    tb = [_key(r) for r in full_recs if r.message.startswith("Traceback")]
    assert len(tb) == 2 and len(tb[0][2]) == 60 * 3 + 3
    assert [_key(r) for r in fast_recs if r.message.startswith("Traceback")] == tb
    assert _findings(fast) == _findings(full)
    assert _summary(fast) == _summary(full)


def test_every_catalogue_entry_has_required_literals() -> None:
    lits = _literals(())
    for e in load_catalogue().entries:
        if e.id in BULK_ENTRIES:
            continue
        req = required_literals(e.regex.pattern)
        assert req, e.id
        # each required literal is found by some candidate literal (case-insensitively)
        for lit in req:
            assert any(c.lower() in lit.lower() for c in lits), (e.id, lit)


@pytest.mark.parametrize(
    ("pattern", "want"),
    [
        (r"^Load weight begin", {"Load weight begin"}),
        (r"(?:Model loading took|Loading model weights took) (?P<gb>[\d.]+)",
         {"Model loading took", "Loading model weights took"}),
        (r"Capturing (?:CUDA graphs|cudagraphs)", {"Capturing CUDA graphs"}),
        (r"KV cache (?:memory|size) ", {"KV cache memory "}),
        (r"world_size=(?P<w>\d+) rank=(?P<r>\d+) local_rank=\d+", {" local_rank="}),
        (r"\d+", None),
        (r"a|bcd", None),
    ],
)
def test_required_literals(pattern: str, want: set[str] | None) -> None:
    got = required_literals(pattern)
    if want is None:
        assert got is None
    else:
        assert got is not None and any(w in got for w in want)


CUSTOM_RULE = """\
id: custom.zebra_stampede
title: Zebras in the machine room
severity: warning
role: root
frameworks: [sglang, vllm]
summary: A zebra stampede was logged.
why: Zebras trample cables.
remedy: Close the machine room door.
references: []
needles: ["zebra stampede"]
match:
  patterns:
    - 'zebra stampede on (?P<where>[a-z0-9]+)'
examples:
  match:
    - '[2026-02-22 22:35:21 TP0] zebra stampede on rack4'
  no_match:
    - '[2026-02-22 22:35:21 TP0] a quiet rack'
"""


def test_needles_of_extra_rules_make_candidates(big_log: Path, tmp_path: Path) -> None:
    rules_dir = tmp_path / "rules"
    rules_dir.mkdir()
    (rules_dir / "custom.zebra_stampede.yaml").write_text(CUSTOM_RULE)
    log = tmp_path / "zebra.log"
    lines = big_log.read_bytes().decode().split("\n")
    lines.insert(len(lines) // 2, "[2026-02-23 01:00:09 TP2] zebra stampede on rack4")
    log.write_text("\n".join(lines))
    plain = analyze([log], prefilter=True)
    assert "custom.zebra_stampede" not in {f.id for f in plain.findings}
    a = analyze([log], prefilter=True, rules_dirs=[rules_dir])
    hit = [f for f in a.findings if f.id == "custom.zebra_stampede"]
    assert hit and hit[0].evidence[0].line == len(lines) // 2 + 1


def test_crlf_log_is_not_all_candidates(big_log: Path, tmp_path: Path) -> None:
    crlf = tmp_path / "windows.log"
    crlf.write_bytes(big_log.read_bytes().replace(b"\n", b"\r\n"))
    full, full_recs = _run(big_log, prefilter=True)
    win, win_recs = _run(crlf, prefilter=True)
    assert _summary(win) == _summary(full)
    assert len(win_recs) == len(full_recs)


def test_coloured_vllm_worker_last_line_is_found_in_the_bulk(tmp_path: Path) -> None:
    bulk = "".join(
        f"\x1b[1;36m(APIServer pid=1)\x1b[0;0m INFO 01-01 00:{i // 600:02d}:{i // 10 % 60:02d} "
        f"[loggers.py:271] Engine 000: Avg prompt throughput: {i}.0 tokens/s\n"
        for i in range(12000)
    )
    worker = (
        "\x1b[1;36m(VllmWorker rank=0 pid=226)\x1b[0;0m INFO 01-01 00:00:00 "
        "[gpu_model_runner.py:1] Starting to load model m...\n"
    )
    quiet = (
        "\x1b[1;36m(VllmWorker rank=0 pid=226)\x1b[0;0m INFO 01-01 00:07:30 "
        "[gpu_worker.py:1] a plain line with nothing to catch\n"
    )
    half = len(bulk) // 2
    cut = bulk.index("\n", half) + 1
    log = tmp_path / "colour.log"
    log.write_text(worker + bulk[:cut] + quiet + bulk[cut:])
    assert log.stat().st_size > 1 << 20
    fast = analyze([log], prefilter=True, year=2026)
    full = analyze([log], prefilter=False, year=2026)
    (t,) = fast.ranks
    assert t.last_ts is not None and (t.last_ts.minute, t.last_ts.second) == (7, 30)
    assert _summary(fast) == _summary(full)


# ---------------------------------------------------------------------------
# "the prefilter equals the full line-by-line parse": every corpus case, every benchmark
# mix (small), and the serving figures


def _findings(a: Analysis) -> list[object]:
    return [
        (f.id, f.severity, f.message, f.ranks, [(e.source, e.line) for e in f.evidence],
         f.evidence_total)
        for f in a.findings
    ]


def _same(paths: Sequence[Path], *, years: bool = True) -> None:
    try:
        full = analyze(list(paths), prefilter=False)
    except InputError as exc:  # not a log: the prefilter says so too
        with pytest.raises(InputError) as fast_exc:
            analyze(list(paths), prefilter=True)
        assert str(fast_exc.value) == str(exc)
        return
    fast = analyze(list(paths), prefilter=True)
    if years:
        assert _summary(fast) == _summary(full)
        assert _findings(fast) == _findings(full)
    else:
        # year-less stamps whose year walk differs: the same lines say the same things
        assert [f[0] for f in _findings(fast)] == [f[0] for f in _findings(full)]
    assert fast.records == full.records
    lits = _literals(())
    figs = [
        read_sources(resolve_inputs(list(paths)), year=None, literals=lits, prefilter=pf)
        for pf in (False, True)
    ]
    assert figs[0].serving.as_dict() == figs[1].serving.as_dict()
    assert figs[0].repeats == figs[1].repeats


_CASES = sorted((ROOT / "fixtures" / "real").glob("*/*/log.txt"))


@pytest.mark.parametrize("log", _CASES, ids=[p.parent.name for p in _CASES])
def test_prefilter_equals_full_parse_on_corpus(log: Path) -> None:
    _same([log])


def _mixes() -> dict[str, object]:
    spec = importlib.util.spec_from_file_location("mixes", ROOT / "benchmarks" / "mixes.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.MIXES  # type: ignore[no-any-return]


_MIX_NAMES = sorted(_mixes())


@pytest.mark.parametrize("engine", ["native", "hyperscan"])
@pytest.mark.parametrize("name", _MIX_NAMES)
def test_prefilter_equals_full_parse_on_benchmark_mixes(
    name: str, engine: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the compiled scanner (when built) and on Hyperscan (what runs without it)."""
    from diag.parse import native

    if engine == "hyperscan":
        monkeypatch.setattr(native, "_LOADED", [None])
    elif native.load() is None:
        pytest.skip("no C compiler: the scanner is not built")
    # small chunks: several per file, as a 1 GiB input has
    monkeypatch.setattr(diag.parse.reader, "CHUNK_BYTES", 512 << 10)
    out = tmp_path / ("mix" if name == "folder8" else "mix.log")
    _mixes()[name][1](out, 3 << 20, 1)  # type: ignore[index]
    # "real" repeats unrelated logs: year-less stamps jump back months at every seam, and
    # the year walk (resolve_years) then depends on which lines are records
    _same([out], years=name != "real")


def test_a_folder_is_read_by_one_read_ahead_thread(
    big_log: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The files of a folder go through one read-ahead pipeline (started once), and each
    file's notes stay with it, in the order the files are read."""
    import threading

    started: list[str] = []
    real_start = threading.Thread.start

    def start(self: threading.Thread) -> None:
        started.append(self.name)
        real_start(self)

    monkeypatch.setattr(threading.Thread, "start", start)
    monkeypatch.setattr(diag.parse.reader, "CHUNK_BYTES", 256 << 10)
    folder = tmp_path / "ranks"
    folder.mkdir()
    data = big_log.read_bytes()
    for i in range(3):
        # each file starts with a NUL hole: the reader's note about it is that file's
        (folder / f"rank{i}.log").write_bytes(b"\0" * (i + 1) + data)
    lits = _literals(())
    col = read_sources(resolve_inputs([folder]), year=None, literals=lits, prefilter=True)
    assert started.count("diag-read-ahead") == 1
    holes = [n for n in col.notes if "leading NUL bytes" in n]
    assert [n.split(":")[0].rsplit("/", 1)[-1] for n in holes] == [
        "rank0.log", "rank1.log", "rank2.log"]
    assert [n.split(": ", 1)[1].split(" ")[0] for n in holes] == ["1", "2", "3"]
    # and before the notes made after each file was parsed
    first_parsed = min(i for i, n in enumerate(col.notes) if "repeating a kind" in n
                       or "matched no known" in n or "year" in n)
    assert col.notes.index(holes[0]) < first_parsed


def test_read_ahead_shortens_the_switch_interval_while_it_runs() -> None:
    import sys

    from diag.parse import pipeline

    before = sys.getswitchinterval()
    seen: list[float] = []

    def make(behind):  # type: ignore[no-untyped-def]
        for i in range(3):
            seen.append(sys.getswitchinterval())
            assert behind() in (True, False)
            yield i

    assert list(pipeline._ahead(make, 2)) == [0, 1, 2]
    assert seen and max(seen) <= pipeline._SWITCH_S
    assert sys.getswitchinterval() == before


def test_read_ahead_consumer_works_ahead_only_while_no_item_waits() -> None:
    """``idle`` runs on the consuming thread while the queue is empty, until it says it
    has nothing left; the items come through unchanged and in order."""
    import threading

    from diag.parse import pipeline

    gate = threading.Event()
    calls: list[int] = []

    def make(behind):  # type: ignore[no-untyped-def]
        gate.wait(5)  # the first item comes only once idle() has run out of work
        yield from range(3)

    def idle() -> bool:
        calls.append(len(calls))
        if len(calls) < 4:
            return True
        gate.set()
        return False

    assert list(pipeline._ahead(make, 2, idle=idle)) == [0, 1, 2]
    assert calls[:4] == [0, 1, 2, 3]


def test_warming_drafts_ahead_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the analyser works out while the parsing waits (the phase catalogue's answers
    per message, in its memo) gives the analysis it gives without it."""
    import diag.analyze

    out = tmp_path / "mix.log"
    _mixes()["warn5"][1](out, 2 << 20, 1)  # type: ignore[index]
    with_warm = analyze([out], prefilter=True)
    monkeypatch.setattr(diag.analyze, "_warm", lambda drafts: None)
    without = analyze([out], prefilter=True)
    assert _summary(with_warm) == _summary(without)
    assert _findings(with_warm) == _findings(without)


@pytest.mark.parametrize("name", ["real", "spam", "folder8", "warn5"])
def test_the_chunks_own_and_in_order_stages_give_one_result_whichever_thread_runs_them(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The read-ahead thread runs a chunk's own passes (kind hashes, byte counts) and its
    in-order stage (the repeat cap, the kept lines' text, the timeline's lines) only while
    the parsing is behind it; else the parsing thread runs them; and it leaves a chunk's
    matcher pass to the parsing thread when that one waits: every thread, none, or any
    mix of the two gives the same analysis."""
    import random

    from diag.parse import native, pipeline

    if native.load() is None:
        pytest.skip("no C compiler: the scanner is not built")
    monkeypatch.setattr(diag.parse.reader, "CHUNK_BYTES", 256 << 10)
    out = tmp_path / ("mix" if name == "folder8" else "mix.log")
    _mixes()[name][1](out, 3 << 20, 1)  # type: ignore[index]
    real_ahead = pipeline._ahead
    got = []
    for mode in ("never", "always", "random"):
        rng = random.Random(7)

        def behind(mode: str = mode, rng: random.Random = rng) -> bool:
            return mode == "always" or (mode == "random" and rng.random() < 0.5)

        # the parsing thread "waits" (its next chunk's matcher pass is left to it) in
        # the opposite cases
        monkeypatch.setattr(pipeline._Run, "hungry", property(
            lambda _run, b=behind: not b(), lambda _run, _value: None), raising=False)
        monkeypatch.setattr(pipeline, "_ahead",
                            lambda make, depth, idle=None, b=behind: real_ahead(
                                lambda _: make(b), depth, idle=idle))
        a = analyze([out], prefilter=True)
        col = read_sources(resolve_inputs([out]), year=None, literals=_literals(()),
                           prefilter=True)
        got.append((_summary(a), _findings(a), a.records, col.serving.as_dict(), col.repeats,
                    col.candidates, col.notes))
    assert got[0] == got[1] == got[2]
