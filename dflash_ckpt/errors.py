"""Errors that end a command with a one-line message instead of a traceback.

Every error the user can cause (a missing folder, a config that is not JSON, a repo that is not
cached) is raised as an ``InputError``; the CLI prints ``str(err)`` and exits with ``exit_code``.
"""

from __future__ import annotations


class DFlashCkptError(Exception):
    """Base class: a problem the user can fix, reported in one line."""

    exit_code: int = 2

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code

    def __str__(self) -> str:
        return f"{self.message} [{self.code}]" if self.code else self.message


class InputError(DFlashCkptError):
    """Input that cannot be read at all (exit 2): nothing can be checked past it."""

    exit_code = 2


class UsageError(DFlashCkptError):
    """Options that contradict each other or the checkpoint (exit 2)."""

    exit_code = 2


class CheckFailed(DFlashCkptError):
    """The input was read, and it is wrong (exit 1)."""

    exit_code = 1
