"""The rule registry: every finding the tool can report, with a stable code and one explanation.

Codes never change meaning once published; a retired rule keeps its number. Ranges:
DF0xx reading the input, DF1xx the config, DF2xx the weights, DF3xx pairing with a target,
DF4xx running the pair (smoke-run, probe-taps). The rows are data in ``rule_tables``, one table
per subject (and one per engine that owns rules); this module makes them ``Rule``s and finds them.
"""

from __future__ import annotations

import os
from enum import Enum
from typing import NamedTuple

from dflash_ckpt.errors import error_line
from dflash_ckpt.rule_tables import ROWS as RULE_ROWS


class Severity(str, Enum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"

    def __str__(self) -> str:
        """``error``, as every report writes it (not ``Severity.ERROR``)."""
        return self.value

    @property
    def rank(self) -> int:
        return {"error": 2, "warning": 1, "info": 0}[self.value]


class Rule(NamedTuple):
    code: str
    name: str
    severity: Severity
    summary: str
    explanation: str
    fix: str

    def to_json(self) -> dict[str, str]:
        return {
            "code": self.code,
            "name": self.name,
            "severity": self.severity.value,
            "summary": self.summary,
            "explanation": self.explanation,
            "fix": self.fix,
        }


class Finding(NamedTuple):
    """One problem (or fact) found in a checkpoint.

    ``path`` is the file (or folder) it is about, ``key`` the config key (dotted, as in
    ``dflash_config.block_size``) or tensor it names, both ``None`` where there is none;
    ``message`` is the text after the path.
    """

    code: str
    severity: Severity
    message: str
    path: str | None = None
    key: str | None = None

    def line(self, where: str | None = None) -> str:
        """``PATH: CODE severity: message``; ``where`` stands in when the finding names no file."""
        return error_line(self.path or where, self.code, self.severity.value, self.message)

    def to_json(self) -> dict[str, str | None]:
        return {"code": self.code, "severity": self.severity.value, "path": self.path, "key": self.key,
                "message": self.message}


#: Every rule, from the subject tables of ``rule_tables``, in code order.
_RULES: list[Rule] = sorted((Rule(code, name, Severity(sev), *texts) for code, name, sev, *texts in RULE_ROWS),
                            key=lambda rule: rule.code)

RULES: dict[str, Rule] = {rule.code: rule for rule in _RULES}


def finding(code: str, message: str, *, path: str | os.PathLike[str] | None = None,
            key: str | None = None) -> Finding:
    """A finding of rule ``code`` (its severity comes from the registry).

    ``path`` is the file or folder it is about (``None`` for a run's finding about no file),
    ``key`` the config key it names; both are given where the finding is made, so no output
    format has to parse them back out of ``message``, which is the text after the path.
    """
    return Finding(code, RULES[code].severity, message, None if path is None else str(path), key)
