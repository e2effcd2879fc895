"""How much of what sglang / vllm print on their startup path the analyser recognises.

The table (fixtures/messages/messages.tsv, made by tools/extract_messages.py from the
released wheels, see fixtures/messages/README.md) lists every logging call and raised
exception message of those releases. Each startup-path message of the LATEST release of each
framework is rendered to a sample line (holes -> plausible values) and checked against the
phase catalogue (diag/data/phases.yaml) and the specific pattern rules (rules/*.yaml; the
catch-all patterns, which match any ``XError: ...`` line, do not count).

The floors are a ratchet: they are the measured coverage; raise them when coverage grows,
never lower them to make a change pass.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import pytest

from diag.phases import PhaseEntry, load_catalogue
from diag.rules.loader import Rule, builtin_rules

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "fixtures" / "messages" / "messages.tsv"
# hand-written: torch's C++ c10d messages (not in Python), each row citing its source file
CPP_TABLE = ROOT / "fixtures" / "messages" / "cpp_messages.tsv"

# The startup path of the latest releases: from the CLI / API server through engine core,
# executor, worker, model runner, weight loading, KV-cache sizing, compilation and CUDA-graph
# capture to the listening server. A path ending in "/" is a package (every module in it).
STARTUP_MODULES: dict[str, tuple[str, ...]] = {
    "vllm": (
        "vllm/entrypoints/openai/api_server.py",
        "vllm/entrypoints/cli/serve.py",
        "vllm/entrypoints/cli/main.py",
        "vllm/entrypoints/utils.py",
        "vllm/entrypoints/launcher.py",
        "vllm/entrypoints/launchers/",
        "vllm/engine/arg_utils.py",
        "vllm/config/",
        "vllm/config.py",
        "vllm/platforms/__init__.py",
        "vllm/platforms/cuda.py",
        "vllm/platforms/interface.py",
        "vllm/v1/engine/core.py",
        "vllm/v1/engine/core_client.py",
        "vllm/v1/engine/utils.py",
        "vllm/v1/engine/async_llm.py",
        "vllm/v1/engine/coordinator.py",
        "vllm/v1/executor/",
        "vllm/v1/worker/gpu_worker.py",
        "vllm/v1/worker/gpu_model_runner.py",
        "vllm/v1/worker/worker_base.py",
        "vllm/v1/worker/gpu/model_runner.py",
        "vllm/v1/worker/gpu/cudagraph_utils.py",
        "vllm/v1/worker/gpu/warmup.py",
        "vllm/v1/core/kv_cache_utils.py",
        "vllm/distributed/parallel_state.py",
        "vllm/distributed/utils.py",
        "vllm/distributed/device_communicators/pynccl.py",
        "vllm/distributed/device_communicators/pynccl_wrapper.py",
        "vllm/distributed/device_communicators/custom_all_reduce.py",
        "vllm/distributed/device_communicators/shm_broadcast.py",
        "vllm/model_executor/model_loader/default_loader.py",
        "vllm/model_executor/model_loader/base_loader.py",
        "vllm/model_executor/model_loader/weight_utils.py",
        "vllm/model_executor/model_loader/utils.py",
        "vllm/model_executor/models/registry.py",
        "vllm/model_executor/warmup/kernel_warmup.py",
        "vllm/model_executor/warmup/deep_gemm_warmup.py",
        "vllm/model_executor/warmup/jit_warmup.py",
        "vllm/compilation/backends.py",
        "vllm/compilation/monitor.py",
        "vllm/compilation/decorators.py",
        "vllm/compilation/wrapper.py",
        "vllm/compilation/cuda_graph.py",
        "vllm/compilation/compiler_interface.py",
        "vllm/compilation/piecewise_backend.py",
        "vllm/v1/attention/selector.py",
        "vllm/attention/selector.py",
    ),
    "sglang": (
        "sglang/launch_server.py",
        "sglang/srt/entrypoints/engine.py",
        "sglang/srt/entrypoints/http_server.py",
        "sglang/srt/entrypoints/warmup.py",
        "sglang/srt/server_args.py",
        "sglang/srt/managers/scheduler.py",
        "sglang/srt/managers/tp_worker.py",
        "sglang/srt/managers/tokenizer_manager.py",
        "sglang/srt/managers/data_parallel_controller.py",
        "sglang/srt/managers/detokenizer_manager.py",
        "sglang/srt/model_executor/model_runner.py",
        "sglang/srt/model_executor/model_runner_components/",
        "sglang/srt/model_executor/runner/",
        "sglang/srt/model_executor/cuda_graph_runner.py",
        "sglang/srt/model_executor/piecewise_cuda_graph_runner.py",
        "sglang/srt/model_loader/loader.py",
        "sglang/srt/model_loader/weight_utils.py",
        "sglang/srt/mem_cache/memory_pool.py",
        "sglang/srt/mem_cache/kv_cache_configurator.py",
        "sglang/srt/distributed/parallel_state.py",
        "sglang/srt/distributed/bootstrap.py",
        "sglang/srt/layers/attention/attention_registry.py",
    ),
}

# Measured coverage (per cent) of the latest releases' startup-path messages, by kind:
# "info" = phase markers and progress (info lines, tqdm bars), "warn_error" =
# warning/error/exception/critical, "raise" = raised exceptions (a traceback's last line).
# A ratchet: raise the floors as coverage grows, never lower them.
FLOORS: dict[tuple[str, str], float] = {
    ("vllm", "info"): 33.9,  # 97/286 (was 34/272 = 12.5% before the catalogue additions)
    ("vllm", "warn_error"): 5.8,  # 14/239
    ("vllm", "raise"): 1.6,  # 14/830
    # 87/214 (was 21/214 = 9.8%); 91 counted four attention_registry.py lines as vLLM's
    # registry.py, a false match the catalogue dropped in 6feb3b7
    ("sglang", "info"): 40.6,
    ("sglang", "warn_error"): 5.6,  # 9/158
    ("sglang", "raise"): 1.3,  # 6/453
}

# Catalogue entries whose `source` names a file of the table but whose regex matches none of
# that file's messages, with the reason (the check below fails when one is no longer needed).
_FRAMES = "matches traceback frames (function names in `where: text`), not a message"
_METHOD = (
    "the method name is the hole of 'Error executing method %s' / 'while processing method %s'"
)
KNOWN_SOURCE_EXCEPTIONS: dict[str, str] = {
    "any.dist_traceback": _FRAMES,
    "any.serving_traceback": _FRAMES,
    "vllm.init_device_failed": _METHOD,
    "vllm.worker_method_kv": _METHOD,
    "vllm.worker_method_serving": _METHOD,
    "vllm.worker_method_startup": _METHOD,
}

_HOLE = re.compile(r"\{\{|\}\}|\{\}")
_LEVEL = {
    "info": "INFO",
    "warning": "WARNING",
    "error": "ERROR",
    "exception": "ERROR",
    "critical": "CRITICAL",
}


@dataclass(frozen=True, slots=True)
class Message:
    framework: str
    level: str
    file: str
    line: int
    function: str
    holes: str
    versions: tuple[str, ...]
    template: str

    @property
    def kind(self) -> str:
        if self.level.startswith("raise:"):
            return "raise"
        return "info" if self.level in ("info", "tqdm") else "warn_error"

    def where(self) -> str:
        return f"{self.file}:{self.line} ({self.function}) [{self.level}]"


def _unescape(cell: str) -> str:
    return re.sub(
        r"\\([\\tnr])", lambda m: {"\\": "\\", "t": "\t", "n": "\n", "r": "\r"}[m.group(1)], cell
    )


def version_key(v: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", v))


@lru_cache(maxsize=2)
def load_table(path: Path = TABLE) -> tuple[Message, ...]:
    lines = path.read_text(encoding="utf-8").splitlines()
    header = lines[0].split("\t")
    assert header == [
        "framework",
        "level",
        "file",
        "line",
        "function",
        "holes",
        "versions",
        "template",
    ], header
    out = []
    for raw in lines[1:]:
        c = [_unescape(x) for x in raw.split("\t")]
        out.append(Message(c[0], c[1], c[2], int(c[3]), c[4], c[5], tuple(c[6].split(",")), c[7]))
    return tuple(out)


def latest(framework: str) -> str:
    vers = {v for m in load_table() if m.framework == framework for v in m.versions}
    return max(vers, key=version_key)


def on_startup_path(path: str, framework: str) -> bool:
    return any(
        path == p or (p.endswith("/") and path.startswith(p)) for p in STARTUP_MODULES[framework]
    )


def samples(m: Message) -> Iterator[str]:
    """Sample lines for a template: holes filled by their hints (unknown ones by a word, a
    number, a dict repr), then every hole a number, then every hole a word."""
    values = {
        "i": "8",
        "f": "12.50",
        "s": "value",
        "d": "{'key': 1}",
        "t": "600000ms",
        "?": "value",
    }
    fills = [
        [values[h] for h in m.holes],
        [("8" if h == "?" else values[h]) for h in m.holes],
        [(values["d"] if h == "?" else values[h]) for h in m.holes],
        ["8"] * len(m.holes),
        ["value"] * len(m.holes),
    ]
    for fill in fills:
        it = iter(fill)

        def sub(mt: re.Match[str], it: Iterator[str] = it) -> str:
            tok = mt.group(0)
            if tok == "{{":
                return "{"
            if tok == "}}":
                return "}"
            return next(it, "value")

        text = _HOLE.sub(sub, m.template)
        if m.level.startswith("raise:"):
            yield f"{m.level.split(':', 1)[1]}: {text}"
        elif m.level == "tqdm":  # vLLM's bar_format, then tqdm's default
            yield f"{text}:  50% Completed | 1/2 [00:01<00:01,  1.00it/s]"
            yield f"{text}:  50%|#####     | 1/2 [00:01<00:01,  1.00it/s]"
        else:
            yield text


def _raw_line(m: Message, text: str) -> str:
    lvl = _LEVEL.get(m.level, "ERROR")
    return f"{lvl} 01-01 00:00:00 [{m.file.rsplit('/', 1)[-1]}:{m.line}] {text}"


_PROBES = (
    "ValueError: lorem ipsum dolor",
    "RuntimeError: lorem ipsum dolor",
    "AssertionError: lorem ipsum dolor",
    "ERROR 01-01 00:00:00 [x.py:1] KeyError: lorem",
    "lorem ipsum dolor sit amet",
)


@lru_cache(maxsize=1)
def specific_rules() -> tuple[tuple[Rule, tuple[Any, ...]], ...]:
    """Pattern rules with their specific patterns: a catch-all pattern (one that matches a
    made-up exception line, as python.exception's `XError: ...` does) does not count."""
    out = []
    for r in builtin_rules():
        if r.match is None:
            continue
        keep = tuple(p for p in r.match.patterns if not any(p.search(x) for x in _PROBES))
        if keep:
            out.append((r, keep))
    return tuple(out)


def _rule_hits(rule: Rule, patterns: tuple[Any, ...], line: str) -> bool:
    """What the engine tests on one line (needles, then patterns, then excludes), with
    only the given patterns."""
    assert rule.match is not None
    low = line.lower()
    if not any(n in low for n in rule.needles):
        return False
    if not any(p.search(line, timeout=1.0) for p in patterns):
        return False
    return not any(ex.search(line, timeout=1.0) for ex in rule.match.exclude)


def entry_matches(e: PhaseEntry, m: Message) -> bool:
    raised = m.level.startswith("raise:")  # a traceback's last line: no logger prefix
    for text in samples(m):
        hay = _raw_line(m, text) if e.where == "raw" and not raised else text
        if e.regex.search(hay):
            return True
    return False


def covered_by(m: Message) -> str | None:
    """The id of a catalogue entry or rule that recognises the message, else None."""
    cat = load_catalogue()
    texts = list(samples(m))
    hays = texts + [_raw_line(m, t) for t in texts]
    if any(cat.any_message.search(h) for h in hays) or (
        cat.any_text is not None and any(cat.any_text.search(h) for h in hays)
    ):  # the catalogue's own quick test first, then entry by entry
        for e in cat.entries:  # as diag.phases.match_record: any framework
            if entry_matches(e, m):
                return e.id
    lvl = _LEVEL.get(m.level, "ERROR")
    for r, patterns in specific_rules():
        if not r.applies_to(m.framework):
            continue
        assert r.match is not None
        if r.match.levels and lvl not in r.match.levels:
            continue
        if any(_rule_hits(r, patterns, text) for text in samples(m)):
            return r.id
    return None


def startup_messages(framework: str) -> list[Message]:
    ver = latest(framework)
    return [
        m
        for m in load_table()
        if m.framework == framework
        and ver in m.versions
        and m.level != "debug"
        and on_startup_path(m.file, framework)
    ]


def coverage(framework: str) -> dict[str, tuple[int, int, list[Message]]]:
    """kind -> (covered, total, uncovered messages)."""
    out: dict[str, tuple[int, int, list[Message]]] = {}
    for kind in ("info", "warn_error", "raise"):
        msgs = [m for m in startup_messages(framework) if m.kind == kind]
        missed = [m for m in msgs if covered_by(m) is None]
        out[kind] = (len(msgs) - len(missed), len(msgs), missed)
    return out


def test_table_is_present_and_sane() -> None:
    table = load_table()
    assert len(table) > 10_000
    frameworks = {m.framework for m in table}
    assert {"vllm", "sglang", "torch"} <= frameworks
    for fw in ("vllm", "sglang"):
        assert len({v for m in table if m.framework == fw for v in m.versions}) >= 4, fw
    # the extractor turns holes into {} and leaves no raw f-string / %-format residue
    lbw = [
        m
        for m in table
        if m.file.endswith("model_runner.py")
        and m.framework == "sglang"
        and m.template.startswith("Load weight begin")
    ]
    assert lbw and all("{}" in m.template for m in lbw), lbw
    assert all(
        len(m.holes) == len(_HOLE.findall(m.template.replace("{{", "").replace("}}", "")))
        for m in table[:5000]
    )


def test_startup_modules_exist_in_latest_release() -> None:
    """Each listed module path names files of the latest release (or of an older one: the
    list also covers files that moved); a typo would silently shrink the measure."""
    files = {m.file for m in load_table()}
    for fw, paths in STARTUP_MODULES.items():
        for p in paths:
            assert any(f == p or (p.endswith("/") and f.startswith(p)) for f in files), (fw, p)


@pytest.mark.parametrize("framework", ["vllm", "sglang"])
def test_startup_message_coverage(framework: str) -> None:
    cov = coverage(framework)
    report = []
    failed = []
    for kind, (done, total, missed) in cov.items():
        pct = 100.0 * done / total if total else 100.0
        floor = FLOORS[(framework, kind)]
        report.append(
            f"{framework} {latest(framework)} {kind}: {done}/{total} = {pct:.1f}% "
            f"(floor {floor:.1f}%)"
        )
        if pct + 1e-9 < floor:
            failed.append(kind)
            report.append(f"  uncovered {kind} ({len(missed)}):")
            report.extend(f"    {m.where()}: {m.template[:160]}" for m in missed[:400])
    print("\n".join(report))
    assert not failed, "\n".join(report)


def _cited_files(source: str) -> list[str]:
    return [
        m.group(1) for m in re.finditer(r"(?:python/)?\b((?:sglang|vllm|torch)/[\w/]+\.py)", source)
    ]


def source_inconsistencies() -> dict[str, str]:
    """Catalogue entries whose cited file is in the table but whose regex matches none of its
    messages (in any extracted release), or not in the release the entry names."""
    table = load_table()
    by_file: dict[str, list[Message]] = {}
    for m in table:
        by_file.setdefault(m.file, []).append(m)
    releases = {
        fw: {v for m in table if m.framework == fw for v in m.versions} for fw in ("vllm", "sglang")
    }
    out: dict[str, str] = {}
    for e in load_catalogue().entries:
        files = [f for f in _cited_files(e.source) if f in by_file]
        if not files:
            continue
        hits = [m for f in files for m in by_file[f] if entry_matches(e, m)]
        if not hits:
            out[e.id] = f"no message of {files} matches {e.regex.pattern!r}"
            continue
        if e.framework in releases:
            claimed = set(re.findall(r"(?<![\w.])(\d+\.\d+\.\d+)(?![\w.])", e.version))
            seen = {v for m in hits for v in m.versions}
            wrong = sorted((claimed & releases[e.framework]) - seen, key=version_key)
            if wrong:
                out[e.id] = (
                    f"claims {wrong} but the match is only in {sorted(seen, key=version_key)}"
                )
    return out


def test_catalogue_sources_agree_with_the_table() -> None:
    found = source_inconsistencies()
    report = "\n".join(f"  {k}: {v}" for k, v in sorted(found.items()))
    unexpected = set(found) - set(KNOWN_SOURCE_EXCEPTIONS)
    ids = {e.id for e in load_catalogue().entries}
    stale = {k for k in KNOWN_SOURCE_EXCEPTIONS if k in ids and k not in found}
    assert not unexpected, "catalogue source/version claims the table contradicts:\n" + report
    assert not stale, f"known exceptions that are no longer needed: {sorted(stale)}"


# Table rows that message-scoped catalogue entries of two phases both match, with the reason
# the first-matching entry's phase is right (the check fails when one is no longer needed).
KNOWN_TWO_PHASE_ROWS: dict[str, str] = {}


def two_phase_rows(entries: tuple[PhaseEntry, ...] | None = None) -> dict[str, set[str]]:
    """'file: template' -> the phases of the message-scoped entries matching it, for rows of
    sglang / vllm (any release, any level but debug) that more than one phase matches."""
    cat = load_catalogue()
    todo = [e for e in (entries or cat.entries) if e.where == "message"]
    out: dict[str, set[str]] = {}
    for m in load_table():
        if m.framework not in ("vllm", "sglang") or m.level == "debug":
            continue
        texts = list(samples(m))
        if not any(cat.any_message.search(t) for t in texts):
            continue
        phases = {e.phase for e in todo if any(e.regex.search(t) for t in texts)}
        if len(phases) > 1:
            out[f"{m.file}: {m.template[:120]}"] = phases
    return out


def test_no_message_marks_two_phases() -> None:
    found = two_phase_rows()
    report = "\n".join(f"  {k} -> {sorted(v)}" for k, v in sorted(found.items()))
    unexpected = set(found) - set(KNOWN_TWO_PHASE_ROWS)
    stale = set(KNOWN_TWO_PHASE_ROWS) - set(found)
    assert not unexpected, "messages that entries of two phases match:\n" + report
    assert not stale, f"known two-phase rows that no longer are: {sorted(stale)}"


# Measured (a ratchet): rendered C++ c10d messages (socket.cpp, ProcessGroupNCCL.cpp) of
# level warning/error/raise that a catalogue entry or a specific rule recognises.
CPP_FLOOR = 35.0  # 7/20


def test_cpp_c10d_message_coverage() -> None:
    msgs = [m for m in load_table(CPP_TABLE) if m.level not in ("info", "debug")]
    assert len(msgs) >= 15
    assert all(m.file.startswith("torch/csrc/distributed/c10d/") for m in msgs)
    missed = [m for m in msgs if covered_by(m) is None]
    pct = 100.0 * (len(msgs) - len(missed)) / len(msgs)
    report = f"c10d C++ messages: {len(msgs) - len(missed)}/{len(msgs)} = {pct:.1f}%\n" + "\n".join(
        f"  {m.where()}: {m.template[:160]}" for m in missed
    )
    print(report)
    assert pct + 1e-9 >= CPP_FLOOR, report
