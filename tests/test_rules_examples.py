"""Every rule's own examples, one test each; and what the library as a whole must cover."""

from __future__ import annotations

import re

import pytest

from diag.rules import needles
from diag.rules.examples import run_examples
from diag.rules.loader import builtin_rules

RULES = builtin_rules()
RESULTS = run_examples(RULES)

# The finding ids of shared/corpus/LABELS.md (the vocabulary the JSON output uses).
LABEL_FINDINGS = (
    "startup.stalled",
    "startup.no_listen_port",
    "rank.straggler",
    "rank.missing",
    "quant.fallback_unquantized",
    "quant.unsupported",
    "cuda.arch_unsupported",
    "cuda.oom",
    "cuda.error",
    "nccl.timeout",
    "nccl.error",
    "dist.port_in_use",
    "dist.init_hang",
    "process.killed",
    "watchdog.timeout",
    "specdec.low_acceptance",
    "attention.backend_fallback",
    "model.unsupported",
    "weights.slow_load",
    "weights.load_error",
    "python.exception",
    "warmup.failed",
    "compile.error",
    "env.version_mismatch",
)


@pytest.mark.parametrize(
    "result",
    RESULTS,
    ids=[f"{r.rule}-{r.kind}-{i}" for i, r in enumerate(RESULTS)],
)
def test_rule_example(result: object) -> None:
    from diag.rules.examples import ExampleResult

    assert isinstance(result, ExampleResult)
    assert result.ok, f"{result.path}: {result.kind} example {result.line!r}: {result.detail}"


def test_library_size_and_vocabulary() -> None:
    assert len(RULES) >= 35
    produced = {r.finding_id for r in RULES}
    missing = set(LABEL_FINDINGS) - produced
    assert not missing, f"no rule reports {sorted(missing)}"


# labels the vocabulary defines for one framework (../shared/corpus/LABELS.md)
ONE_FRAMEWORK = {
    # "SGLang scheduler watchdog fired"; vLLM's engine-step timeout is reported as
    # watchdog.engine_iteration
    "watchdog.timeout": "sglang",
    # "the server listened, but its own warm-up request failed": vLLM sends itself no
    # request; its engine warm-up (compile_or_warm_up_model) runs before the port opens,
    # and the API server's chat-template and multi-modal warm-ups are logged and skipped
    # (entrypoints/openai serving.py "Chat template warmup failed", logger.exception)
    "warmup.failed": "sglang",
}


@pytest.mark.parametrize("finding", LABEL_FINDINGS)
def test_each_label_covers_both_frameworks(finding: str) -> None:
    frameworks: set[str] = set()
    for r in RULES:
        if r.finding_id == finding:
            frameworks.update(r.frameworks)
    want = {ONE_FRAMEWORK[finding]} if finding in ONE_FRAMEWORK else {"sglang", "vllm"}
    assert "any" in frameworks or want <= frameworks, (finding, frameworks)


@pytest.mark.parametrize("rule", RULES, ids=[r.id for r in RULES])
def test_rule_metadata(rule: object) -> None:
    from diag.rules.loader import Rule

    assert isinstance(rule, Rule)
    assert rule.references, rule.id
    assert all(re.match(r"https://\S+$", ref) for ref in rule.references), rule.references
    assert rule.remedy and rule.why and rule.summary
    if rule.role == "cascade":
        assert rule.cascade_of and rule.caveat
        known = {r.finding_id for r in RULES}
        assert set(rule.cascade_of) <= known, set(rule.cascade_of) - known
    if rule.match is not None:
        assert rule.examples.match and rule.examples.no_match, rule.id


def test_needles_are_lowercase_literals_covering_every_match_example() -> None:
    all_needles = needles()
    assert all_needles == sorted(set(all_needles))
    assert all(n == n.lower() and n.strip() for n in all_needles)
    for rule in RULES:
        for line in rule.examples.match:
            assert any(n in line.lower() for n in rule.needles), (rule.id, line)


def test_examples_are_not_vacuous() -> None:
    """A match example line would not match once its needle is removed: the needle check
    is real, not decoration."""
    from diag.rules.engine import hits_for_line

    rule = next(r for r in RULES if r.id == "watchdog.timeout")
    line = rule.examples.match[0]
    assert hits_for_line(rule, line)
    assert not hits_for_line(rule, line.replace("Watchdog timeout", "Watchdog time-out"))


def test_examples_are_tested_as_the_engine_tests_a_record() -> None:
    """The engine never matches a traceback's frame or source line (code that names an
    error is no report of one), with or without a log prefix: an example of that form
    would pass here and never fire on a log, so it does not match here either."""
    from diag.rules.engine import hits_for_line

    (rule,) = [r for r in RULES if r.id == "warmup.failed"]
    assert hits_for_line(rule, "RuntimeError: warmup failed")
    for code in (
        '    raise RuntimeError("warmup failed")',
        'ERROR 05-07 14:42:34 [core.py:396]     raise RuntimeError("warmup failed")',
        '  File "/x/warmup failed.py", line 3, in f',
    ):
        assert not hits_for_line(rule, code), code
