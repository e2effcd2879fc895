"""`diag snapshot --k8s`: the pods of one server from `kubectl get pods -o json`.

There is no Kubernetes cluster here: pod selection is tested on `kubectl get pods -o json`
shapes written after the Pod v1 API and the labels the LeaderWorkerSet controller and the
StatefulSet controller set (fixtures/multinode/k8s/), the kubectl command lines are
checked as built, the py-spy output path on a real py-spy dump of a real process, and
kubectl's own failure on an unreachable API server is run for real."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from diag.collect.k8s_fanout import (
    KubectlError,
    debug_argv,
    exec_argv,
    get_pods,
    parse_debug_output,
    pods_from_json,
    select_server,
)
from diag.errors import InputError

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "multinode" / "k8s"


def _pods(name: str, **kw: str) -> list:  # type: ignore[type-arg]
    return pods_from_json(json.loads((FIX / name).read_text()), **kw)


def test_lws_groups_are_servers_and_one_must_be_picked() -> None:
    pods = _pods("lws-two-groups.json")
    with pytest.raises(InputError) as exc:
        select_server(pods)
    assert "lws/sglang-kimi/0, lws/sglang-kimi/1" in exc.value.message
    s = select_server(pods, "0")
    assert s.key == "lws/sglang-kimi/0" and s.others == ("lws/sglang-kimi/1",)
    assert [p.name for p in s.pods] == ["sglang-kimi-0", "sglang-kimi-0-1", "sglang-kimi-0-3"]
    assert [p.index for p in s.pods] == [0, 1, 3]  # the leader first
    assert s.missing == ("worker-index 2 (no pod)",)  # the LWS size annotation says 4
    leader, w1, w3 = s.pods
    # the leader's default-container annotation, not the first container; workers' only one
    assert leader.container == "sglang-leader" and w1.container == "sglang-worker"
    assert leader.running and not w3.running and w3.reason == "CrashLoopBackOff"
    assert leader.node == "gpu-node-00"
    assert select_server(pods, "lws/sglang-kimi/1").pods[0].name == "sglang-kimi-1"


def test_statefulset_ordinals_and_a_pending_pod() -> None:
    s = select_server(_pods("statefulset.json"))
    assert s.key == "statefulset/vllm-mn"
    assert [(p.name, p.index) for p in s.pods] == [("vllm-mn-0", 0), ("vllm-mn-2", 2),
                                                  ("vllm-mn-3", 3)]  # (name suffix: no label)
    assert s.missing == ("ordinal 1 (no pod)",)
    pending = s.pods[-1]
    assert not pending.running and pending.phase == "Pending"
    assert pending.reason == "ContainerCreating"


def test_container_option_wins_and_empty_selection_is_an_input_error() -> None:
    pods = _pods("lws-two-groups.json", container="metrics-sidecar")
    assert {p.container for p in pods} == {"metrics-sidecar"}
    with pytest.raises(InputError):
        select_server([])
    with pytest.raises(InputError):
        pods_from_json(["not", "a", "list"])


def test_kubectl_command_lines() -> None:
    pod = select_server(_pods("lws-two-groups.json"), "0").pods[0]
    assert exec_argv(pod, "diag snapshot --json", context="prod") == [
        "kubectl", "--context", "prod", "exec", "-i", "-n", "serving", "sglang-kimi-0",
        "-c", "sglang-leader", "--", "sh", "-c", "diag snapshot --json"]
    argv = debug_argv(pod, [41, 42], "ghcr.io/x/pyspy:1", name="diag-pyspy-abc")
    assert argv[:12] == ["kubectl", "debug", "-n", "serving", "sglang-kimi-0",
                         "--image=ghcr.io/x/pyspy:1", "--profile=general",
                         "--target=sglang-leader", "--container=diag-pyspy-abc", "--quiet",
                         "--attach=true", "--"]
    assert "py-spy dump --json --pid 41" in argv[-1] and "--pid 42" in argv[-1]


@pytest.mark.live
@pytest.mark.skipif(shutil.which("py-spy") is None and not Path(sys.executable).with_name(
    "py-spy").exists(), reason="py-spy not installed")
def test_debug_output_of_a_real_pyspy_dump(tmp_path: Path) -> None:
    """What the ephemeral container prints (the loop of debug_argv, run here by sh on a
    real sleeping process) parses back to py-spy's JSON per pid."""
    from diag.collect import stackapi

    child = subprocess.Popen([sys.executable, "-c", "import time\ndef waiting():\n"
                              "    time.sleep(60)\nwaiting()"])
    try:
        time.sleep(1.0)
        spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
        loop = debug_argv(select_server(_pods("statefulset.json")).pods[0], [child.pid],
                          "img")[-1].replace("py-spy", spy)
        r = subprocess.run(["sh", "-c", loop], capture_output=True, text=True, timeout=60)
        dumps = parse_debug_output(r.stdout)
        if not dumps:
            pytest.skip(f"py-spy could not attach here: {r.stdout[-300:]} {r.stderr[-300:]}")
        sp = stackapi.parse(dumps[child.pid], pid=child.pid, title=None, mode="python")
        assert any(f.name == "waiting" for t in sp.threads for f in t.frames)
    finally:
        child.kill()
        child.wait()


def test_kubectl_failure_is_one_line(tmp_path: Path) -> None:
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl not installed")
    cfg = tmp_path / "kubeconfig"
    cfg.write_text(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: none\n  cluster:\n"
        "    server: https://127.0.0.1:1\ncontexts:\n- name: none\n  context:\n"
        "    cluster: none\n    user: none\ncurrent-context: none\nusers:\n- name: none\n"
        "  user: {}\n")
    old = os.environ.get("KUBECONFIG")
    os.environ["KUBECONFIG"] = str(cfg)
    try:
        with pytest.raises(KubectlError) as exc:
            get_pods("serving", "app=x", timeout_s=30)
    finally:
        if old is None:
            del os.environ["KUBECONFIG"]
        else:
            os.environ["KUBECONFIG"] = old
    assert "kubectl get pods failed" in exc.value.message and "\n" not in exc.value.message


def test_cli_usage_errors_are_one_line() -> None:
    r = subprocess.run([sys.executable, "-m", "diag", "snapshot", "--k8s", "-l", "app=x"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--k8s needs -n NAMESPACE and -l SELECTOR" in r.stderr
    assert "Traceback" not in r.stderr
