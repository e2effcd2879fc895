"""`diag diff A B`: what differs between two runs (logs or bundles).

Four comparisons, each a small pure function over two :class:`~diag.model.Combined`
views: the config (args that differ, framework and version), phase durations side by
side (median over the ranks, with the ratio B / A), findings only in one run, and ranks
that behave differently (another last phase, a silence of another order, another wait
site or state in the live snapshot). Renderers: :func:`render_diff_terminal`,
:func:`diff_to_dict` (``--json``) and :func:`render_diff_markdown`.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from diag.model import Combined, phase_index
from diag.redact import Redactor
from diag.report.common import collapse_ranks, fmt_duration, phase_stats, weights_progress
from diag.report.sanitize import Sanitized, visible

__all__ = [
    "ConfigChange",
    "PhaseChange",
    "RankChange",
    "SHARD_ROW",
    "RunDiff",
    "diff_runs",
    "diff_to_dict",
    "render_diff_markdown",
    "render_diff_terminal",
]

_MISSING = "(absent)"
SHARD_ROW = "weights_load per shard"
_SKIP_KEYS = frozenset({"sources"})


@dataclass(frozen=True, slots=True)
class ConfigChange:
    key: str
    a: str
    b: str


@dataclass(frozen=True, slots=True)
class PhaseChange:
    phase: str
    a_s: float | None  # median duration over the ranks (None: not seen / not timed)
    b_s: float | None

    @property
    def ratio(self) -> float | None:
        if self.a_s is None or self.b_s is None or self.a_s <= 0:
            return None
        return self.b_s / self.a_s


@dataclass(frozen=True, slots=True)
class RankChange:
    rank: str
    what: str  # "last phase", "silence", "wait site", "state", "only in A" ...
    a: str
    b: str


@dataclass(frozen=True, slots=True)
class RunDiff:
    a_name: str
    b_name: str
    framework: tuple[str, str]
    version: tuple[str, str]
    last_phase: tuple[str, str]
    config: tuple[ConfigChange, ...]
    phases: tuple[PhaseChange, ...]
    only_a: tuple[str, ...]  # finding ids
    only_b: tuple[str, ...]
    both: tuple[str, ...]
    ranks: tuple[RankChange, ...]


def _text(value: object, limit: int = 160) -> str:
    if isinstance(value, (dict, list, tuple)):
        s = json.dumps(value, default=str, sort_keys=True)
    else:
        s = str(value)
    return s if len(s) <= limit else s[: limit - 1] + "…"


def _config(
    a: Mapping[str, object],
    b: Mapping[str, object],
    prefix: str = "",
    shown: frozenset[str] = frozenset(),
) -> list[ConfigChange]:
    """The settings that differ, compared whole (shown cut to 160 characters); a setting
    that is a mapping on both sides (SGLang's whole args line) is compared key by key,
    leaving out the keys already compared on their own (``shown``)."""
    out = []
    for key in sorted(set(a) | set(b)):
        if key in _SKIP_KEYS or key in shown:
            continue
        ra, rb = a.get(key, _MISSING), b.get(key, _MISSING)
        if isinstance(ra, Mapping) and isinstance(rb, Mapping):
            out.extend(_config(ra, rb, f"{prefix}{key}.", frozenset(a) | frozenset(b)))
            continue
        if ra != rb:
            va = _text(ra) if key in a else _MISSING
            vb = _text(rb) if key in b else _MISSING
            out.append(ConfigChange(f"{prefix}{key}", va, vb))
    return out


def _durations(v: Combined) -> dict[str, float | None]:
    return {s.phase: s.median_s for s in phase_stats(v.analysis)}


def _shard_rate(v: Combined) -> float | None:
    """Median seconds per weight shard over the ranks (progress bars), if any."""
    rates = [s.rate_s_per_it for _, s in weights_progress(v.analysis) if s.rate_s_per_it]
    return statistics.median(rates) if rates else None


def _phases(a: Combined, b: Combined) -> list[PhaseChange]:
    da, db = _durations(a), _durations(b)
    keys = sorted(set(da) | set(db), key=lambda p: (phase_index(p) < 0, phase_index(p), p))
    out = [PhaseChange(p, da.get(p), db.get(p)) for p in keys]
    ra, rb = _shard_rate(a), _shard_rate(b)
    if ra is not None or rb is not None:  # a load cut mid-way still has its pace
        out.append(PhaseChange(SHARD_ROW, ra, rb))
    return out


def _rank_facts(v: Combined) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for r in v.analysis.ranks:
        out.setdefault(r.rank.label, {})["last phase"] = r.last_phase or "-"
        if r.silent_s is not None:
            out[r.rank.label]["silence"] = fmt_duration(r.silent_s)
            out[r.rank.label]["_silent_s"] = str(r.silent_s)
    for live in v.live:
        if live.role in ("scheduler", "worker", "engine_core"):
            facts = out.setdefault(live.label, {})
            facts["wait site"] = live.wait_site or "-"
            facts["state"] = live.state or "?"
    return out


def _silence_differs(a: str | None, b: str | None) -> bool:
    """A silence of another order: over a minute apart and over twice the other."""
    if a is None or b is None:
        return False
    x, y = float(a), float(b)
    lo, hi = min(x, y), max(x, y)
    return hi - lo >= 60 and hi >= 2 * lo


def _ranks(a: Combined, b: Combined) -> list[RankChange]:
    fa, fb = _rank_facts(a), _rank_facts(b)
    out: list[RankChange] = []
    labels = sorted(set(fa) | set(fb), key=lambda s: (len(s), s))
    only_a = [label for label in labels if label not in fb]
    only_b = [label for label in labels if label not in fa]
    if only_a:
        out.append(RankChange(collapse_ranks(only_a, [], limit=6), "only in A", "logged", "-"))
    if only_b:
        out.append(RankChange(collapse_ranks(only_b, [], limit=6), "only in B", "-", "logged"))
    for label in labels:
        if label not in fa or label not in fb:
            continue
        x, y = fa[label], fb[label]
        out.extend(
            RankChange(label, what, x[what], y[what])
            for what in ("last phase", "wait site", "state")
            if what in x and what in y and x[what] != y[what]
        )
        if _silence_differs(x.get("_silent_s"), y.get("_silent_s")):
            out.append(RankChange(label, "silence", x["silence"], y["silence"]))
    return out


def diff_runs(a: Combined, b: Combined, *, a_name: str = "A", b_name: str = "B") -> RunDiff:
    """Everything that differs between run A and run B."""
    ids_a = list(dict.fromkeys(f.id for f in a.analysis.findings))
    ids_b = list(dict.fromkeys(f.id for f in b.analysis.findings))
    return RunDiff(
        a_name=a_name,
        b_name=b_name,
        framework=(a.analysis.framework, b.analysis.framework),
        version=(a.analysis.version or "?", b.analysis.version or "?"),
        last_phase=(a.analysis.last_phase or "-", b.analysis.last_phase or "-"),
        config=tuple(_config(a.analysis.config, b.analysis.config)),
        phases=tuple(_phases(a, b)),
        only_a=tuple(i for i in ids_a if i not in ids_b),
        only_b=tuple(i for i in ids_b if i not in ids_a),
        both=tuple(i for i in ids_a if i in ids_b),
        ranks=tuple(_ranks(a, b)),
    )


# ---------------------------------------------------------------------------
# renderings


def _ratio(p: PhaseChange) -> str:
    r = p.ratio
    if r is None:
        return "-"
    return f"{r:.1f}x" if r < 100 else f"{r:.0f}x"


def _dur(s: float | None) -> str:
    return fmt_duration(s) if s is not None else "-"


def diff_to_dict(d: RunDiff) -> dict[str, Any]:
    """The JSON of a diff (``diag diff --json``, schema_version 1), secrets redacted."""
    out = {
        "schema_version": 1,
        "a": d.a_name,
        "b": d.b_name,
        "framework": list(d.framework),
        "version": list(d.version),
        "last_phase": list(d.last_phase),
        "config": [{"key": c.key, "a": c.a, "b": c.b} for c in d.config],
        "phases": [
            {"phase": p.phase, "a_s": p.a_s, "b_s": p.b_s, "ratio": p.ratio} for p in d.phases
        ],
        "findings": {"only_a": list(d.only_a), "only_b": list(d.only_b), "both": list(d.both)},
        "ranks": [{"rank": r.rank, "what": r.what, "a": r.a, "b": r.b} for r in d.ranks],
    }
    redacted = Redactor().value(out)
    assert isinstance(redacted, dict)
    return redacted


def _redacted(d: RunDiff) -> RunDiff:
    r = Redactor()
    return RunDiff(
        a_name=r.text(d.a_name),
        b_name=r.text(d.b_name),
        framework=d.framework,
        version=d.version,
        last_phase=d.last_phase,
        config=tuple(
            ConfigChange(c.key, str(r.value(c.a, key=c.key)), str(r.value(c.b, key=c.key)))
            for c in d.config
        ),
        phases=d.phases,
        only_a=d.only_a,
        only_b=d.only_b,
        both=d.both,
        ranks=d.ranks,
    )


def render_diff_terminal(d: RunDiff, *, max_config: int = 30) -> RenderableType:
    d = _redacted(d)
    parts: list[RenderableType] = []
    head = Text("diag diff", style="bold underline")
    parts.append(head)
    parts.append(Text(f"A  {d.a_name}\nB  {d.b_name}", style="dim"))
    top = Table(box=None, header_style="bold", pad_edge=False, padding=(0, 2, 0, 0))
    for col in ("", "A", "B"):
        top.add_column(col, no_wrap=True)
    top.add_row("framework", f"{d.framework[0]} {d.version[0]}", f"{d.framework[1]} {d.version[1]}")
    top.add_row("reached", d.last_phase[0], d.last_phase[1])
    parts += [Text(""), top]
    timed = [p for p in d.phases if p.a_s is not None or p.b_s is not None]
    if timed:
        t = Table(box=None, header_style="bold", pad_edge=False, padding=(0, 2, 0, 0))
        for col in ("phase", "A", "B", "B/A"):
            t.add_column(col, no_wrap=True, justify="left" if col == "phase" else "right")
        for p in timed:
            ratio = p.ratio
            style = "bold red" if ratio is not None and (ratio >= 3 or ratio <= 1 / 3) else ""
            t.add_row(p.phase, _dur(p.a_s), _dur(p.b_s), Text(_ratio(p), style=style))
        parts += [Text(""), Text("Phase durations (median over the ranks)", style="bold"), t]
    parts.append(Text(""))
    if d.only_a or d.only_b:
        parts.append(Text("Findings", style="bold"))
        if d.only_a:
            parts.append(Text(f"  only in A: {', '.join(d.only_a)}"))
        if d.only_b:
            parts.append(Text(f"  only in B: {', '.join(d.only_b)}"))
        if d.both:
            parts.append(Text(f"  in both:   {', '.join(d.both)}", style="dim"))
    else:
        parts.append(Text("Findings: the same in both" if d.both else "Findings: none in either"))
    if d.ranks:
        parts += [Text(""), Text("Ranks that behave differently", style="bold")]
        t = Table(box=None, header_style="bold", pad_edge=False, padding=(0, 2, 0, 0))
        for col in ("rank", "what", "A", "B"):
            t.add_column(col, no_wrap=True, overflow="ellipsis")
        for r in d.ranks[:32]:
            t.add_row(r.rank, r.what, r.a, r.b)
        parts.append(t)
        if len(d.ranks) > 32:
            parts.append(Text(f"… {len(d.ranks) - 32} more (--json)", style="dim"))
    if d.config:
        parts += [Text(""), Text(f"Config differences ({len(d.config)})", style="bold")]
        t = Table(box=None, header_style="bold", pad_edge=False, padding=(0, 2, 0, 0))
        t.add_column("key", no_wrap=True)
        t.add_column("A", overflow="fold", ratio=1)
        t.add_column("B", overflow="fold", ratio=1)
        for c in d.config[:max_config]:
            t.add_row(c.key, c.a, c.b)
        parts.append(t)
        if len(d.config) > max_config:
            parts.append(Text(f"… {len(d.config) - max_config} more (--json)", style="dim"))
    else:
        parts += [Text(""), Text("Config: no differences on the args lines", style="dim")]
    return Sanitized(Group(*parts))


def _md(text: str) -> str:
    return visible(text).replace("|", "\\|").replace("\n", " ")


def render_diff_markdown(d: RunDiff) -> str:
    d = _redacted(d)
    out = [
        f"## diag diff: {d.framework[0]} {d.version[0]} vs {d.framework[1]} {d.version[1]}",
        "",
        f"A: `{_md(d.a_name)}` · B: `{_md(d.b_name)}`",
        "",
        f"Reached: A `{d.last_phase[0]}`, B `{d.last_phase[1]}`",
        "",
    ]
    timed = [p for p in d.phases if p.a_s is not None or p.b_s is not None]
    if timed:
        out += ["| phase | A | B | B/A |", "| --- | ---: | ---: | ---: |"]
        out += [f"| `{p.phase}` | {_dur(p.a_s)} | {_dur(p.b_s)} | {_ratio(p)} |" for p in timed]
        out.append("")
    out += ["### Findings", ""]
    out.append(f"- only in A: {', '.join(f'`{i}`' for i in d.only_a) or 'none'}")
    out.append(f"- only in B: {', '.join(f'`{i}`' for i in d.only_b) or 'none'}")
    out.append(f"- in both: {', '.join(f'`{i}`' for i in d.both) or 'none'}")
    out.append("")
    if d.ranks:
        out += ["### Ranks that behave differently", "", "| rank | what | A | B |"]
        out += ["| --- | --- | --- | --- |"]
        out += [f"| {_md(r.rank)} | {r.what} | {_md(r.a)} | {_md(r.b)} |" for r in d.ranks[:64]]
        out.append("")
    if d.config:
        out += [
            "<details>",
            f"<summary>Config differences ({len(d.config)})</summary>",
            "",
            "| key | A | B |",
            "| --- | --- | --- |",
        ]
        out += [f"| `{_md(c.key)}` | {_md(c.a)} | {_md(c.b)} |" for c in d.config[:200]]
        out += ["", "</details>", ""]
    out.append("_Generated by `diag diff --format markdown`._")
    return "\n".join(out) + "\n"
