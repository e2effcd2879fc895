"""A real vLLM 0.32 (CPU) server started with secrets in its command line and environment:
`diag bundle` snapshots it and bundles its log, and no secret survives anywhere in the
bundle, while the analysis still shows a healthy TP=2 start.

(vLLM 0.32 masks the key in its own ``non-default args`` line, ``'api_key': '***'``; the
secrets that reach diag are in the processes' command lines and environments.)
"""

from __future__ import annotations

import gzip
import json
import tarfile
from pathlib import Path

import pytest
from realserver import VllmStarter, run_diag

pytestmark = pytest.mark.real_server

API_KEY = "sk-" + "realVllmApiKey0123456789abcdef"
ENV = {
    "HF_TOKEN": "hf_" + "RealServerEnvTokenAbCdEf123456",
    "NCCL_IB_PASSWORD": "real" + "NcclPw-2468",
    "TORCH_HUB_AUTH": "Bearer " + "realTorchBearer-1357",
}


def test_real_server_secrets_never_reach_the_bundle(
    vllm_starter: VllmStarter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)  # the server's environment copies ours
    server = vllm_starter.start("vllm-cpu-tp2-eager-api-key", extra=["--api-key", API_KEY])
    # (--api-key guards /v1/models, so readiness is read from the log, not polled)
    server.wait_for_log(r"Application startup complete", timeout=300)
    cmdline = Path(f"/proc/{server.pid}/cmdline").read_bytes().split(b"\0")
    assert API_KEY.encode() in cmdline  # what the snapshot and env.json read

    out = tmp_path / "real.tar.gz"
    done = run_diag(
        "bundle", "--log", str(server.log_path), "--pid", str(server.pid), "--out", str(out),
        timeout=240,
    )
    assert done.returncode in (0, 3), done.stderr[-3000:]  # 3: a partial snapshot
    assert API_KEY not in done.stdout + done.stderr

    everything = gzip.decompress(out.read_bytes())
    secrets = [API_KEY, *ENV.values(), "realTorchBearer-1357"]
    assert [s for s in secrets if s.encode() in everything] == []
    # the secret part of the bearer value too, and not just the prefix
    assert b"RealServerEnvToken" not in everything

    with tarfile.open(out) as tar:
        members = {
            m.name: f.read() for m in tar.getmembers() if (f := tar.extractfile(m)) is not None
        }
    manifest = json.loads(members["manifest.json"])
    assert manifest["redactions"].get("field", 0) >= 1  # the logged api_key list
    assert manifest["redactions"].get("flag", 0) >= 1  # --api-key in the command lines
    assert manifest["redactions"].get("env", 0) >= 1
    env = json.loads(members["env.json"])
    (launcher,) = [p for p in env["processes"] if p["pid"] == server.pid]
    i = launcher["cmdline"].index("--api-key")
    assert launcher["cmdline"][i + 1] == "<redacted:flag>"
    redacted = [p for p in env["processes"] if isinstance(p.get("env"), dict)]
    assert redacted, env["processes"]
    assert all(p["env"].get("HF_TOKEN") in (None, "<redacted:env>") for p in redacted)
    assert any(p["env"].get("HF_TOKEN") == "<redacted:env>" for p in redacted)
    analysis = json.loads(members["analysis.json"])
    assert analysis["framework"] == "vllm"
    ranks = {r["id"]: r for r in analysis["ranks"]}
    assert set(ranks) == {"TP0", "TP1"}
    assert analysis["last_phase"] in ("listening", "serving"), [
        (r["id"], r["last_phase"]) for r in ranks.values()
    ]

    again = run_diag("analyze", "--json", str(out))
    assert again.returncode in (0, 1), again.stderr[-3000:]
    original = run_diag("analyze", "--json", str(server.log_path))
    ids = sorted(f["id"] for f in json.loads(original.stdout)["findings"])
    assert sorted(f["id"] for f in json.loads(again.stdout)["findings"]) == ids
