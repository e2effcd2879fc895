"""The pictures, checked in a real browser: the Markdown report's mermaid gantt is drawn by
mermaid (npm) in headless Chromium, and must draw: no parse error, one row per rank, the
silence coloured (mermaid's ``crit`` tasks, red).

Needs ``chromium`` (apt-get install -y chromium) and mermaid's browser bundle
(``npm install mermaid`` into ``~/.cache/diag-ci/npm``, or ``DIAG_MERMAID_JS`` pointing at
``mermaid.min.js``); skips with the reason when either is missing.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from diag.analyze import analyze
from diag.report.combined import combine
from diag.report.markdown import render_markdown
from diag.report.snapshot_read import snapshot_from_dict

ROOT = Path(__file__).resolve().parent.parent
CAPTURE = ROOT / "fixtures" / "gpu" / "h200x2" / "cpu-w8"
EXAMPLE = ROOT / "diag" / "data" / "example.log"
NPM_CACHE = Path.home() / ".cache" / "diag-ci" / "npm"


def _mermaid_js() -> Path | None:
    env = os.environ.get("DIAG_MERMAID_JS")
    candidates = [Path(env)] if env else []
    candidates.append(NPM_CACHE / "node_modules" / "mermaid" / "dist" / "mermaid.min.js")
    return next((p for p in candidates if p.is_file()), None)


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.fixture(scope="module")
def browser() -> tuple[str, Path]:
    chrome, js = _chromium(), _mermaid_js()
    if chrome is None:
        pytest.skip("no Chromium on PATH (apt-get install -y chromium)")
    if js is None:
        pytest.skip(f"no mermaid bundle (npm install mermaid --prefix {NPM_CACHE})")
    return chrome, js


_PAGE = """<!doctype html><html><head><meta charset="utf-8">
<script src="{js}"></script></head><body><div id="out"></div><pre id="result">PENDING</pre>
<script>
mermaid.initialize({{startOnLoad: false}});
(async () => {{
  const result = document.getElementById("result");
  try {{
    const {{svg}} = await mermaid.render("g", {src});
    const out = document.getElementById("out");
    out.innerHTML = svg;
    const tasks = [...out.querySelectorAll("rect")].filter(
      r => /\\btask\\b|\\bcrit|\\bdone|\\bactive/.test(r.getAttribute("class") || ""));
    result.textContent = JSON.stringify({{
      ok: true,
      tasks: tasks.map(r => ({{
        cls: r.getAttribute("class"), y: r.getAttribute("y"),
        fill: getComputedStyle(r).fill, width: parseFloat(r.getAttribute("width"))}})),
      sections: [...out.querySelectorAll("text")].filter(
        t => /sectionTitle/.test(t.getAttribute("class") || "")).map(t => t.textContent),
    }});
  }} catch (e) {{
    result.textContent = JSON.stringify({{ok: false, error: String(e && e.message || e)}});
  }}
}})();
</script></body></html>
"""


def _draw(browser: tuple[str, Path], source: str, tmp_path: Path) -> dict[str, Any]:
    chrome, js = browser
    page = tmp_path / "gantt.html"
    page.write_text(_PAGE.format(js=js.as_uri(), src=json.dumps(source)), encoding="utf-8")
    r = subprocess.run(
        [
            chrome,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--allow-file-access-from-files",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--virtual-time-budget=20000",
            "--dump-dom",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    m = re.search(r'<pre id="result">(.*?)</pre>', r.stdout, re.S)
    assert m is not None, f"chromium printed no page (rc {r.returncode}): {r.stderr[-2000:]}"
    data: dict[str, Any] = json.loads(html.unescape(m.group(1)))
    return data


def _gantt(markdown: str) -> str:
    return markdown.split("```mermaid\n", 1)[1].split("\n```", 1)[0]


def _rows(tasks: list[dict[str, Any]]) -> int:
    return len({t["y"] for t in tasks})


def test_bundle_report_gantt_draws_one_row_per_rank_and_a_red_silence(
    browser: tuple[str, Path], tmp_path: Path
) -> None:
    snap = snapshot_from_dict(json.loads((CAPTURE / "snapshot-json.json").read_text()))
    view = combine(analyze([CAPTURE / "server.log"]), snap)
    source = _gantt(render_markdown(view))
    drawn = _draw(browser, source, tmp_path)
    assert drawn["ok"], drawn.get("error")
    sections = [x.split("section ", 1)[1] for x in source.splitlines() if "section " in x]
    assert sections == ["no rank"] + [f"TP{i}" for i in range(8)]
    # displayMode compact: each section (rank) is one row of the picture
    assert _rows(drawn["tasks"]) == len(sections)
    crit = [t for t in drawn["tasks"] if "crit" in (t["cls"] or "")]
    assert len(crit) == 8 and all(t["width"] > 0 for t in crit)  # every rank's silence
    red = {t["fill"] for t in crit}
    normal = {t["fill"] for t in drawn["tasks"] if "crit" not in (t["cls"] or "")}
    assert red.isdisjoint(normal)  # the silence has a colour of its own ...
    for fill in red:  # ... and it is red (mermaid's critBkgColor)
        r, g, b = (int(x) for x in re.findall(r"\d+", fill)[:3])
        assert r > 200 and g < 160 and b < 160, fill


def test_example_report_gantt_draws(browser: tuple[str, Path], tmp_path: Path) -> None:
    source = _gantt(render_markdown(analyze([EXAMPLE])))
    drawn = _draw(browser, source, tmp_path)
    assert drawn["ok"], drawn.get("error")
    sections = [x for x in source.splitlines() if x.startswith("    section ")]
    assert _rows(drawn["tasks"]) == len(sections) == 9


def test_a_broken_gantt_is_reported(browser: tuple[str, Path], tmp_path: Path) -> None:
    """The harness itself: mermaid's parse error reaches the test (it cannot pass blind)."""
    drawn = _draw(
        browser, "gantt\n    dateFormat YYYY\n    section x\n    a :b, c, d, e, f", tmp_path
    )
    assert drawn["ok"] is False and drawn["error"]
