"""What every command's run returns (``run_<command>``), and the one JSON envelope around it.

``exit_code`` is the CLI's (0 clean, 1 findings, 2 unreadable input or usage), ``ok`` is its
being 0, ``findings`` the run's findings, ``to_dict()`` the command's ``--json`` result (one
element of ``results``; each result class writes it as ``to_json``) and ``envelope()`` the whole
document. Every command's document is the same envelope (``document``), so a script reads
``ok``, ``exit_code`` and ``error`` the same way whatever it ran, also when the run stopped
before any result (``error`` filled, ``results`` empty). No torch, no rich: any layer may import this.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from dflash_ckpt.errors import DFlashCkptError

#: Bumped when a field of any command's document changes meaning, moves or is removed (added
#: fields do not). 2: every command's document is the envelope below (normalize's fields, the
#: smoke-run and probe-taps documents and the rules moved into ``results``).
SCHEMA_VERSION = 2


def error_json(err: DFlashCkptError | None, where: str | None = None) -> dict[str, Any] | None:
    """An error as the JSON ``error`` object: its code, its whole message (location first), its
    ``path`` (else ``where``) and its config key (``null`` where none)."""
    if err is None:
        return None
    return {"code": err.line_code, "message": err.message, "path": err.path or where, "key": err.key}


def document(command: str, results: list[dict[str, Any]], exit_code: int,
             error: DFlashCkptError | None = None) -> dict[str, Any]:
    """The envelope every command prints with ``--json``: the version and the command first."""
    return {"schema_version": SCHEMA_VERSION, "command": command, "ok": exit_code == 0, "exit_code": exit_code,
            "error": error_json(error), "results": results}


class ResultShape:
    """``ok``, ``to_dict`` and ``envelope`` from a class's ``command``, ``exit_code`` and ``to_json``."""

    #: The command whose result this is, as the envelope names it.
    command: ClassVar[str] = ""
    exit_code: int

    def to_json(self) -> dict[str, Any]:
        raise NotImplementedError

    def run_error(self) -> DFlashCkptError | None:
        """What stopped the run (the envelope's ``error``); ``None`` when it ran to its end."""
        return None

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def to_dict(self) -> dict[str, Any]:
        """This run's ``--json`` result: one element of the document's ``results``."""
        return self.to_json()

    def results_json(self) -> list[dict[str, Any]]:
        return [self.to_json()]

    def headline(self) -> str:
        """The run's figures in a few words for ``print(result)`` (a command with figures says them)."""
        return ""

    def __str__(self) -> str:
        """What ``print(result)`` shows: the command, ok or not with the exit code, the run's
        figures, then each finding as the CLI's ``PATH: CODE severity: message`` line (a result's
        own ``repr`` is its fields, which hold objects no one reads)."""
        findings = list(self.findings)  # type: ignore[attr-defined]
        head = f"{self.command}: {'ok' if self.ok else 'not ok'} (exit {self.exit_code})"
        extra = self.headline()
        lines = [head + (f", {extra}" if extra else "") + f", {len(findings)} finding(s)"]
        lines += [f"  {f.line()}" for f in findings]
        return "\n".join(lines)

    def envelope(self) -> dict[str, Any]:
        """The whole ``--json`` document, as the CLI prints it."""
        return document(self.command, self.results_json(), self.exit_code, self.run_error())
