"""`diag rules list|show|test`: browse the rule library and run its examples."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from diag.errors import EXIT_FINDINGS, RuleError
from diag.rules.examples import ExampleResult, run_examples
from diag.rules.loader import Rule, builtin_rules, load_dir, load_rules

__all__ = ["check_rules_dirs", "register"]

rules_app = typer.Typer(
    name="rules",
    help="List, show and test the rules that turn a log into findings.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    rich_markup_mode=None,  # click's plain help: wraps at words (see diag.cli)
)

RulesOpt = Annotated[
    list[Path] | None,
    typer.Option("--rules", help="Also load the rule files in this folder (repeatable)."),
]


def check_rules_dirs(folders: Sequence[Path]) -> None:
    """``--rules DIR``: a folder that does not exist is an error (exit 2); one that holds
    no rule is said in one line on stderr (the run goes on with the other rules). Each
    folder is named once, whatever the number of times it was given."""
    seen: set[Path] = set()
    for folder in folders:
        if folder.resolve() in seen:
            continue
        seen.add(folder.resolve())
        if not folder.exists():
            raise RuleError(
                f"{folder}: no such folder (--rules)",
                help_text="Pass --rules a folder of rule files (*.yaml); "
                "`diag rules test DIR` runs their examples.",
            )
        if not folder.is_dir():
            raise RuleError(
                f"{folder}: not a folder (--rules takes a folder of rule files)",
                help_text="Put the rule file in a folder of its own and pass that folder.",
            )
        if not load_dir(folder):
            Console(stderr=True, highlight=False).print(
                f"diag: warning: {folder}: no rule files (*.yaml, *.yml) in it: "
                "--rules adds no rule",
                markup=False,
                soft_wrap=True,
            )


def _load(extra: list[Path] | None) -> tuple[Rule, ...]:
    check_rules_dirs(list(extra or []))
    return load_rules(list(extra or []))


@rules_app.command("list")
def list_rules(
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list of rules.")] = False,
    rules: RulesOpt = None,
) -> None:
    """List every rule: id, severity, kind and title."""
    loaded = _load(rules)
    if as_json:
        typer.echo(json.dumps([r.to_json() for r in loaded], indent=2))
        return
    header = ("id", "finding", "severity", "role", "kind", "title")
    rows = [
        (r.id, r.finding_id if r.finding_id != r.id else "", r.severity, r.role,
         r.check or "pattern", r.title)
        for r in sorted(loaded, key=lambda r: r.id)
    ]
    console = Console(highlight=False)
    if not console.is_terminal:
        # a pipe or a file: fixed columns, nothing cut, no count line (`| grep`, `| awk`)
        shown = [(row[0], row[1] or "-", *row[2:]) for row in rows]
        for line in _plain_columns(header, shown):
            typer.echo(line)
        return
    # a terminal: every column but the title whole (min_width), the title folds to fit;
    # where the finding and kind columns leave the title under 20 columns, the finding
    # goes under the title and the kind is left out (`diag rules show ID` has it)
    widest = [max(len(col), *(len(row[i]) for row in rows)) for i, col in enumerate(header)]
    wide = sum(widest[:-1]) + 2 * (len(header) - 1) + 20 <= console.width
    keep = range(len(header)) if wide else (0, 2, 3, 5)
    table = Table(box=None, pad_edge=False, show_edge=False, padding=(0, 2, 0, 0))
    for i in keep:
        if header[i] == "title":
            table.add_column("title", overflow="fold", ratio=1)
        else:
            table.add_column(header[i], no_wrap=True, min_width=widest[i])
    for row in rows:
        cells: list[str | Text] = [row[i] for i in keep]
        if not wide and row[1]:
            cells[-1] = Text(row[5]).append(f"\nreports {row[1]}", style="dim")
        table.add_row(*cells)
    console.print(table)
    console.print(f"{len(loaded)} rules")


def _plain_columns(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> list[str]:
    """Rows as fixed-width columns two spaces apart, each as wide as its widest value;
    the last column is not padded. No value is ever cut."""
    widths = [max(len(header[i]), *(len(row[i]) for row in rows)) for i in range(len(header))]
    return [
        "  ".join(v.ljust(w) for v, w in zip(line[:-1], widths[:-1], strict=True))
        + "  "
        + line[-1]
        for line in (header, *rows)
    ]


@rules_app.command("show")
def show_rule(
    rule_id: Annotated[str, typer.Argument(metavar="ID", help="A rule id or a finding id.")],
    rules: RulesOpt = None,
) -> None:
    """Show one rule in full (or every rule that reports this finding id)."""
    loaded = _load(rules)
    chosen = [r for r in loaded if rule_id in (r.id, r.finding_id)]
    if not chosen:
        raise RuleError(
            f"no rule {rule_id!r}",
            help_text="`diag rules list` prints every rule id.",
        )
    console = Console(highlight=False, soft_wrap=True)
    for r in chosen:
        console.print(f"[bold]{r.id}[/]  {r.severity}  {r.role}  ({r.path})")
        console.print(f"  title: {r.title}")
        if r.finding_id != r.id:
            console.print(f"  reports: {r.finding_id}")
        if r.cascade_of:
            console.print(f"  cascade of: {', '.join(r.cascade_of)}")
        console.print(f"  frameworks: {', '.join(r.frameworks)}")
        console.print(f"  summary: {r.summary}", markup=False)
        console.print(f"  why: {r.why}", markup=False)
        console.print(f"  remedy: {r.remedy}", markup=False)
        if r.caveat:
            console.print(f"  caveat: {r.caveat}", markup=False)
        if r.check:
            console.print(f"  check: {r.check}  params: {dict(r.params)}", markup=False)
        if r.match:
            for pattern in r.match.sources:
                console.print(f"  pattern: {pattern}", markup=False)
            console.print(f"  needles: {', '.join(r.needles)}", markup=False)
        for ref in r.references:
            console.print(f"  see {ref}", markup=False)
        console.print()


@rules_app.command("test")
def test_rules(
    folder: Annotated[
        Path | None,
        typer.Argument(metavar="[DIR]", help="A folder of rule files (default: the built-ins)."),
    ] = None,
    verbose: Annotated[
        bool, typer.Option("-v", "--verbose", help="Show passing lines too.")
    ] = False,
) -> None:
    """Run every rule's examples and print a pass/fail table (exit 1 on a failure)."""
    if folder is not None and not folder.is_dir():
        raise RuleError(
            f"{folder}: no such folder" if not folder.exists() else f"{folder}: not a folder",
            help_text="Pass `diag rules test` a folder of rule files (*.yaml), or nothing "
            "for the built-in rules.",
        )
    loaded = load_dir(folder) if folder is not None else list(builtin_rules())
    if folder is not None and not loaded:
        raise RuleError(
            f"{folder}: no rule files (*.yaml, *.yml) found",
            help_text="A rule file is YAML with an id, a title and a remedy: "
            "`diag rules show startup.stalled` shows one.",
        )
    results = run_examples(loaded)
    console = Console(highlight=False)
    per_rule: dict[str, list[ExampleResult]] = {}
    for res in results:
        per_rule.setdefault(res.rule, []).append(res)
    summary = Table(box=None, pad_edge=False, show_edge=False)
    for col in ("result", "rule", "match", "no_match", "todo"):
        summary.add_column(col, no_wrap=True)
    for rule_id, items in per_rule.items():
        bad = [r for r in items if not r.ok]
        count = Counter(r.kind for r in items)
        summary.add_row(
            "[bold red]FAIL[/]" if bad else "[green]pass[/]",
            rule_id,
            str(count["match"]),
            str(count["no_match"]),
            str(count["todo_match"] + count["todo_no_match"]),
        )
    console.print(summary)
    failed = [r for r in results if not r.ok]
    shown = results if verbose else failed
    if shown:
        detail = Table(box=None, pad_edge=False, show_edge=False, title="example lines")
        for col in ("result", "file", "kind", "line", "detail"):
            detail.add_column(col, overflow="fold")
        for res in shown:
            mark = "[green]pass[/]" if res.ok else "[bold red]FAIL[/]"
            detail.add_row(mark, res.path, res.kind, res.line[:120], res.detail)
        console.print(detail)
    console.print(
        f"{len(results) - len(failed)} passed, {len(failed)} failed "
        f"({len(per_rule)} pattern rules, {len(loaded) - len(per_rule)} check rules)"
    )
    if failed:
        raise typer.Exit(EXIT_FINDINGS)


@rules_app.command("schema")
def print_schema() -> None:
    """Print the JSON schema of rule files (for an editor's YAML language server)."""
    from diag.rules.schema import FILE_SCHEMA

    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", **FILE_SCHEMA}
    typer.echo(json.dumps(schema, indent=2))


def register(app: typer.Typer) -> None:
    app.add_typer(rules_app, name="rules")
