"""Copy one GPU run (the folder ``drive.py --out`` wrote) into ``fixtures/gpu/<name>``.

Each scenario's fake /proc tree (hundreds of small files and socket links) is packed into
``proc.tar.gz``; the readiness files are dropped; everything else is kept as written.

    python tests/gpu/save_fixture.py /tmp/gpu1/gpu-run h200x1 [--log drive.log]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tarfile
from pathlib import Path

__all__ = ["main"]

REPO = Path(__file__).resolve().parent.parent.parent


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run", type=Path)
    p.add_argument("name")
    p.add_argument("--log", type=Path, help="what the device run printed")
    args = p.parse_args(argv)
    dest = REPO / "fixtures" / "gpu" / args.name
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(args.run, dest, symlinks=True)
    for scenario in sorted(d for d in dest.iterdir() if d.is_dir()):
        shutil.rmtree(scenario / "ready", ignore_errors=True)
        proc = scenario / "proc"
        if proc.is_dir():
            with tarfile.open(scenario / "proc.tar.gz", "w:gz") as tar:
                tar.add(proc, arcname="proc")
            shutil.rmtree(proc)
    if args.log:
        shutil.copy(args.log, dest / "drive.log")
    print(dest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
