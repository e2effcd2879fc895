"""Secrets planted in a real running process (argv, environment) and in its log: not one
of them may reach any byte of the bundle, the printed summary, ``diag analyze BUNDLE
--json`` or the Markdown report; and an independent scanner (detect-secrets) finds nothing
in the bundle's members (issue 12)."""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from live.harness import SLEEPER, ready_child

from diag.redact import Redactor

# Built from parts so that no scanner flags this file. Keys say where each is planted.
_R = "Qx7LmRtYbNcV2dWeZfAgBh9CjDkEs3Fp"  # random-looking filler
S: dict[str, str] = {
    "log_hf": "hf_" + "QxLmRtYbNcVdWeZfAgBhCjDkEsFpGhJk",
    "log_hf_wrapped": "hf_" + "WrApPeDtOkEnAbCdEfGhIjKlMnOpQrSt",
    "log_hf_wrapped_short": "hf_" + "ShOrTaBcDeFgHiJkLmNoPqRsTuVwXyZa",
    "log_openai_proj": "sk-" + "proj-Zx81Tq0Lw2Ve7Rn4Ym5Ku6Ji3Hg",
    "log_openai_legacy": "sk-" + "Aa1Bb2Cc3Dd4Ee5Ff6Gg7Hh8Ii9Jj0KkLlMmNnOoPp",
    "log_anthropic": "sk-ant-" + "api03-Pm2Kx8Lq7Rz3Nw9Tv5Yb1Xc4",
    "log_aws_id": "AKIA" + "QWERTYUIOPASDFGH",
    "log_aws_sts_id": "ASIA" + "ZXCVBNMLKJHGFDSA",
    "log_aws_secret_bare": "wJalrXUtnFEMI" + "K7MDENGbPxRfiCYzz9aB1c2D3eF",
    "log_aws_secret_named": "Zk9Lm8Nb7Vc6" + "Xz5Aq4Ws3Ed2Rf1Tg0Yh9UjIkOl",
    "log_ghp": "ghp_" + "Ab12Cd34Ef56Gh78Ij90Kl12Mn34Op56Qr78",
    "log_gho": "gho_" + "Zy98Xw76Vu54Ts32Rq10Po98Nm76Lk54Ji32",
    "log_ghs": "ghs_" + "Mn12Bv34Cx56Za78Lk90Jh12Gf34Ds56Aq78",
    "log_ghu": "ghu_" + "Qa12Ws34Ed56Rf78Tg90Yh12Uj34Ik56Ol78",
    "log_github_pat": "github_pat_" + "11ABCDE0Yq_Zr8Kx2Lm4Nv6Pb8Qd0Sf2Th4Uj6",
    "log_google": "AIza" + "SyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q",
    "log_gcp_oauth": "ya29." + "a0AfH6SMBx7Yq2Lp9Kd3Mz8Vn1Rt5Wc4Gj6Hs0",
    "log_slack_bot": "xoxb-" + "123456789012-1234567890123-AbCdEfGhIjKlMnOpQrSt",
    "log_slack_user": "xoxp-" + "210987654321-3210987654321-ZyXwVuTsRqPoNmLkJiHg",
    "log_jwt": "eyJhbGciOiJIUzI1NiJ9" + ".eyJzdWIiOiJ1c2VyMTIzIn0.c2lnbmF0dXJlX3NpZ25hdHVyZQ",
    "log_pem_1": "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTU" + "t9Us8cKjPemBody",
    "log_pem_2": "Kx8Lq7Rz3Nw9Tv5Yb1Xc4Pm2Kx8Lq7Rz3Nw9Tv5Yb1Xc4Pm2" + "SecondPemLine",
    "log_bearer": "eyBearerTok" + "3nValue77xQ",
    "log_basic": "dXNlcjpz" + "ZWNyZXQ9OQ",
    "log_gh_auth_token": "tokAuthHdr" + "Value-2211",
    "log_url_pw": "Redis" + "Pw0rdSecret",
    "log_url_pw_nouser": "NoUser" + "RedisPw-8899",
    "log_pg_pw": "Pg" + "Passw0rd-5544",
    "log_flag_api_key": "flagApi" + "KeyValue-1122",
    "log_flag_api_key_eq": "flagApiEq" + "Value-3344",
    "log_flag_hf_token": "hf_" + "FlagTokenValueAbCdEfGhIjKlMn99",
    "log_flag_password": "flag" + "Passw0rd-7788",
    "log_server_args_key": "adm-" + "ServerKey-91xx",
    "log_dict_admin_key": "admin" + "KeyValue-5521",
    "log_json_token": "json" + "TokenValue-4411",
    "log_env_hf": "hf_" + "EnvLineTokenAbCdEfGhIjKlMnOp12",
    "log_env_openai": "envOpenai" + "KeyValue-6655",
    "log_azure_sas": "sv2Xq9Lm3Kp8Rt7Yb" + "6Nc5Vd4We%2BZf3Ag%3D",
    "log_npm": "npm_" + "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
    "log_password_field": "pwField" + "Value-9911",
    "log_secret_yaml": "yaml" + "SecretValue-1357",
    "log_client_secret": "client" + "SecretValue-2468",
    "log_x_api_key": "xApi" + "KeyHeader-8642",
    "log_cookie": "sessCookie" + "Value-9753",
    "log_gitlab": "glpat-" + "Xy12Zw34Ab56Cd78Ef90",
    "log_stripe": "sk_" + "live_" + "4eC39HqLyjWDarjtT1zdp7dc",
    "log_query_password": "query" + "Passw0rd-1470",
    "log_export_hf": "hf_" + "ExportedTokenAbCdEfGhIjKlMnO34",
    "log_x_api_key_json": "sk-ant-" + "api03-JsonHeaderKeyAbCdEf12",
    "argv_api_key": "argv" + "ApiKeyValue-7781",
    "argv_hf_token": "hf_" + "ArgvTokenValueZZ9988776655aa",
    "argv_password": "argv" + "Passw0rdValue-33",
    "argv_token": "argv" + "TokenPlain-4455",
    "argv_url_pw": "argv" + "UrlSecret-6677",
    "argv_env_style": "argvEnv" + "OpenaiKey-1199",
    "argv_sas": "argvSas9Lm3Kp8Rt7Yb" + "6Nc5Vd4We%2BZf",
    "argv_positional_hf": "hf_" + "PositionalTokenAbCdEfGhIj5678",
    "env_hf_token": "hf_" + "ChildEnvTokenAbCdEfGh123456",
    "env_vllm_api_key": "child" + "VllmApiKey-8899",
    "env_sglang_password": "child" + "SglangPw-1212",
    "env_hf_auth": "ChildHfAuth" + "Zq8Xw7Ce6Vr5Bt4",
    "env_hf_endpoint_pw": "child" + "MirrorPw-3434",
    "env_innocent_name": _R,
    "env_bearer_header": "child" + "HeaderBearer-5656",
    "env_nccl_sas": "childSas9Lm3Kp8Rt7" + "Yb6Nc5Vd4",
    "own_torch_credential": "own" + "TorchCredential-7878",
    "own_cuda_auth": "own" + "CudaBearerTok-9090",
}
_MASK = r"<redacted:[a-z_0-9]+>"


def _log_lines() -> list[str]:
    t = "[2025-03-09 00:40:0{}] "
    hf_w = S["log_hf_wrapped"]
    hf_s = S["log_hf_wrapped_short"]
    lines = [
        t.format(0) + "server_args=ServerArgs(model_path='/models/x', tp_size=2, "
        f"api_key='{S['log_server_args_key']}', hf_token=None, watchdog_timeout=300)",
        t.format(0) + "server_args={'model_path': '/models/x', "
        f"'admin_api_key': '{S['log_dict_admin_key']}', 'token': '{S['log_json_token']}'}}",
        t.format(1) + f"Downloading with {S['log_hf']}",
        # a hard wrap cutting tokens: the cut falls 20 and 6 characters into them
        t.format(1) + "pasted: use " + hf_w[:23],
        hf_w[23:] + " to pull the weights",
        t.format(1) + "the token is " + hf_s[:9],
        hf_s[9:],
        f"OpenAI client {S['log_openai_proj']} legacy {S['log_openai_legacy']}",
        f"Anthropic with {S['log_anthropic']}",
        f"boto3 {S['log_aws_id']} {S['log_aws_sts_id']}",
        f"aws configure set: {S['log_aws_secret_bare']}",
        f"aws_secret_access_key={S['log_aws_secret_named']}",
        f"git remote https://{S['log_ghp']}@github.com/x/y {S['log_gho']}",
        f"GH tokens {S['log_ghs']} {S['log_ghu']} pat {S['log_github_pat']}",
        f"google key {S['log_google']} oauth {S['log_gcp_oauth']}",
        f"slack {S['log_slack_bot']} {S['log_slack_user']}",
        t.format(2) + f"cookie jwt={S['log_jwt']}",
        "-----BEGIN RSA PRIVATE KEY-----",
        S["log_pem_1"],
        S["log_pem_2"],
        "-----END RSA PRIVATE KEY-----",
        f"curl -H 'Authorization: Bearer {S['log_bearer']}' http://127.0.0.1:30000/health",
        f"proxy header: Authorization: Basic {S['log_basic']}",
        f"github api Authorization: token {S['log_gh_auth_token']}",
        f"store=redis://svc:{S['log_url_pw']}@cache:6379 and redis://:{S['log_url_pw_nouser']}@c2",
        f"db postgres://admin:{S['log_pg_pw']}@db.internal:5432/x",
        f"launch: --api-key {S['log_flag_api_key']} --api-key={S['log_flag_api_key_eq']}",
        f"launch: --hf-token {S['log_flag_hf_token']} --password {S['log_flag_password']}",
        f"env: HF_TOKEN={S['log_env_hf']} OPENAI_API_KEY={S['log_env_openai']}",
        f"blob https://acct.blob.core.windows.net/c/x?sv=2022-11-02&sp=r&sig={S['log_azure_sas']}",
        f"npm login with {S['log_npm']}",
        f"db password={S['log_password_field']} secret: {S['log_secret_yaml']}",
        f'oauth client_secret="{S["log_client_secret"]}" x-api-key: {S["log_x_api_key"]}',
        f"Cookie: session={S['log_cookie']}",
        f"gitlab {S['log_gitlab']} stripe {S['log_stripe']}",
        f"GET /login?user=a&password={S['log_query_password']}",
        f"+ export HF_TOKEN={S['log_export_hf']}",
        f'headers {{"x-api-key": "{S["log_x_api_key_json"]}"}}',
        t.format(3) + "Load weight begin. avail mem=78.81 GB",
        t.format(4) + "RuntimeError: CUDA out of memory. Tried to allocate 2 GiB",
    ]
    return lines


@pytest.fixture
def child(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A real process with secrets in its argv and its environment; always reaped."""
    script = tmp_path / "launch_server.py"
    script.write_text(SLEEPER)
    argv = [
        sys.executable, str(script),
        "--model-path", "/models/x",
        "--api-key", S["argv_api_key"],
        f"--hf-token={S['argv_hf_token']}",
        "--password", S["argv_password"],
        "--token", S["argv_token"],
        "--weights-url", f"https://loader:{S['argv_url_pw']}@weights.internal/x",
        f"OPENAI_API_KEY={S['argv_env_style']}",
        f"https://acct.blob.core.windows.net/c?sv=1&sig={S['argv_sas']}",
        S["argv_positional_hf"],
        "--tp", "2",
    ]  # fmt: skip
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HF_TOKEN": S["env_hf_token"],
        "VLLM_API_KEY": S["env_vllm_api_key"],
        "SGLANG_ADMIN_PASSWORD": S["env_sglang_password"],
        "HF_AUTH": S["env_hf_auth"],
        "HF_ENDPOINT": f"https://mirror:{S['env_hf_endpoint_pw']}@hf-mirror.internal",
        "VLLM_RUN_ID": S["env_innocent_name"],
        "SGLANG_EXTRA_HEADER": f"Authorization: Bearer {S['env_bearer_header']}",
        "NCCL_STORE_URL": f"https://x.blob.core.windows.net/s?sig={S['env_nccl_sas']}",
        "NCCL_DEBUG": "INFO",
        "CUDA_VISIBLE_DEVICES": "0,1",
    }
    with ready_child(argv, env=env, stdin=subprocess.DEVNULL) as proc:
        yield proc


def _diag(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "diag", *args],
        capture_output=True, text=True, timeout=300, env=env, check=False,
    )  # fmt: skip


def _leaks(text: str | bytes) -> list[str]:
    data = text.encode() if isinstance(text, str) else text
    return [k for k, v in S.items() if v.encode() in data]


def _detect_secrets(folder: Path) -> list[str]:
    from detect_secrets import SecretsCollection
    from detect_secrets.settings import default_settings

    found: list[str] = []
    with default_settings():
        collection = SecretsCollection()
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            collection.scan_file(str(path))
        for filename, secret in collection:
            lines = Path(filename).read_text(errors="replace").splitlines()
            line = lines[secret.line_number - 1]
            after = lines[secret.line_number : secret.line_number + 1]
            # What the scanner flags by design and is no secret: the manifest's member
            # checksums, a mask itself (``<redacted:kind>`` has a colon: "user:pass@"), and
            # a PEM header whose body is masked.
            if secret.type == "Hex High Entropy String" and line.strip().startswith('"sha256"'):
                continue
            value = secret.secret_value or ""
            if "<redacted:" in value or any(value in m for m in re.findall(_MASK, line)):
                continue
            if secret.type == "Private Key" and after == ["<redacted:private_key>"]:
                continue
            found.append(f"{Path(filename).name}:{secret.line_number}: {secret.type}: {line}")
    return found


def test_redactor_masks_each_log_form_alone() -> None:
    """Each form in its own redactor pass (a form that only the others' context masked
    would hide here)."""
    lines = _log_lines()
    r = Redactor()
    out = "\n".join(r.lines(lines))
    assert _leaks(out) == []
    assert r.total >= 45


@pytest.mark.live
def test_planted_secrets_reach_no_byte_of_the_bundle(
    tmp_path: Path, child: subprocess.Popen[bytes]
) -> None:
    assert len(S) >= 60
    log = tmp_path / "server.log"
    log.write_text("\n".join(_log_lines()) + "\n", encoding="utf-8")
    out = tmp_path / "hang.tar.gz"
    env = dict(os.environ)
    env["TORCH_HUB_CREDENTIAL"] = S["own_torch_credential"]
    env["CUDA_PROXY_AUTH"] = f"Bearer {S['own_cuda_auth']}"
    res = _diag("bundle", "--log", str(log), "--pid", str(child.pid), "--out", str(out), env=env)
    assert res.returncode in (0, 3), res.stderr
    assert _leaks(res.stdout + res.stderr) == []

    everything = gzip.decompress(out.read_bytes())  # tar headers and every member
    assert _leaks(everything) == []
    folder = tmp_path / "members"
    folder.mkdir()
    with tarfile.open(out, "r:gz") as tar:
        names = tar.getnames()
        tar.extractall(folder, filter="data")
    # the secrets really went in: the child's argv and env were collected
    env_json = json.loads((folder / "env.json").read_text())
    (proc,) = [p for p in env_json["processes"] if p["pid"] == child.pid]
    assert proc["env"]["HF_AUTH"] == proc["env"]["VLLM_RUN_ID"] == "<redacted:env>"
    assert proc["env"]["NCCL_DEBUG"] == "INFO"
    assert "logs/server.log" in names and "analysis.json" in names
    assert _detect_secrets(folder) == []

    for fmt in ("--json", "--format=markdown"):
        again = _diag("analyze", str(out), fmt)
        assert again.returncode == 0, again.stderr
        assert _leaks(again.stdout + again.stderr) == []
    assert "cuda.oom" in _diag("analyze", str(out), "--json").stdout


@pytest.mark.parametrize(
    "line",
    [
        "pip install hf_transfer",
        "commit 3f2c1e9a8b7d6c5e4f3a2b1c0d9e8f7a6b5c4d3e",
        "loading shard model-00001-of-00004.safetensors",
        "new fill batch. #cached_token: 478. #new_token: 254.",
    ],
)
def test_lookalikes_stay(line: str) -> None:
    assert Redactor().text(line) == line


def test_env_values_by_shape_not_only_by_name() -> None:
    r = Redactor()
    out = r.env(
        {
            "VLLM_RUN_ID": _R,
            "HF_AUTH": "short-Pw",
            "VLLM_MODEL": "meta-llama/Llama-3.1-8B-Instruct",
            "HF_HOME": "/root/.cache/huggingface",
            "CUDA_VISIBLE_DEVICES": "0,1,2,3",
            "VLLM_ATTENTION_BACKEND": "FLASH_ATTN",
        }
    )
    assert out["VLLM_RUN_ID"] == out["HF_AUTH"] == "<redacted:env>"
    assert out["VLLM_MODEL"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert out["HF_HOME"] == "/root/.cache/huggingface"
    assert out["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"
    assert out["VLLM_ATTENTION_BACKEND"] == "FLASH_ATTN"


def test_wrapped_token_in_one_text() -> None:
    tok = S["log_hf_wrapped"]
    out = Redactor().text(f"use {tok[:15]}\n{tok[15:]} now")
    assert tok[:15] not in out and tok[15:] not in out and out.endswith(" now")


def test_exception_names_are_not_secret_fields() -> None:
    for line in (
        "> [2025-11-06T02:10:00.702Z] KeyError: 'lm_head.weight'",
        "    next_token_ids = batch.sample(output.next_token_logits)",
    ):
        assert Redactor().text(line) == line
    assert "<redacted" in Redactor().text("api_key: 'abcDEF123'")
