"""startup.no_listen_port when vLLM's API server process ends the log with its own
traceback before listening; vLLM's start-up SIGTERM handler (KeyboardInterrupt("terminated"))."""

# ruff: noqa: E501  (real log lines are long)
from __future__ import annotations

import pytest

from diag.analyze import analyze_text

_HEAD = """\
(APIServer pid=77) INFO 03-01 10:00:00 [utils.py:240] non-default args: {'model': 'm', 'tensor_parallel_size': 2}
(APIServer pid=77) INFO 03-01 10:00:02 [model.py:568] Resolved architecture: LlamaForCausalLM
"""
_ENGINE_READY = "(EngineCore pid=88) INFO 03-01 10:03:00 [core.py:250] init engine (profile, create kv cache, warmup model) took 170.10 seconds\n"


def _traceback(proc: str, last: str) -> str:
    return (
        f"({proc}) Traceback (most recent call last):\n"
        f'({proc})   File "/v/lib/python3.12/site-packages/vllm/entrypoints/openai/api_server.py", line 900, in init_app_state\n'
        f"({proc})     state.serving = Serving(engine)\n"
        f"({proc}) {last}\n"
    )


def _ids(text: str) -> set[str]:
    return {f.id for f in analyze_text(text, "server.log", year=2026).findings}


@pytest.mark.parametrize(
    ("text", "port"),
    [
        # the HTTP server's own process died and its traceback ends the log: no port
        (_HEAD + _ENGINE_READY + _traceback("APIServer pid=77", "ValueError: bad vocab file"), True),
        # an engine process's traceback ending the excerpt says nothing of the port
        (_HEAD + _traceback("EngineCore pid=88", "ValueError: bad vocab file"), False),
        # the API server died after it listened: the port was open
        (_HEAD + _ENGINE_READY
         + "(APIServer pid=77) INFO:     Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)\n"
         + _traceback("APIServer pid=77", "ValueError: bad vocab file"), False),
        # the traceback goes on past the excerpt (no exception line): not proven
        (_HEAD + "".join(_traceback("APIServer pid=77", "").splitlines(keepends=True)[:-1]), False),
    ],
)
def test_the_api_servers_own_traceback_ending_the_log_means_no_port(text: str, port: bool) -> None:
    assert ("startup.no_listen_port" in _ids(text)) is port


def test_vllms_startup_sigterm_handler_is_a_kill_and_ends_the_run() -> None:
    text = _HEAD + _traceback("APIServer pid=77", "KeyboardInterrupt: terminated")
    assert {"process.killed", "python.exception", "startup.no_listen_port"} <= _ids(text)


def test_a_bare_keyboardinterrupt_is_no_kill() -> None:
    text = _HEAD + _traceback("APIServer pid=77", "KeyboardInterrupt")
    assert not {"process.killed", "python.exception"} & _ids(text)


def test_another_processes_ignored_exception_does_not_make_this_traceback_handled() -> None:
    # an engine process's unraisable notice ('Exception ignored in: ...', then its own
    # traceback), then the API server's traceback: the server's is not the handled one
    text = (
        _HEAD
        + "(EngineCore pid=88) Exception ignored in: <function ExecutorBase.__del__ at 0x7f00>\n"
        + _traceback("EngineCore pid=88", "AttributeError: 'X' object has no attribute 'y'")
        + _traceback("APIServer pid=77", "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}")
    )
    a = analyze_text(text, "server.log", year=2026)
    (f,) = [f for f in a.findings if f.id == "python.exception"]
    assert any("Engine core initialization failed" in e.text for e in f.evidence)


_PLAIN_HEAD = """\
INFO 07-01 10:00:00 [api_server.py:1500] vLLM API server version 0.10.0
INFO 07-01 10:00:05 [config.py:1600] Using max model len 8192
INFO 07-01 10:00:06 [api_server.py:268] Started engine process with PID 4242
"""


def _plain_traceback(entry: str, func: str, last: str) -> str:
    """A traceback without a process prefix (vLLM before 0.10.2, SGLang): its outermost
    frames name the process."""
    return (
        "Traceback (most recent call last):\n"
        f'  File "/env/lib/python3.11/site-packages/{entry}", line 1856, in {func}\n'
        "    uvloop.run(run_server(args))\n"
        '  File "/env/lib/python3.11/asyncio/runners.py", line 118, in run\n'
        "    return self._loop.run_until_complete(task)\n"
        f"{last}\n"
    )


@pytest.mark.parametrize(
    ("entry", "func", "port"),
    [
        # `python -m vllm.entrypoints.openai.api_server`: the HTTP server's main thread
        ("vllm/entrypoints/openai/api_server.py", "<module>", True),
        # `vllm serve` (cli/serve.py cmd) and SGLang's launcher
        ("vllm/entrypoints/cli/serve.py", "cmd", True),
        ("sglang/launch_server.py", "<module>", True),
        # a user's script or an engine module is no HTTP server's entry
        ("myproj/run_eval.py", "<module>", False),
        ("vllm/v1/engine/core.py", "run_engine_core", False),
    ],
)
def test_a_prefixless_traceback_from_the_servers_entry_point_means_no_port(
    entry: str, func: str, port: bool
) -> None:
    text = _PLAIN_HEAD + _plain_traceback(entry, func, "RuntimeError: Engine process failed to start")
    assert ("startup.no_listen_port" in _ids(text)) is port


def test_a_child_process_traceback_through_the_server_module_is_not_the_servers() -> None:
    """A spawned child's traceback starts at multiprocessing's bootstrap even when it runs
    a function of the server's module (vLLM 0.6's run_mp_engine)."""
    text = _PLAIN_HEAD + (
        "Traceback (most recent call last):\n"
        '  File "/usr/lib/python3.11/multiprocessing/process.py", line 314, in _bootstrap\n'
        "    self.run()\n"
        '  File "/env/lib/python3.11/site-packages/vllm/entrypoints/openai/api_server.py", line 90, in run_server\n'
        "    engine.run()\n"
        "ValueError: bad vocab file\n"
    )
    assert "startup.no_listen_port" not in _ids(text)


_SGL = """\
[2026-02-27 11:30:01] server_args=ServerArgs(model_path='m', tp_size=2, port=30000)
[2026-02-27 11:30:40 TP0] Load weight begin. avail mem=70.10 GB
[2026-02-27 11:31:20 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=55.00 GB
[2026-02-27 11:31:25 TP1] Scheduler hit an exception: Traceback (most recent call last):
RuntimeError: open: Address family not supported by protocol
"""
_SIGQUIT = "[2026-02-27 11:31:26] Received sigquit from a child process. It usually means the child failed.\nKilled\n"
_LISTENED = (
    "[2026-02-27 11:31:00] INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)\n"
    "[2026-02-27 11:31:05] The server is fired up and ready to roll!\n"
    "[2026-02-27 11:31:10] INFO:     127.0.0.1:5000 - \"POST /generate HTTP/1.1\" 200 OK\n"
)


def test_sglangs_launch_phase_sigquit_before_listening_leaves_no_port() -> None:
    # srt/entrypoints/engine.py launch_phase_sigquit_handler: the launcher kills its own
    # process tree, the HTTP server with it
    assert "startup.no_listen_port" in _ids(_SGL + _SIGQUIT)
    # the same words once the server listened and served (0.4.9.post6-0.5.2's
    # running_phase_sigquit_handler): the port was open
    assert "startup.no_listen_port" not in _ids(_SGL + _LISTENED + _SIGQUIT)
