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

import importlib.util
import re
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

import pytest

_spec = importlib.util.spec_from_file_location(
    "message_table", Path(__file__).resolve().parents[1] / "tools" / "message_table.py"
)
assert _spec is not None and _spec.loader is not None
_mt = importlib.util.module_from_spec(_spec)
sys.modules["message_table"] = _mt
_spec.loader.exec_module(_mt)

from diag.model import PHASES  # noqa: E402
from diag.phases import PhaseEntry, load_catalogue  # noqa: E402
from diag.rules.loader import Rule, builtin_rules  # noqa: E402

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
        # V0 (0.5-0.10) and the releases' own paths of the same steps
        "vllm/worker/worker.py",
        "vllm/worker/worker_base.py",
        "vllm/worker/model_runner.py",
        "vllm/executor/executor_base.py",
        "vllm/executor/gpu_executor.py",
        "vllm/executor/multiproc_gpu_executor.py",
        "vllm/executor/mp_distributed_executor.py",
        "vllm/executor/multiproc_worker_utils.py",
        "vllm/executor/ray_gpu_executor.py",
        "vllm/executor/ray_distributed_executor.py",
        "vllm/executor/ray_utils.py",
        "vllm/engine/llm_engine.py",
        "vllm/engine/async_llm_engine.py",
        "vllm/engine/multiprocessing/engine.py",
        "vllm/engine/multiprocessing/client.py",
        "vllm/entrypoints/openai/rpc/server.py",
        "vllm/entrypoints/openai/rpc/client.py",
        "vllm/model_executor/model_loader/loader.py",
        "vllm/transformers_utils/config.py",
        "vllm/v1/utils.py",
        "vllm/platforms/rocm.py",
        # 0.2-0.3: the loader, weight files, parallel state and custom all-reduce before
        # model_loader/ and distributed/, Ray's set-up before executor/, the cache engine
        "vllm/model_executor/model_loader.py",
        "vllm/model_executor/weight_utils.py",
        "vllm/model_executor/parallel_utils/parallel_state.py",
        "vllm/model_executor/parallel_utils/custom_all_reduce.py",
        "vllm/model_executor/parallel_utils/cupy_utils.py",
        "vllm/engine/ray_utils.py",
        "vllm/worker/cache_engine.py",
        # vLLM's platform plugins (framework vllm, releases labelled "vllm-ascend 0.9.1"):
        # their platform, worker, model runner, graph / compile and loader files
        "vllm_ascend/platform.py",
        "vllm_ascend/ascend_config.py",
        "vllm_ascend/cpu_binding.py",
        "vllm_ascend/device_allocator/",
        "vllm_ascend/distributed/parallel_state.py",
        "vllm_ascend/distributed/device_communicators/",
        "vllm_ascend/compilation/",
        "vllm_ascend/worker/worker.py",
        "vllm_ascend/worker/worker_v1.py",
        "vllm_ascend/worker/model_runner_v1.py",
        "vllm_ascend/worker/model_runner.py",
        "tpu_inference/platforms/tpu_platform.py",
        "tpu_inference/worker/tpu_worker.py",
        "tpu_inference/runner/tpu_runner.py",
        "tpu_inference/runner/compilation_manager.py",
        "tpu_inference/runner/kv_cache_manager.py",
        "tpu_inference/models/common/model_loader.py",
        "tpu_inference/executors/",
        "vllm_spyre/platform.py",
        "vllm_spyre/compilation_utils.py",
        "vllm_spyre/v1/worker/spyre_worker.py",
        "vllm_spyre/v1/worker/spyre_model_runner.py",
        "vllm_spyre/model_executor/model_loader/",
        "vllm_rbln/platform/",
        "vllm_rbln/v1/worker/rbln_worker.py",
        "vllm_rbln/v1/worker/rbln_model_runner.py",
        "vllm_rbln/v1/worker/optimum_worker.py",
        "vllm_rbln/v1/worker/optimum_model_runner.py",
        "vllm_rbln/v1/worker/dynamic_kv_sizer.py",
        "vllm_rbln/model_executor/models/optimum/",
        # 2026-12-07: vllm-kunlun's platform and runners; vLLM-Omni's diffusion worker,
        # runner, loader, engine and executors, its LLM-stage workers and runners, its stage
        # start-up and API server; LMCache's vLLM connector, engine, config and manager;
        # NIXL's agent; Dynamo's vLLM and SGLang workers' set-up and registration
        "vllm_kunlun/platforms/",
        "vllm_kunlun/v1/worker/gpu_model_runner.py",
        "vllm_kunlun/worker/model_runner.py",
        "vllm_omni/diffusion/worker/diffusion_worker.py",
        "vllm_omni/diffusion/worker/diffusion_model_runner.py",
        "vllm_omni/diffusion/model_loader/",
        "vllm_omni/diffusion/diffusion_engine.py",
        "vllm_omni/diffusion/executor/",
        "vllm_omni/worker/base.py",
        "vllm_omni/worker/gpu_ar_worker.py",
        "vllm_omni/worker/gpu_generation_worker.py",
        "vllm_omni/worker/gpu_model_runner.py",
        "vllm_omni/worker/gpu_ar_model_runner.py",
        "vllm_omni/worker/gpu_generation_model_runner.py",
        "vllm_omni/engine/omni_engine_base.py",
        "vllm_omni/engine/stage_init_utils.py",
        "vllm_omni/engine/stage_engine_startup.py",
        "vllm_omni/entrypoints/openai/api_server.py",
        "lmcache/integration/vllm/vllm_v1_adapter.py",
        "lmcache/integration/vllm/utils.py",
        "lmcache/integration/sglang/sglang_adapter.py",
        "lmcache/v1/cache_engine.py",
        "lmcache/v1/config.py",
        "lmcache/v1/manager.py",
        "nixl_cu12/_api.py",
        "dynamo/vllm/main.py",
        "dynamo/vllm/args.py",
        "dynamo/vllm/worker_factory.py",
        "dynamo/sglang/args.py",
        "dynamo/sglang/register.py",
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
        # before 0.4 the server, model config and KV sizing lived in these files
        "sglang/srt/server.py",
        "sglang/srt/configs/model_config.py",
        "sglang/srt/model_executor/model_runner_kv_cache_mixin.py",
        "sglang/srt/model_executor/pool_configurator.py",
        "sglang/srt/compilation/backend.py",
        # 0.1: the scheduler (ModelTpServer), ModelRunner and controllers under managers/controller/
        "sglang/srt/managers/controller/tp_worker.py",
        "sglang/srt/managers/controller/model_runner.py",
        "sglang/srt/managers/controller/manager_single.py",
        "sglang/srt/managers/controller/manager_multi.py",
        "sglang/srt/managers/controller/dp_worker.py",
        # 0.1.5-0.1.16: the router process's ModelRpcServer (the scheduler) and ModelRunner
        "sglang/srt/managers/router/model_rpc.py",
        "sglang/srt/managers/router/model_runner.py",
        # kt-kernel's MoE wrapper (KTransformers), built inside SGLang's model construction
        "kt_kernel/experts_base.py",
    ),
}

# Measured coverage (per cent) of each extracted release's startup-path messages, by kind:
# "info" = phase markers and progress (info lines, tqdm bars), "warn_error" =
# warning/error/exception/critical, "raise" = raised exceptions (a traceback's last line).
# "recognised": a catalogue entry or a specific rule matches the message; "accounted": that,
# or fixtures/messages/phase_map.yaml says why the message marks no phase (shutdown,
# requests, operator actions). A ratchet: raise the floors as coverage grows, never lower
# them. (Before session 3's generated catalogue, with this module list: vLLM 0.33.0 info
# 100/309 = 32.4%, SGLang 0.5.23 info 91/241 = 37.8%; see the README's message coverage.
# Measured 2026-12-02 with diag/data/phases_generated.yaml loaded as notices; re-measured
# 2026-12-05 with 22 releases and rules/config.invalid.yaml regenerated, rounded down to 0.1;
# the plugins' rows measured 2026-12-05: before their entries, info 7/10, 10/30, 5/22, 7/59,
# 20/85, 2/33, 4/59 and warn_error 2/8, 2/20, 0/20, 0/58, 0/25, 0/14, 0/36, in this order.
# vLLM 0.34.0 added 2026-12-05: before the catalogue and config.invalid were regenerated,
# info 219/307, warn_error 179/281, raise 308/853; after, 232/307, 197/281, 344/853.
# 2026-12-06: vLLM 0.12.0, 0.15.1, 0.19.1, 0.22.1, 0.28.0, 0.31.0 and SGLang 0.1.26, 0.3.2,
# 0.4.1.post7, 0.4.9.post6, 0.5.1.post3, 0.5.14, 0.5.19 added; before the catalogue and
# config.invalid were regenerated (map already extended), recognised info / warn_error /
# raise: vLLM 142/191 123/178 122/452, 161/201 126/176 128/470, 164/207 140/199 141/534,
# 179/222 164/228 185/606, 189/252 174/244 229/703, 227/313 197/282 322/846; SGLang 2/13
# 1/6 3/14, 18/23 4/9 3/22, 40/51 26/40 10/101, 62/92 52/80 12/160, 55/79 63/92 19/186,
# 166/225 193/268 82/431, 172/212 92/163 19/406. Every floor re-measured that day.
# Later on 2026-12-06: vLLM 0.2.7, 0.3.3 and SGLang 0.1.14, 0.1.17, 0.2.5 added (the releases
# before the earliest read, which the corpus's oldest logs show); before the catalogue and
# config.invalid were regenerated (map extended), recognised info / warn_error / raise: vLLM
# 11/12 3/8 21/53, 13/16 4/8 28/83; SGLang 2/8 0/1 2/11, 7/25 0/6 2/20, 9/13 1/6 3/14; after
# (with SGLang 0.1's rank-prefixed position entries in phases.yaml), 11/12 4/8 25/53, 15/16
# 5/8 35/83; 5/8 0/1 2/11, 18/25 0/6 2/20, 9/13 1/6 3/14. Every floor re-measured: the
# earlier releases' figures are HEAD's (their raise floors had fallen behind them).)
# 2026-12-07: the map decided vLLM's layers / quantization / kernels / attention backends /
# KV connectors and SGLang's quantization / MoE / attention / mem_cache (none of them a
# startup-path module here): SGLang 0.5.23 info 206/241 -> 207/241 recognised, 237 -> 238
# accounted; every other figure unchanged.
FLOORS: dict[tuple[str, str, str], float] = {}
ACCOUNTED_FLOORS: dict[tuple[str, str, str], float] = {}
_MEASURED = """  # framework release, then per kind: recognised%, accounted%
vllm 0.2.7           info 91.6 91.6  warn_error 50.0 50.0  raise 47.1 100.0
vllm 0.3.3           info 93.7 93.7  warn_error 62.5 62.5  raise 42.1 100.0
vllm 0.4.3           info 86.6 93.3  warn_error 64.0 64.0  raise 43.6 100.0
vllm 0.5.5           info 77.7 96.2  warn_error 73.0 76.9  raise 35.8 100.0
vllm 0.6.6           info 85.7 97.1  warn_error 78.0 82.4  raise 29.4 99.3
vllm 0.7.3           info 81.3 97.5  warn_error 71.8 83.3  raise 30.8 99.3
vllm 0.8.5           info 83.0 96.7  warn_error 70.0 80.0  raise 31.3 99.4
vllm 0.9.2           info 82.3 96.5  warn_error 70.4 80.3  raise 31.5 99.5
vllm 0.10.2          info 76.6 96.5  warn_error 71.9 82.8  raise 26.9 99.5
vllm 0.11.0          info 76.5 97.4  warn_error 69.6 81.3  raise 29.3 99.7
vllm 0.12.0          info 74.8 96.8  warn_error 74.7 84.2  raise 28.3 99.7
vllm 0.13.0          info 77.6 96.8  warn_error 73.9 84.0  raise 27.9 99.7
vllm 0.15.1          info 80.0 97.0  warn_error 74.4 84.6  raise 27.4 99.7
vllm 0.17.1          info 82.3 97.4  warn_error 72.3 85.6  raise 26.9 99.8
vllm 0.19.1          info 79.7 96.6  warn_error 71.8 84.9  raise 26.7 99.8
vllm 0.20.0          info 80.2 96.7  warn_error 72.3 85.7  raise 29.8 99.8
vllm 0.22.1          info 80.6 96.8  warn_error 73.6 86.4  raise 31.0 99.8
vllm 0.25.1          info 77.5 97.0  warn_error 72.5 87.5  raise 30.2 99.8
vllm 0.28.0          info 76.1 96.4  warn_error 72.1 87.7  raise 34.7 99.8
vllm 0.31.0          info 74.4 96.8  warn_error 72.3 88.2  raise 39.4 99.7
vllm 0.33.0          info 76.3 96.4  warn_error 70.0 87.2  raise 41.9 99.7
vllm 0.34.0          info 75.5 97.0  warn_error 70.1 86.8  raise 40.7 99.7
sglang 0.1.14        info 62.5 75.0  warn_error 0.0 0.0  raise 18.1 100.0
sglang 0.1.17        info 72.0 84.0  warn_error 0.0 0.0  raise 10.0 100.0
sglang 0.1.26        info 69.2 76.9  warn_error 16.6 16.6  raise 21.4 100.0
sglang 0.2.5         info 69.2 76.9  warn_error 16.6 16.6  raise 21.4 100.0
sglang 0.2.15        info 81.8 95.4  warn_error 36.3 81.8  raise 15.7 100.0
sglang 0.3.2         info 82.6 95.6  warn_error 66.6 77.7  raise 13.6 100.0
sglang 0.3.6         info 80.0 96.6  warn_error 70.0 100.0  raise 8.5 97.1
sglang 0.4.1.post7   info 80.3 96.0  warn_error 65.0 77.5  raise 10.8 100.0
sglang 0.4.3.post4   info 74.1 94.8  warn_error 61.3 75.0  raise 9.6 100.0
sglang 0.4.6         info 74.6 95.7  warn_error 67.2 81.0  raise 9.3 100.0
sglang 0.4.9.post6   info 69.5 96.7  warn_error 66.2 83.7  raise 8.1 100.0
sglang 0.4.10.post2  info 71.9 96.3  warn_error 64.1 83.9  raise 8.9 100.0
sglang 0.5.1.post3   info 69.6 94.9  warn_error 68.4 85.8  raise 10.7 100.0
sglang 0.5.2         info 71.2 95.4  warn_error 68.7 86.4  raise 11.2 100.0
sglang 0.5.5         info 79.3 95.2  warn_error 74.1 90.7  raise 12.6 100.0
sglang 0.5.9         info 78.7 96.3  warn_error 77.4 90.6  raise 14.9 100.0
sglang 0.5.14        info 81.3 96.8  warn_error 79.8 91.7  raise 22.7 100.0
sglang 0.5.19        info 83.4 98.1  warn_error 60.1 84.6  raise 4.9 100.0
sglang 0.5.23        info 85.8 98.7  warn_error 61.0 83.2  raise 4.1 100.0
# vLLM's platform plugins (framework vllm; 2026-12-05, with their phase_map.yaml entries)
vllm-ascend 0.7.3         info 80.0 100.0  warn_error 75.0 75.0  raise 6.6 100.0
vllm-ascend 0.9.1         info 90.0 100.0  warn_error 80.0 80.0  raise 2.9 100.0
vllm-ascend 0.13.0        info 81.8 95.4  warn_error 85.0 85.0  raise 0.0 100.0
vllm-ascend 0.23.0.post1  info 83.0 94.9  warn_error 89.6 98.2  raise 1.3 100.0
tpu-inference 0.32.0      info 88.2 96.4  warn_error 68.0 92.0  raise 0.0 100.0
vllm-spyre 1.10.0         info 84.8 90.9  warn_error 78.5 92.8  raise 0.0 100.0
vllm-rbln 0.12.0          info 93.2 96.6  warn_error 69.4 94.4  raise 1.6 100.0
# 2026-12-07: plugins, libraries and serving stacks around the engines, with their
# phase_map.yaml entries and the regenerated catalogue (recognised before regenerating:
# info 8/134, 18/19, 10/63, 0/2, 0/69, 0/0; warn_error 4/166, 6/12, 2/70, 0/20, 0/53, 0/1)
vllm-omni 0.30.0          info 68.6 98.5  warn_error 33.1 93.9  raise 2.2 94.3
vllm-kunlun 0.11.1        info 94.7 100.0  warn_error 50.0 50.0  raise 5.8 100.0
lmcache 0.5.6             info 44.4 100.0  warn_error 21.4 92.8  raise 0.0 100.0
nixl-cu12 1.5.1           info 100.0 100.0  warn_error 25.0 95.0  raise 0.0 100.0
ai-dynamo 1.6.1           info 98.5 98.5  warn_error 62.2 64.1  raise 0.0 90.1
kt-kernel 0.7.2           info 100.0 100.0  warn_error 100.0 100.0  raise 0.0 100.0
"""
# vLLM's platform plugins: their rows are framework vllm, their releases "<plugin> <version>"
PLUGINS = {
    "vllm-ascend": "vllm",
    "tpu-inference": "vllm",
    "vllm-spyre": "vllm",
    "vllm-rbln": "vllm",
    # 2026-12-07: vLLM plugins, libraries and serving stacks around the engines
    "vllm-omni": "vllm",
    "vllm-kunlun": "vllm",
    "lmcache": "vllm",
    "nixl-cu12": "vllm",
    "ai-dynamo": "vllm",
    "kt-kernel": "sglang",
}
# their packages (a file a catalogue entry cites: vllm_ascend/worker/model_runner_v1.py)
PLUGIN_PACKAGES = (
    "vllm_ascend",
    "tpu_inference",
    "vllm_spyre",
    "vllm_rbln",
    "vllm_omni",
    "vllm_kunlun",
    "lmcache",
    "nixl_cu12",
    "dynamo",
    "kt_kernel",
)
for _row in _MEASURED.strip().splitlines()[1:]:
    if _row.startswith("#"):
        continue
    _fw, _ver, *_cells = _row.split()
    if _fw in PLUGINS:  # "vllm-ascend 0.9.1 ..." -> ("vllm", "vllm-ascend 0.9.1", ...)
        _fw, _ver = PLUGINS[_fw], f"{_fw} {_ver}"
    for _i in range(0, len(_cells), 3):
        FLOORS[(_fw, _ver, _cells[_i])] = float(_cells[_i + 1])
        ACCOUNTED_FLOORS[(_fw, _ver, _cells[_i])] = float(_cells[_i + 2])

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
    "any.openai_response_body": (
        "a response body the server returned (protocol.py's pydantic models, serialised), "
        "not a log message: the table has no row for it"
    ),
    "sglang.mm_processor_import": (
        "the module's name is the template's hole ('Ignore import error when loading {}: "
        "{}', multimodal_processor.py import_processors 0.4.6-0.5.23): the entry names the "
        "processor packages the hole holds, which the table's rendered sample cannot show"
    ),
}

_HOLE = _mt.HOLE
_LEVEL = {k: v for k, v in _mt.LEVEL.items() if k != "debug"}
Message = _mt.Message
version_key = _mt.version_key
samples = _mt.samples
_raw_line = _mt.raw_line


def load_table(path: Path = TABLE) -> tuple[Message, ...]:
    return _mt.load_table(path)


def latest(framework: str) -> str:
    """The framework's own latest release (not a plugin's, "vllm-ascend 0.23.0.post1")."""
    vers = {v for m in load_table() if m.framework == framework for v in m.versions if " " not in v}
    return max(vers, key=version_key)


def on_startup_path(path: str, framework: str) -> bool:
    return any(
        path == p or (p.endswith("/") and path.startswith(p)) for p in STARTUP_MODULES[framework]
    )


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


def releases(framework: str) -> list[str]:
    vers = {v for m in load_table() if m.framework == framework for v in m.versions}
    return sorted(vers, key=version_key)


def startup_messages(framework: str, version: str | None = None) -> list[Message]:
    ver = version or latest(framework)
    return [
        m
        for m in load_table()
        if m.framework == framework
        and ver in m.versions
        and m.level != "debug"
        and on_startup_path(m.file, framework)
    ]


@lru_cache(maxsize=1 << 16)
def _covered(m: Message) -> str | None:
    return covered_by(m)


@lru_cache(maxsize=1)
def _catch_all() -> Rule:
    return next(r for r in builtin_rules() if r.id == "python.exception")


def not_a_marker(m: Message) -> str | None:
    """Why the message needs no catalogue entry or specific rule, else None: the phase map's
    reason it marks no phase; for a raise, that python.exception reports it (its catch-all
    really matches the traceback's last line, with the message)."""
    if m.level.startswith("raise:"):
        r = _catch_all()
        assert r.match is not None
        if any(_rule_hits(r, r.match.patterns, t) for t in samples(m)):
            return "none: reported by python.exception with its message"
        return None
    ph = _mt.load_map().phase_of(m)
    return ph if ph is not None and ph.startswith("none:") else None


def coverage(
    framework: str, version: str | None = None, *, accounted: bool = False
) -> dict[str, tuple[int, int, list[Message]]]:
    """kind -> (covered, total, uncovered messages)."""
    out: dict[str, tuple[int, int, list[Message]]] = {}
    msgs_all = startup_messages(framework, version)
    for kind in ("info", "warn_error", "raise"):
        msgs = [m for m in msgs_all if m.kind == kind]
        missed = [
            m for m in msgs if _covered(m) is None and not (accounted and not_a_marker(m))
        ]
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


_RELEASES = [(fw, v) for fw in ("vllm", "sglang") for v in releases(fw)]


@pytest.mark.parametrize(("framework", "version"), _RELEASES)
def test_startup_message_coverage(framework: str, version: str) -> None:
    report = []
    failed = []
    for accounted, floors in ((False, FLOORS), (True, ACCOUNTED_FLOORS)):
        what = "accounted" if accounted else "recognised"
        for kind, (done, total, missed) in coverage(
            framework, version, accounted=accounted
        ).items():
            pct = 100.0 * done / total if total else 100.0
            floor = floors[(framework, version, kind)]
            report.append(
                f"{framework} {version} {kind} {what}: {done}/{total} = {pct:.1f}% "
                f"(floor {floor:.1f}%)"
            )
            if pct + 1e-9 < floor:
                failed.append(kind)
                report.append(f"  uncovered {kind} ({len(missed)}):")
                report.extend(f"    {m.where()}: {m.template[:160]}" for m in missed[:400])
    print("\n".join(report))
    assert not failed, "\n".join(report)


def test_every_release_has_floors() -> None:
    assert {(fw, v) for fw, v, _ in FLOORS} == set(_RELEASES)


def _cited_files(source: str) -> list[str]:
    packages = "|".join(("sglang", "vllm", "torch", *PLUGIN_PACKAGES))
    return [
        m.group(1) for m in re.finditer(rf"(?:python/)?\b((?:{packages})/[\w/]+\.py)", source)
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
        if e.framework in releases or e.framework == "any":
            # a plugin's release ("vllm-ascend 0.13.0") is the plugin's, not vLLM 0.13.0
            plugin_rx = r"(?:{}) \d+\.\d+\.\d+(?:\.post\d+)?".format("|".join(PLUGINS))
            claimed = set(re.findall(plugin_rx, e.version))
            known = {v for vs in releases.values() for v in vs if " " in v}
            if e.framework in releases:
                rest = re.sub(plugin_rx, "", e.version)
                claimed |= set(re.findall(r"(?<![\w.])(\d+\.\d+\.\d+)(?![\w.])", rest))
                known |= releases[e.framework]
            seen = {v for m in hits for v in m.versions}
            wrong = sorted((claimed & known) - seen, key=version_key)
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


# ---------------------------------------------------------------- the phase map


def test_phase_map_covers_every_startup_module() -> None:
    """Every startup-path file has its phase (or why none) in fixtures/messages/phase_map.yaml:
    each of its messages is decided, not only the ones a log showed."""
    pmap = _mt.load_map()
    files = {(m.framework, m.file) for m in load_table() if m.framework in STARTUP_MODULES}
    unmapped = sorted(
        f"{fw} {f}"
        for fw, f in files
        if on_startup_path(f, fw) and pmap.rule_for(fw, f) is None
    )
    assert not unmapped, "startup-path files the phase map does not decide:\n" + "\n".join(unmapped)


# Rows whose hand-written catalogue entry gives another phase than the map gives their
# function, with the reason the entry is right (the check fails when one is no longer needed).
KNOWN_PHASE_DISAGREEMENTS: dict[str, str] = {
    "vllm.v1_worker_monitor_died vllm/v1/executor/multiproc_executor.py monitor_workers": (
        "the map files the monitor's message under a process ending (no phase); the entry "
        "marks what it proves: the monitor starts after WorkerProc.wait_for_ready, and a "
        "WorkerProc loads its model before READY (0.8.5-0.34.0), so weights_load was reached"
    ),
    "vllm.v1_worker_monitor_died vllm/v1/executor/ray_executor_v2.py monitor_workers": (
        "as multiproc_executor.py's: RayExecutorV2 starts its worker monitor after "
        "initialize_worker (0.20.0-0.34.0), so the worker had loaded its model"
    ),
    "vllm.engine_core_monitor_died vllm/v1/engine/core_client.py monitor_engine_cores": (
        "the map files the message under a process ending (no phase); the entry marks what "
        "it proves: MPClient starts monitor_engine_cores only after every engine core sent "
        "its ready message (0.10.2-0.34.0), so the engine had served its start-up: serving"
    ),
    "any.custom_allreduce vllm/v1/executor/multiproc_executor.py _init_executor": (
        "'DP group leader' is logged by the executor as it sets up the DP group's "
        "distributed init, before the workers start; the entry keeps it with dist_init"
    ),
    "vllm.model_registry sglang/srt/models/registry.py import_model_classes": (
        "this test renders every row in vLLM's line format ('[registry.py:78]'); SGLang prints "
        "its own format, which the entry's vLLM logger-location pattern does not match (the "
        "map marks it none since 2026-12-06: a model module skipped wherever the model "
        "registry is imported, as test_parse_phases has it)"
    ),
    # SGLang 0.5.14-0.5.23's radix-tree factory (mem_cache/registry.py, kv_cache since
    # 2026-12-06): the same vLLM-format rendering of a file named registry.py
    "vllm.model_registry sglang/srt/mem_cache/registry.py create_tree_cache": (
        "this test renders every row in vLLM's line format ('[registry.py:108]'), which "
        "vllm.model_registry's logger-location pattern reads; SGLang's own format names no "
        "file (tools/gen_catalogue.py renders SGLang rows in it)"
    ),
    "vllm.model_registry sglang/srt/mem_cache/registry.py default_radix_cache_factory": (
        "as create_tree_cache's: the vLLM-format rendering of an SGLang registry.py line"
    ),
    # vLLM's attention-backend registries (mapped 2026-12-07: their register decorators and
    # plugin registrations run at import or plugin load, launch): a file named registry.py
    "vllm.model_registry vllm/v1/attention/backends/registry.py register": (
        "vllm.model_registry reads any '[registry.py:N]' line as the model registry's; "
        "'Registered new attention backend' is a backend registered at import or by a "
        "plugin (launch), which the map keeps as the earlier phase"
    ),
    "vllm.model_registry vllm/v1/attention/backends/mla/prefill/registry.py register": (
        "as backends/registry.py's: an MLA prefill backend registered at import (launch)"
    ),
    # vLLM-Omni 0.30.0's API server logs the same words in omni_init_app_state once AsyncOmni
    # is built, which with several API servers starts them before the stages' readiness
    # handshake (engine/stage_runtime.py launch_stage_engines): the map keeps launch there,
    # and the earliest-phase rule takes it for every 'Supported tasks' row
    **{
        f"vllm.supported_tasks {where}": (
            "vllm.supported_tasks reads vLLM's API server once its engine is ready (warmup); "
            "vLLM-Omni's omni_init_app_state prints the same words at launch"
        )
        for where in (
            "vllm/entrypoints/launchers/api_server/entry.py build_and_serve",
            "vllm/entrypoints/launchers/run_batch.py build_endpoint_registry",
            "vllm/entrypoints/openai/api_server.py build_and_serve",
            "vllm_omni/entrypoints/openai/api_server.py omni_init_app_state",
        )
    },
    # SGLang Diffusion (merged 2026-12-07): its registry.py files, rendered in vLLM's line
    # format by this test ('[registry.py:N]'), which vllm.model_registry's logger-location
    # pattern reads; SGLang Diffusion's own format ('[MM-DD HH:MM:SS] message') names no file
    **{
        f"vllm.model_registry sglang/multimodal_gen/{where}": (
            "this test renders every row in vLLM's line format; vllm.model_registry reads "
            "any '[registry.py:N]' line as vLLM's model registry, and SGLang Diffusion's "
            "format names no file (as srt's mem_cache/registry.py)"
        )
        for where in (
            "configs/pipelines/registry.py get_pipeline_config_cls_from_name",
            "configs/sample/registry.py get_sampling_param_cls_for_name",
            "registry.py _discover_and_register_configs",
            "registry.py _discover_and_register_pipelines",
            "registry.py _get_config_info",
            "registry.py get_model_info",
            "registry.py register_configs",
            "registry.py register_pipeline",
            "runtime/models/registry.py _discover_and_register_models",
            "runtime/models/registry.py _try_load_model_cls",
        )
    },
    "sglang.diffusion_model_index sglang/multimodal_gen/runtime/utils/hf_diffusers_utils.py "
    "maybe_download_model_index": (
        "the hand-written entry reads 'Downloaded model_index.json for X, pipeline: Y' as the "
        "model's config read (model_config); the map files the registry's pipeline-config "
        "look-up, which calls it from ServerArgs, under launch, the earlier phase"
    ),
    "any.weights_traceback sglang/srt/model_loader/loader.py load_weights_proxy": (
        "a traceback-frame entry ('in load_weights') also matches the words of this run-time "
        "reload notice; frames are what it is for"
    ),
}


def phase_disagreements() -> dict[str, str]:
    """'entry file function' -> 'entry phase != map phase: template' for every row (any
    release, no debug, no raise) whose first matching hand-written entry disagrees."""
    pmap = _mt.load_map()
    cat = load_catalogue()
    order = {p: i for i, p in enumerate(PHASES)}
    # one message printed from several functions: the generator takes the earliest phase
    earliest: dict[str, str] = {}
    for m in load_table():
        ph = pmap.phase_of(m) if m.framework in STARTUP_MODULES and m.kind != "raise" else None
        if ph in order and (m.template not in earliest or order[ph] < order[earliest[m.template]]):
            earliest[m.template] = ph
    out: dict[str, str] = {}
    for m in load_table():
        if m.framework not in STARTUP_MODULES or m.level == "debug" or m.kind == "raise":
            continue
        ph = pmap.phase_of(m)
        if ph is None:
            continue
        ph = earliest.get(m.template, ph) if ph in order else ph
        texts = list(samples(m))
        hays = texts + [_raw_line(m, t) for t in texts]
        if not any(cat.any_message.search(h) for h in hays) and not (
            cat.any_text is not None and any(cat.any_text.search(h) for h in hays)
        ):
            continue
        e = next((e for e in cat.entries if entry_matches(e, m)), None)
        if e is None or e.phase == ph:
            continue
        out[f"{e.id} {m.file} {m.function}"] = f"{e.phase} != {ph}: {m.template[:100]}"
    return out


def test_catalogue_phases_agree_with_the_phase_map() -> None:
    """A catalogue entry marks a message with the phase the map gives its source function
    (generated entries by construction; hand-written ones checked here)."""
    found = phase_disagreements()
    report = "\n".join(f"  {k}: {v}" for k, v in sorted(found.items()))
    unexpected = set(found) - set(KNOWN_PHASE_DISAGREEMENTS)
    stale = set(KNOWN_PHASE_DISAGREEMENTS) - set(found)
    assert not unexpected, "catalogue entries that disagree with the phase map:\n" + report
    assert not stale, f"known disagreements that no longer are: {sorted(stale)}"


GENERATED = ROOT / "diag" / "data" / "phases_generated.yaml"


def test_generated_entries_cite_their_file_and_releases() -> None:
    """tools/gen_catalogue.py's entries (diag/data/phases_generated.yaml, loaded after the
    hand-written ones as notices: they mark phases, never a rank's position) are
    well-formed."""
    from diag.phases import load_catalogue, parse_catalogue

    gen = list(
        parse_catalogue(GENERATED.read_text(encoding="utf-8"), str(GENERATED), position=False)
        .entries
    )
    assert len(gen) > 100
    live = {e.id: e for e in load_catalogue().entries}
    for e in gen:
        assert live[e.id] == e, e.id  # loaded, as a notice
        assert not e.position, e.id
        assert e.kind == "progress" and e.where == "message", e.id
        assert _cited_files(e.source), e.id
        v = r"(?:(?:{}) )?\d+\.\d+\.\d+(?:\.post\d+)?".format("|".join(PLUGINS))
        assert re.fullmatch(rf"{v}(?:, {v})*", e.version), e.id
        assert e.literals, e.id  # the prefilter needs a literal of every entry


# ---------------------------------------------------------------- no false alarms


# (rule id, file, template start) of info / warning / debug messages that an error-level rule
# matches, with the reason that is right (the check fails when one is no longer needed).
KNOWN_ALARMS: dict[tuple[str, str, str], str] = {
    ("dist.init_hang", "torch/distributed/elastic/rendezvous/etcd_rendezvous.py",
     "Rendezvous timeout occurred"): "torch logs its etcd rendezvous timeout at info level",
    ("process.killed", "sglang/srt/entrypoints/engine.py", "Child process unexpectedly failed"):
        "SGLang's SIGCHLD handler logs a child's failure as a warning; the child is gone",
    ("process.engine_core_exited", "vllm/v1/engine/core_client.py",
     "[shutdown] MPClient: engine core exited unexpectedly"):
        "vLLM's MPClient logs its engine core's exit as a warning; the engine core is gone",
    ("python.exception", "sglang/srt/entrypoints/openai/serving_base.py", "DS32EncodingError"):
        "a request's encoding error logged at info by the OpenAI layer: an exception line",
    ("python.exception", "vllm/model_executor/model_loader/neuronx_distributed.py",
     "Exception: "): "the Neuron loader logs its exception as a warning before it falls back",
    ("quant.unsupported", "vllm/model_executor/layers/fused_moe/config.py",
     "MoE DP setup unable to determine quantization scheme"):
        "a warning that the model will not run with DP: the quantization scheme is unsupported",
    ("warmup.failed", "sglang/srt/entrypoints/grpc_server.py", "gRPC warmup request returned"):
        "the gRPC server's warm-up failure, logged as a warning",
    ("warmup.failed", "sglang/srt/entrypoints/http_server.py", "Disaggregation warmup failed"):
        "the PD warm-up failure, logged at info",
    # 2026-12-07's packages
    ("env.version_mismatch", "dynamo/vllm/multimodal_utils/multimodal_embedding_cache_connector.py",
     "DynamoMultimodalEmbeddingCacheConnector requires vLLM"):
        "Dynamo's embedding-cache connector finds an older vLLM than it needs: a mismatch",
    ("process.killed", "vllm_omni/diffusion/stage_diffusion_client.py",
     "StageDiffusionProc was killed by signal"):
        "vLLM-Omni's stage client logs its diffusion process's death by a signal as a warning",
    ("python.exception", "lmcache/v1/multiprocess/posix_shm.py", "atexit: mmap.close() failed"):
        "LMCache's exit-time clean-up logs the exception that failed it as a warning",
    ("python.exception", "lmcache/v1/multiprocess/posix_shm.py", "atexit: shm_unlink("):
        "LMCache's exit-time clean-up logs the exception that failed it as a warning",
}


def false_alarms() -> dict[tuple[str, str, str], str]:
    """Error-level pattern rules that match a rendered info / warning / debug message of any
    extracted release (sglang, vllm, torch): advisory text must not raise an error."""
    table = [m for m in load_table() if m.level in ("info", "tqdm", "warning", "debug")]
    out: dict[tuple[str, str, str], str] = {}
    for r in builtin_rules():
        if r.match is None or r.severity != "error":
            continue
        for m in table:
            if m.framework != "torch" and not r.applies_to(m.framework):
                continue
            lvl = "DEBUG" if m.level == "debug" else _LEVEL.get(m.level, "INFO")
            if r.match.levels and lvl not in r.match.levels:
                continue
            if any(
                _rule_hits(r, r.match.patterns, hay)
                for t in samples(m)
                for hay in (t, _raw_line(m, t))
            ):
                key = next(
                    (k for k in KNOWN_ALARMS if k[0] == r.id and k[1] == m.file
                     and m.template.startswith(k[2])),
                    (r.id, m.file, m.template[:60]),
                )
                out[key] = f"{m.where()}: {m.template[:140]}"
    return out


def test_error_rules_do_not_fire_on_advisory_messages() -> None:
    found = false_alarms()
    report = "\n".join(f"  {k[0]}: {v}" for k, v in sorted(found.items()))
    unexpected = set(found) - set(KNOWN_ALARMS)
    stale = set(KNOWN_ALARMS) - set(found)
    assert not unexpected, "error rules matching info/warning/debug messages:\n" + report
    assert not stale, f"known alarms that no longer fire: {sorted(stale)}"
