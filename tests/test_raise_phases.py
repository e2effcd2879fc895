"""The phase a raised exception's message proves (diag/data/raise_phases.tsv, written by
tools/gen_raise_phases.py from the sources' message table and phase map)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from diag.analyze import analyze_text
from diag.raise_phases import phase_of_exception

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("line", "framework", "phase"),
    [
        # vllm/platforms/cuda.py get_attn_backend_cls (0.13-0.34): the model is being built
        ("ValueError: No valid attention backend found for cuda with AttentionSelectorConfig("
         "head_size=576, dtype=torch.bfloat16). Reasons: {FLASHMLA_SPARSE: [compute capability "
         "not supported]}.", "vllm", "weights_load"),
        ("ValueError: No valid attention backend found for cuda with x. Reasons: y.", None,
         "weights_load"),
        # the framework's own rows first; the other's where its own have none (SGLang runs
        # vLLM code, and a short paste's framework is a guess)
        ("ValueError: No valid attention backend found for cuda with x. Reasons: y.", "sglang",
         "weights_load"),
        # raised by both, at different steps: the framework's own row decides
        ("ValueError: AWQMoEMethod only supports 4bit now.", "sglang", "weights_load"),
        ("ValueError: AWQMoEMethod only supports 4bit now.", "vllm", "model_config"),
        # another class than the one raised: not that raise
        ("RuntimeError: No valid attention backend found for cuda with x. Reasons: y.", "vllm",
         None),
        # not an exception line at all
        ("No valid attention backend found for cuda with x. Reasons: y.", "vllm", None),
    ],
)
def test_a_raised_message_names_its_phase(
    line: str, framework: str | None, phase: str | None
) -> None:
    got = phase_of_exception(line, framework)
    assert (got[0] if got else None) == phase


def test_a_traceback_that_ends_in_a_known_raise_reached_its_phase() -> None:
    text = (
        "(Worker_TP4_EP4 pid=2532) ERROR 12-29 15:21:11 [multiproc_executor.py:751] ValueError: "
        "No valid attention backend found for cuda with AttentionSelectorConfig(head_size=576). "
        "Reasons: {FLASHMLA_SPARSE: [compute capability not supported]}.\n"
        "(Worker_TP4_EP4 pid=2532) INFO 12-29 15:21:11 [multiproc_executor.py:709] Parent "
        "process exited, terminating worker\n"
    )
    a = analyze_text(text)
    assert a.last_phase == "weights_load"
    (ev,) = [e for e in a.events if e.pattern.startswith("raises.")]
    assert ev.line == 1 and ev.pattern == "raises.get_attn_backend_cls"


def test_a_validators_value_error_under_pydantics_validation_error_names_its_phase() -> None:
    """pydantic v2 lists a ValueError a validator raised as "Value error, <message> [type=
    value_error, ...]": read as that ValueError (vLLM's registry raise: model_config)."""
    text = (
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig\n"
        "  Value error, Model architectures ['FooForCausalLM'] failed to be inspected. Please "
        "check the logs for more details. [type=value_error, input_value=ArgsKwargs((), "
        "{'model': 'x'}), input_type=ArgsKwargs]\n"
        "    For further information visit https://errors.pydantic.dev/2.11/v/value_error\n"
    )
    a = analyze_text(text)
    assert a.last_phase == "model_config"
    (ev,) = [e for e in a.events if e.pattern.startswith("raises.")]
    assert ev.line == 2 and ev.pattern == "raises._raise_for_unsupported"


def test_a_value_error_glued_to_the_validation_error_line_still_counts() -> None:
    """A paste's re-joined wrap glues the "Value error, ..." line to its header line."""
    text = (
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig  "
        "Value error, Model architectures ['FooForCausalLM'] failed to be inspected. Please "
        "check the logs for more details. [type=value_error, input_value=x, input_type=y]\n"
    )
    assert analyze_text(text).last_phase == "model_config"


def test_the_table_is_up_to_date() -> None:
    """diag/data/raise_phases.tsv is what tools/gen_raise_phases.py writes from the message
    table and the phase map now."""
    tool = ROOT / "tools" / "gen_raise_phases.py"
    spec = importlib.util.spec_from_file_location("gen_raise_phases", tool)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["gen_raise_phases"] = mod
    spec.loader.exec_module(mod)
    rows = mod.build()
    assert len(rows) > 1000
    table = ROOT / "diag" / "data" / "raise_phases.tsv"
    assert table.read_text(encoding="utf-8") == mod.render(rows)
    # every kept pattern is anchored, specific and of a phase past launch
    for framework, phase, exc, pattern, _where, _versions in rows:
        assert framework in ("sglang", "vllm") and phase not in ("launch", "") and exc
        assert pattern.startswith("^") and len(pattern) > 12


def test_a_message_the_framework_raises_in_two_phases_proves_none() -> None:
    # vLLM raises 'Cannot find the config file for {}' in get_quant_config, run by the
    # weights' loader in 0.2-0.3 (model_executor/weight_utils.py) and by the engine config
    # since (model_loader/weight_utils.py, phase_map: model_config): its row says '-', and
    # SGLang's row for the same words (its model loader: weights_load) is not taken instead
    line = "ValueError: Cannot find the config file for awq"
    assert phase_of_exception(line, "vllm") is None
    found = phase_of_exception(line, "sglang")
    assert found is not None and found[0] == "weights_load"
