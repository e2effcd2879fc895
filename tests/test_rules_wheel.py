"""The built wheel carries the rule library (hatch force-include of rules/ as
diag/rule_library), and an installed diag finds it through importlib.resources."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from diag.rules.loader import builtin_rules

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.live


def _run(args: list[str], cwd: Path, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=300, **kw)  # type: ignore[call-overload, no-any-return]


def test_wheel_installed_in_a_fresh_venv_finds_its_rules(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    if importlib.util.find_spec("hatchling") is not None:
        cmd = [sys.executable, "-m", "hatchling", "build", "-t", "wheel", "-d", str(dist)]
    else:  # a venv without the build backend: pip builds it in isolation
        cmd = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), "."]
    build = _run(cmd, REPO)
    assert build.returncode == 0, build.stderr
    (wheel,) = dist.glob("diag-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
    packed = {n.rsplit("/", 1)[-1] for n in names if n.startswith("diag/rule_library/")}
    assert "cuda.oom.yaml" in packed and "startup.stalled.yaml" in packed

    venv = tmp_path / "venv"
    made = _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp_path)
    assert made.returncode == 0, made.stderr
    vpy = venv / "bin" / "python"
    site = _run(
        [str(vpy), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp_path
    ).stdout.strip()
    # the wheel itself, installed by pip; its dependencies borrowed from the test venv
    install = _run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", site, str(wheel)],
        tmp_path,
    )
    assert install.returncode == 0, install.stderr
    deps = sysconfig.get_paths()["purelib"]
    Path(site, "borrowed_deps.pth").write_text(deps + "\n")

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    probe = _run(
        [
            str(vpy),
            "-c",
            "import diag, diag.rules.loader as l; print(diag.__file__); "
            "print(l.builtin_rules_dir()); print(len(l.builtin_rules()))",
        ],
        tmp_path,
        env=env,
    )
    assert probe.returncode == 0, probe.stderr
    module, folder, count = probe.stdout.split()
    assert module.startswith(site), module
    assert folder == str(Path(site) / "diag" / "rule_library")
    assert int(count) == len(builtin_rules())

    examples = _run([str(vpy), "-m", "diag", "rules", "test"], tmp_path, env=env)
    assert examples.returncode == 0, examples.stdout + examples.stderr
    assert " 0 failed" in examples.stdout
