"""Config from args lines, read with ast (never eval)."""

from __future__ import annotations

from diag.parse.config import detect_config_line, normalise, parse_config_message

SERVER_ARGS_OLD = (
    "server_args=ServerArgs(model_path='deepseek-ai/DeepSeek-R1', tokenizer_path='deepseek-ai/"
    "DeepSeek-R1', tokenizer_mode='auto', load_format='auto', trust_remote_code=True, "
    "dtype='auto', kv_cache_dtype='auto', quantization=None, context_length=None, "
    "device='cuda', host='0.0.0.0', port=30000, mem_fraction_static=0.87, tp_size=8, "
    "stream_interval=1, random_seed=596599375, dp_size=1, nnodes=2, node_rank=1, "
    "dist_init_addr='10.0.0.1:5000', speculative_algorithm='NEXTN', speculative_num_steps=3, "
    "json_model_override_args='{}', lora_paths=None, attention_backend='flashinfer', "
    "sampling_backend=FlashInferSampling(), disable_radix_cache=False)"
)

SERVER_ARGS_DICT = (
    "server_args={'model_path': 'Qwen/Qwen3-8B', 'tp_size': 2, 'pp_size': 2, 'dp_size': 1, "
    "'ep_size': 1, 'nnodes': 1, 'node_rank': 0, 'quantization': 'fp8', 'port': 30001, "
    "'speculative_algorithm': None, 'speculative_num_steps': None, 'watchdog_timeout': 300.0, "
    "'json_model_override_args': '{\"rope_scaling\": {\"type\": \"yarn\"}}', 'enable_dp_attention'"
    ": False}"
)

NON_DEFAULT = (
    "non-default args: {'model_tag': 'Qwen/Qwen3-30B-A3B-GPTQ-Int4', 'host': '0.0.0.0', "
    "'model': 'Qwen/Qwen3-30B-A3B-GPTQ-Int4', 'tensor_parallel_size': 4, "
    "'pipeline_parallel_size': 2, 'quantization': 'gptq_marlin', 'speculative_config': "
    "{'method': 'eagle3', 'model': 'x/eagle3', 'num_speculative_tokens': 3}}"
)

ENGINE_CONFIG = (
    "Initializing a V1 LLM engine (v0.32.0) with config: model='/models/tiny', "
    "speculative_config=None, tokenizer='/models/tiny', skip_tokenizer_init=False, "
    "tokenizer_mode=auto, revision=None, dtype=torch.bfloat16, max_seq_len=2048, "
    "download_dir=None, load_format=auto, tensor_parallel_size=2, pipeline_parallel_size=1, "
    "data_parallel_size=1, disable_custom_all_reduce=False, quantization=None, "
    "enforce_eager=True, kv_cache_dtype=auto, device_config=cpu, "
    "compilation_config={\"level\":0,\"splitting_ops\":[\"vllm.unified_attention\"]}"
)


def test_server_args_call_form() -> None:
    raw, version = parse_config_message(SERVER_ARGS_OLD)
    assert version is None
    assert raw["tp_size"] == 8
    assert raw["dist_init_addr"] == "10.0.0.1:5000"
    # a value that is not a literal is kept as its source text
    assert raw["sampling_backend"] == "FlashInferSampling()"
    cfg = normalise(raw)
    assert cfg["tp"] == 8 and cfg["dp"] == 1 and cfg["nnodes"] == 2 and cfg["node_rank"] == 1
    assert cfg["port"] == 30000
    assert cfg["model"] == "deepseek-ai/DeepSeek-R1"
    assert cfg["speculative"] == {"algorithm": "NEXTN", "num_steps": 3}
    assert "quantization" not in cfg  # None is "not set"


def test_server_args_dict_form() -> None:
    raw, _ = parse_config_message(SERVER_ARGS_DICT)
    cfg = normalise(raw)
    assert (cfg["tp"], cfg["pp"], cfg["dp"], cfg["ep"]) == (2, 2, 1, 1)
    assert cfg["quantization"] == "fp8"
    assert cfg["port"] == 30001
    assert "speculative" not in cfg


def test_non_default_args() -> None:
    raw, _ = parse_config_message(NON_DEFAULT)
    cfg = normalise(raw)
    assert cfg["tp"] == 4 and cfg["pp"] == 2
    assert cfg["quantization"] == "gptq_marlin"
    assert cfg["speculative"] == {"algorithm": "eagle3", "num_steps": 3}


def test_engine_config_dump() -> None:
    raw, version = parse_config_message(ENGINE_CONFIG)
    assert version == "0.32.0"
    assert raw["tensor_parallel_size"] == 2
    assert raw["enforce_eager"] is True
    assert raw["dtype"] == "torch.bfloat16"
    cfg = normalise(raw)
    assert cfg["tp"] == 2 and cfg["pp"] == 1 and cfg["dp"] == 1
    assert cfg["model"] == "/models/tiny"
    # the engine's resolved length (max_seq_len in its config dump) is the max model length
    assert cfg["max_model_len"] == 2048


def test_engine_config_nested_objects_do_not_leak_keys() -> None:
    raw, _ = parse_config_message(
        "Initializing a V1 LLM engine (v0.10.1) with config: model='Qwen/Qwen3-8B', "
        "speculative_config=SpeculativeConfig(method='eagle3', model='AngelSlim/eagle3', "
        "num_spec_tokens=3), tokenizer='Qwen/Qwen3-8B', tensor_parallel_size=4, "
        'compilation_config={"level":3,"cudagraph_capture_sizes":[512,504]}, seed=0'
    )
    cfg = normalise(raw)
    assert cfg["model"] == "Qwen/Qwen3-8B"  # not the draft model inside SpeculativeConfig(...)
    assert cfg["tp"] == 4
    assert raw["compilation_config"] == {"level": 3, "cudagraph_capture_sizes": [512, 504]}
    assert cfg["speculative"]["algorithm"] == "eagle3"
    assert raw["seed"] == 0


def test_namespace_form() -> None:
    raw, _ = parse_config_message(
        "args: Namespace(host=None, port=8000, model='m', tensor_parallel_size=2, "
        "pipeline_parallel_size=1)"
    )
    assert normalise(raw)["tp"] == 2


def test_detect() -> None:
    assert detect_config_line(SERVER_ARGS_OLD)
    assert detect_config_line(NON_DEFAULT)
    assert detect_config_line(ENGINE_CONFIG)
    assert not detect_config_line("Load weight begin. avail mem=78.81 GB")


def test_truncated_or_hostile_args_never_raise_and_never_run() -> None:
    for msg in (
        SERVER_ARGS_OLD[:200],
        SERVER_ARGS_DICT[:-1],
        "server_args=ServerArgs(model_path=__import__('os').system('false'))",
        "server_args={'a': (lambda: 1)()}",
        "non-default args: {" + "[" * 5000,
        "server_args=ServerArgs(" + "(" * 100_000,
    ):
        raw, _ = parse_config_message(msg)
        assert isinstance(raw, dict)
    raw, _ = parse_config_message(
        "server_args=ServerArgs(model_path=__import__('os').system('false'), tp_size=2)"
    )
    assert raw["tp_size"] == 2
    assert raw["model_path"] == "__import__('os').system('false')"  # text, not evaluated


def test_version_lines_are_found_behind_their_literal_guards() -> None:
    """version_of tests each pattern's literal before its regex: the same version as the
    patterns alone give, for the first line that names one (a SGLang log only by
    sglang's own words)."""
    import re

    from diag.parse.attribute import _VERSION_RE, version_of
    from diag.parse.grammars import parse_line
    from diag.parse.records import Draft

    lines = [
        "INFO 03-10 16:19:04 [api_server.py:1805] vLLM API server version 0.10.1",
        "INFO 01-02 03:04:05 llm_engine.py:161] Initializing an LLM engine (v0.4.3) with config",
        "[2026-02-22 22:35:21] server_args=ServerArgs(model_path='x') sglang==0.5.2.post1",
        "sglang: 0.4.10",
        "SGLang version SGLANG==0.4.0",  # no match: the pattern is case-sensitive
        "vLLM API server version unknown",
        "nothing here",
    ]
    for lit, rx in _VERSION_RE:  # each guard is a literal every match holds
        assert lit in rx.pattern.replace("\\(", "(").replace("\\b", "")
    for framework in ("sglang", "vllm", "unknown"):
        for start in range(len(lines)):
            drafts = [Draft("x", i, s, parse_line(s)) for i, s in enumerate(lines[start:])]
            want = None
            for d in drafts:
                for _, rx in _VERSION_RE:
                    m = re.search(rx.pattern, d.p.message)
                    if m and (framework != "sglang" or "sglang" in rx.pattern):
                        want = m.group(1)
                        break
                if want:
                    break
            assert version_of(drafts, framework) == want, (framework, start)
