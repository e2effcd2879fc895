"""No secret leaves the host: planted in a log, in diag's environment, and in the command
line and environment of a real running process that `diag bundle --pid` snapshots; none
of them appears anywhere in the decompressed bundle, while the evidence is still there."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from live.harness import SLEEPER, ready_child

from diag.analyze import analyze
from diag.cli import main

ROOT = Path(__file__).resolve().parents[1]
CASE = ROOT / "fixtures" / "real" / "sglang" / "watchdog-timeout-sigquit-killed" / "log.txt"

# One value per kind; every one must vanish. Built from parts so no scanner flags this file.
S = {
    "hf_log": "hf_" + "QxLmRtYbNcVdWeZfAgBhCjDkEs12",
    "openai_log": "sk-" + "proj-Zx81Tq0Lw2Ve7Rn4Ym5Ku6Ji3Hg",
    "anthropic_log": "sk-ant-" + "api03-Pm2Kx8Lq7Rz3Nw9Tv5Yb",
    "aws_id_log": "AKIA" + "QWERTYUIOPASDFGH",
    "aws_secret_log": "wJalrXUtnFEMI" + "K7MDENGbPxRfiCYzz9",
    "ghp_log": "ghp_" + "Ab12Cd34Ef56Gh78Ij90Kl12Mn34Op56Qr78",
    "github_pat_log": "github_pat_" + "11ABCDE0Yq_Zr8Kx2Lm4Nv6Pb8Qd0Sf2Th4Uj6",
    "bearer_log": "eyBearerTok" + "3nValue77x",
    "basic_log": "dXNlcjpz" + "ZWNyZXQ9OQ",
    "urlpw_evidence": "Redis" + "Pw0rdSecret",
    "server_api_key": "adm-" + "ServerKey-91xx",
    "server_admin_key": "admin" + "KeyValue-5521",
    "dict_token": "tok" + "ValueInDict-4411",
    "jwt_log": "eyJhbGciOiJIUzI1NiJ9" + ".eyJzdWIiOiJ1c2VyMTIzIn0.c2lnbmF0dXJlX3NpZ25hdHVyZQ",
    "argv_api_key": "argv" + "ApiKeyValue-7781",
    "argv_hf_token": "hf_" + "ArgvTokenValueZZ9988776655",
    "argv_password": "argv" + "Passw0rdValue-33",
    "argv_token": "argv" + "TokenPlain-4455",
    "argv_url_pw": "argv" + "UrlSecret-6677",
    "child_hf_token": "hf_" + "ChildEnvTokenAbCdEfGh123456",
    "child_vllm_api_key": "child" + "VllmApiKey-8899",
    "child_sglang_password": "child" + "SglangPw-1212",
    "child_hf_endpoint_pw": "child" + "MirrorPw-3434",
    "child_nccl_auth": "child" + "NcclBearer-5656",
    "own_torch_credential": "own" + "TorchCredential-7878",
    "own_cuda_bearer": "own" + "CudaBearerTok-9090",
    "pem_body": "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTU" + "t9Us8cKjPemBody",
}


def _log(tmp_path: Path) -> Path:
    lines = CASE.read_text(encoding="utf-8").splitlines(keepends=True)
    planted = [
        "[2025-03-09 00:40:00] server_args=ServerArgs(model_path='/models/x', tp_size=8, "
        f"api_key='{S['server_api_key']}', hf_token=None, watchdog_timeout=300)\n",
        "[2025-03-09 00:40:00] server_args={'model_path': '/models/x', "
        f"'admin_api_key': '{S['server_admin_key']}', 'token': '{S['dict_token']}'}}\n",
        f"[2025-03-09 00:40:01] Downloading with token {S['hf_log']}\n",
        f"OpenAI client made with {S['openai_log']}; Anthropic with {S['anthropic_log']}\n",
        f"boto3 session for {S['aws_id_log']} aws_secret_access_key={S['aws_secret_log']}\n",
        f"git clone https://{S['ghp_log']}@github.com/x/y ; GH={S['github_pat_log']}\n",
        f"curl -H 'Authorization: Bearer {S['bearer_log']}' http://127.0.0.1:30000/health\n",
        f"proxy header: Authorization: Basic {S['basic_log']}\n",
        f"[2025-03-09 00:40:02] cookie jwt={S['jwt_log']}\n",
        "-----BEGIN RSA PRIVATE KEY-----\n",
        f"{S['pem_body']}\n",
        "-----END RSA PRIVATE KEY-----\n",
    ]
    # An evidence line that itself carries a secret (the finding must survive, masked).
    evidence = (
        "[2025-03-09 00:57:20] Received sigquit from a child proces. It usually means the "
        f"child failed. store=redis://svc:{S['urlpw_evidence']}@cache:6379\n"
    )
    body = planted + [evidence if "Received sigquit" in ln else ln for ln in lines]
    path = tmp_path / "server.log"
    path.write_text("".join(body), encoding="utf-8")
    return path


@pytest.fixture
def child(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A real process with secrets in its argv and its environment; always reaped."""
    script = tmp_path / "launch_server.py"
    script.write_text(SLEEPER)
    argv = [
        sys.executable,
        str(script),
        "--model-path", "/models/x",
        "--api-key", S["argv_api_key"],
        f"--hf-token={S['argv_hf_token']}",
        "--password", S["argv_password"],
        "--token", S["argv_token"],
        "--weights-url", f"https://loader:{S['argv_url_pw']}@weights.internal/x",
        "--tp", "2",
    ]
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HF_TOKEN": S["child_hf_token"],
        "VLLM_API_KEY": S["child_vllm_api_key"],
        "SGLANG_ADMIN_PASSWORD": S["child_sglang_password"],
        "HF_ENDPOINT": f"https://mirror:{S['child_hf_endpoint_pw']}@hf-mirror.internal",
        "NCCL_PROXY_HEADER": f"Authorization: Bearer {S['child_nccl_auth']}",
        "NCCL_DEBUG": "INFO",
        "CUDA_VISIBLE_DEVICES": "0,1",
    }
    with ready_child(argv, env=env, stdin=subprocess.DEVNULL) as proc:
        yield proc


def _members(bundle: Path) -> dict[str, bytes]:
    with tarfile.open(bundle, "r:gz") as tar:
        return {
            m.name: f.read() for m in tar.getmembers() if (f := tar.extractfile(m)) is not None
        }


@pytest.mark.live
def test_no_secret_in_bundle(
    tmp_path: Path,
    child: subprocess.Popen[bytes],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert len(S) >= 20
    log = _log(tmp_path)
    monkeypatch.setenv("TORCH_HUB_CREDENTIAL", S["own_torch_credential"])
    monkeypatch.setenv("CUDA_PROXY_AUTH", f"Bearer {S['own_cuda_bearer']}")
    out = tmp_path / "hang.tar.gz"
    monkeypatch.setattr(
        sys, "argv", ["diag", "bundle", "--log", str(log), "--pid", str(child.pid),
                      "--out", str(out)],
    )
    with pytest.raises(SystemExit) as exc:
        main()
    assert exc.value.code in (0, None, 3), capsys.readouterr().err  # 3: partial snapshot
    printed = capsys.readouterr()

    # Every byte of the bundle, decompressed: tar headers and every member.
    everything = gzip.decompress(out.read_bytes())
    members = _members(out)
    leaked = [k for k, v in S.items() if v.encode() in everything]
    assert leaked == []
    for name, data in members.items():
        assert not [k for k, v in S.items() if v.encode() in data], name
    assert not [k for k, v in S.items() if v in printed.out + printed.err]

    # The secrets really went in: the child was snapshotted, its argv and env collected.
    assert {"manifest.json", "env.json", "snapshot.json", "analysis.json", "report.md",
            "logs/server.log"} <= set(members)
    snapshot = json.loads(members["snapshot.json"])
    assert str(child.pid) in json.dumps(snapshot)
    env = json.loads(members["env.json"])
    (proc,) = [p for p in env["processes"] if p["pid"] == child.pid]
    assert proc["cmdline"][4:6] == ["--api-key", "<redacted:flag>"]
    assert proc["env"]["HF_TOKEN"] == "<redacted:env>"
    assert proc["env"]["NCCL_DEBUG"] == "INFO"
    assert proc["env"]["HF_ENDPOINT"] == "https://mirror:<redacted:url_password>@hf-mirror.internal"
    assert env["env"]["TORCH_HUB_CREDENTIAL"] == "<redacted:env>"
    manifest = json.loads(members["manifest.json"])
    counts = manifest["redactions"]
    # (CUDA_PROXY_AUTH's "Bearer ..." is masked whole as an env var: its name has AUTH)
    for kind in ("hf_token", "openai_key", "anthropic_key", "aws_access_key", "github_token",
                 "authorization", "url_password", "flag", "env", "field", "jwt",
                 "private_key"):
        assert counts.get(kind, 0) >= 1, kind
    assert sum(counts.values()) >= len(S)

    # The evidence is still there, at its line, with the secret masked.
    original = analyze([log])
    killed = [f for f in original.findings if f.id == "process.killed"]
    assert killed
    log_text = members["logs/server.log"].decode()
    log_lines = log_text.splitlines()
    analysis_text = members["analysis.json"].decode()
    for finding in original.findings:
        for ev in finding.evidence:
            kept = log_lines[ev.line - 1]
            assert kept.split("] ", 1)[-1][:40] in ev.text or ev.text[:40] in kept
            assert finding.id in analysis_text
    assert "Received sigquit from a child proces." in log_text
    assert "store=redis://svc:<redacted:url_password>@cache:6379" in log_text
    assert "Watchdog timeout (self.watchdog_timeout=300)" in log_text
    again = analyze([out])
    assert [f.id for f in again.findings] == [f.id for f in original.findings]
