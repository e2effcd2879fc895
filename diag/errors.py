"""The one root error of diag, and the user-facing errors with their remedies.

Every error a user can meet is a subclass of :class:`DiagError` with a help text (what
to do, with a command) and an exit code. Foreign exceptions are translated into these
where they enter; only ``cli.py`` prints them or exits.
"""

from __future__ import annotations

__all__ = [
    "EXIT_CLEAN",
    "EXIT_FINDINGS",
    "EXIT_PARTIAL",
    "EXIT_STALLED",
    "EXIT_USAGE",
    "BundleError",
    "DiagError",
    "InputError",
    "PermissionProblem",
    "RuleError",
    "ToolMissing",
]

EXIT_CLEAN = 0
EXIT_FINDINGS = 1
EXIT_USAGE = 2
EXIT_PARTIAL = 3
EXIT_STALLED = 4  # diag watch --exit-on-stall, diag probe: a rank made no progress in budget


class DiagError(Exception):
    """Root of every error diag raises on purpose."""

    exit_code: int = EXIT_USAGE
    help_text: str = ""

    def __init__(self, message: str, *, help_text: str | None = None) -> None:
        super().__init__(message)
        if help_text is not None:
            self.help_text = help_text

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else self.__class__.__name__


class InputError(DiagError):
    """The input is missing, unreadable or not a log."""

    help_text = (
        "Pass a log file, a folder of logs, a .gz/.bz2/.xz file, a diag bundle, or - for stdin."
    )


class RuleError(DiagError):
    """A rule file is invalid (schema, regex, unknown check)."""

    help_text = (
        "Compare the rule file with a built-in one (`diag rules show ID`); "
        "`diag rules test DIR` runs its examples."
    )


class BundleError(DiagError):
    """A bundle is malformed, tampered with, or hostile."""

    help_text = "Ask for the bundle again; `diag bundle verify FILE` checks checksums and schema."


class ToolMissing(DiagError):
    """An external tool (py-spy, nvidia-smi) is not installed."""

    exit_code = EXIT_PARTIAL
    help_text = "Install it: `pip install py-spy` (it ships with diag's dependencies)."


class PermissionProblem(DiagError):
    """ptrace or /proc access was refused."""

    exit_code = EXIT_PARTIAL
    help_text = (
        "py-spy needs ptrace: run as root (sudo -E diag snapshot), or give the container "
        "`--cap-add SYS_PTRACE`, or allow it with `sysctl kernel.yama.ptrace_scope=0`."
    )
