"""What every command's run returns (``run_<command>``): one shape for people, scripts and CI.

``exit_code`` is the CLI's (0 clean, 1 findings, 2 unreadable input or usage), ``ok`` is its
being 0, ``findings`` the run's findings, ``to_dict()`` the ``--json`` document (each result
class writes it as ``to_json``). No torch, no rich: any layer may import this.
"""

from __future__ import annotations

from typing import Any, Protocol

from dflash_ckpt.rules import Finding


class Result(Protocol):
    """The shape ``run_inspect``, ``run_normalize``, ``run_smoke_run`` and ``run_probe_taps`` return."""

    findings: list[Finding]

    @property
    def exit_code(self) -> int: ...

    @property
    def ok(self) -> bool: ...

    def to_dict(self) -> dict[str, Any]: ...


class ResultShape:
    """``ok`` and ``to_dict`` from a class's ``exit_code`` and ``to_json``."""

    exit_code: int

    def to_json(self) -> dict[str, Any]:
        raise NotImplementedError

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` document."""
        return self.to_json()
