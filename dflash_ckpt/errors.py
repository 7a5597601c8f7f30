"""Errors that end a command with a one-line message instead of a traceback, and that line's format.

Every error the user can cause (a missing folder, a config that is not JSON, a repo that is not
cached) is raised as a ``DFlashCkptError``; the CLI prints it as one line and exits with
``exit_code``. Every line the tool prints about a problem, findings included, has one shape, as
ruff prints its own: ``PATH: CODE severity: message``. ``PATH`` is a field (``path``) that the
raiser sets, never parsed back out of the message: a folder may be named ``a: DF101 b``.
"""

from __future__ import annotations

import os
import re

from dflash_ckpt.neutral import no_opener

#: Where a line points when the problem is about no file (an option, the command line itself).
PROGRAM = "dflash-ckpt"

_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def inert(text: str) -> str:
    """``text`` with control characters (terminal escapes, carriage returns, newlines, bidi
    overrides, and lone surrogates: a byte of a name that is not UTF-8, which no stream can
    encode) written as visible escapes, so a name taken from a checkpoint prints as what it is
    and cannot move the cursor, recolour the terminal or start a second line; nor, wherever it
    lands in a line, open a CI runner's command (``##[error]``: ``neutral.no_opener``)."""
    return no_opener(_CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text))


def error_line(path: str | None, code: str, severity: str, message: str) -> str:
    """The one line every problem is printed as: ``PATH: CODE severity: message`` (made inert, and
    no CI command: ``neutral.no_command``; a relative path that would start one is ``./PATH``)."""
    from dflash_ckpt.neutral import no_command, safe_path_start

    return no_command(inert(f"{safe_path_start(path) if path else PROGRAM}: {code} {severity}: {message}"))


class DFlashCkptError(Exception):
    """A problem the user can fix, reported in one line: the one exception type of the CLI and
    of the Python API, carrying ``code`` (the DF rule code; ``line_code`` falls back to the
    class's default), ``exit_code``, ``path`` and ``key`` (where the raiser knows them), ``text``
    (what is wrong) and ``message`` (``path: text``, the sentence ``str()`` and JSON show)."""

    exit_code: int = 2
    #: The rule code printed when the raiser gave none.
    default_code: str = "DF001"

    def __init__(self, message: str, *, code: str | None = None, key: str | None = None,
                 path: str | os.PathLike[str] | None = None) -> None:
        #: The file, folder or repo the problem is about, where the raiser names one; ``None``
        #: for a problem about no file (an option, the environment).
        self.path: str | None = None if path is None else str(path)
        #: What is wrong, without the location (the text after ``PATH: CODE error:``).
        self.text = message
        #: The whole message as a sentence, location first (``str()``, the JSON ``error.message``).
        self.message = f"{self.path}: {message}" if self.path is not None else message
        super().__init__(self.message)
        #: The DF rule code: the raiser's, else the class's default.
        self.code: str = code or self.default_code
        self._given_code = code
        #: The config key (dotted) or option the problem is about, where the raiser knows it.
        self.key = key

    def __str__(self) -> str:
        return f"{self.message} [{self._given_code}]" if self._given_code else self.message

    @property
    def line_code(self) -> str:
        return self.code

    def line(self, where: str | None = None) -> str:
        """This error as one line: at its own ``path``, else at ``where`` (the command or the
        input it was working on)."""
        return error_line(self.path or where, self.line_code, "error", self.text)


class InputError(DFlashCkptError):
    """Input that cannot be read at all (exit 2): nothing can be checked past it."""

    exit_code = 2


class UsageError(DFlashCkptError):
    """Options that contradict each other or the checkpoint (exit 2)."""

    exit_code = 2
    default_code = "DF004"


class CheckFailed(DFlashCkptError):
    """The input was read, and it is wrong (exit 1)."""

    exit_code = 1
    default_code = "DF005"
