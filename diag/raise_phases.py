"""The phase a raised exception's message proves (diag/data/raise_phases.tsv).

tools/gen_raise_phases.py writes, for the ``raise`` statements of vLLM's and SGLang's
releases (fixtures/messages/messages.tsv), the start-up phase of the function that raises
each message (fixtures/messages/phase_map.yaml): ``ValueError: No valid attention backend
found for cuda with ...`` is raised while the model is built, so a traceback ending in it
reached weights_load, whatever the paste kept of its frames. :func:`raise_events` reads the
exception lines of the records against that table, by the message's head; the table is
loaded on the first exception line that asks.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

from diag.model import Event, Record

__all__ = ["EXCEPTION_CLASS", "phase_of_exception", "raise_events"]

NO_PHASE = "-"  # a row whose message proves no phase (tools/gen_raise_phases.py)
_PATH = Path(__file__).with_name("data") / "raise_phases.tsv"
_HEAD = 12  # the look-up key: the message's first characters (the table's MIN_HEAD)
# the classes an exception line is read for (tools/gen_raise_phases.py keeps the raises of
# these only, and raise_events looks only at lines that name "Error" or "Exception"): a
# named *Error / *Exception class, not the bare base classes
EXCEPTION_CLASS = r"[A-Za-z_]\w*(?:Error|Exception)"
# an exception line: a class, module-qualified or not, and its message
_EXC = re.compile(r"^(?:[A-Za-z_]\w*\.)*(?P<exc>" + EXCEPTION_CLASS + r"): (?P<msg>\S.*)$", re.S)
_Row = tuple[str, str, str, str, str]  # framework, phase, class, pattern, where
# pydantic v2's ValidationError lists a ValueError (or assert) raised inside a validator as
# "  Value error, <message> [type=value_error, input_value=..., input_type=...]" under its
# "1 validation error for ModelConfig" line (vLLM's pydantic config dataclasses, 0.10+): the
# message the validator's function raised, read as that ValueError (also where a paste's
# unwrapping glued it to the header line)
_PYDANTIC = re.compile(
    r"(?:^|\s)(?P<kind>Value error|Assertion failed), (?P<msg>\S.*?)"
    r"(?: \[type=\w+(?:,.*)?\])?\s*$",
    re.S,
)


@lru_cache(maxsize=1)
def _table() -> dict[str, list[_Row]]:
    """The message's first :data:`_HEAD` characters -> the rows whose pattern starts so."""
    try:
        text = _PATH.read_text(encoding="utf-8")
    except OSError:
        return {}
    out: dict[str, list[_Row]] = {}
    for row in text.splitlines()[3:]:
        cells = row.split("\t")
        if len(cells) < 5:
            continue
        framework, phase, exc, pattern, where = cells[:5]
        head = re.sub(r"\\(.)", r"\1", pattern[1:].split(".*?", 1)[0])[:_HEAD]
        if len(head) == _HEAD:
            out.setdefault(head, []).append((framework, phase, exc, pattern, where))
    return out


@lru_cache(maxsize=4096)
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.S)


def phase_of_exception(text: str, framework: str | None) -> tuple[str, str] | None:
    """(phase, where it is raised) of one exception line, or None."""
    m = _EXC.match(text.strip())
    if m is None:
        return None
    msg = m.group("msg")
    rows = _table().get(msg[:_HEAD])
    if not rows:
        return None
    other: tuple[str, str] | None = None
    for fw, phase, exc, pattern, where in rows:
        if exc == m.group("exc") and _compiled(pattern).match(msg):
            if fw == framework:
                # '-': the framework raises these words in steps of different phases
                return None if phase == NO_PHASE else (phase, where)
            if phase == NO_PHASE:
                continue
            if framework not in ("sglang", "vllm"):
                return phase, where
            # the other framework's raise: SGLang runs vLLM's code (its layers and
            # distributed helpers before 0.4, custom ops since), and a short paste's
            # framework is a guess from a few lines; its row counts where the framework's
            # own rows have none
            other = other or (phase, where)
    return other


def raise_events(records: Sequence[Record], framework: str | None) -> list[Event]:
    """One event per exception line whose message a start-up function of the framework
    raises (a notice of the phase it proves)."""
    out: list[Event] = []
    for r in records:
        lines = (r.message, *r.continuation)
        for i, text in enumerate(lines):
            pyd = None
            if "Value error, " in text or "Assertion failed, " in text:
                if "[type=" not in text:
                    # a paste that broke the line at a fixed width: its pieces follow
                    # until the error type that ends it
                    for j in range(i + 1, min(i + 6, len(lines))):
                        text += lines[j]
                        if "[type=" in lines[j]:
                            break
                pyd = _PYDANTIC.search(text)
            if pyd is not None:
                exc = "ValueError" if pyd.group("kind") == "Value error" else "AssertionError"
                text = f"{exc}: {pyd.group('msg')}"
            if ": " not in text or not ("Error" in text or "Exception" in text):
                continue
            found = phase_of_exception(text[:2000], framework)
            if found is None:
                continue
            phase, where = found
            func = where.split(", ", 1)[0].rsplit(":", 1)[-1]
            out.append(
                Event(
                    source=r.source,
                    line=r.line + i,
                    ts=r.ts,
                    rank=r.rank,
                    phase=phase,
                    kind="mark",
                    pattern=f"raises.{func}",
                    message=f"an exception {func} raises (phase {phase}): {text.strip()[:200]}",
                    fields={"raised_in": where},
                )
            )
    return out
