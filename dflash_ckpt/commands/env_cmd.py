"""``dflash-ckpt env``: what a bug report needs, printed in one go (``environment.py``).

Imported at every start of the CLI to register the command: typer only here.
"""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add the ``env`` command to ``app``."""

    @app.command("env")
    def env() -> None:
        """Print what a bug report needs: the tool's version and commit, Python, the libraries,
        torch and the GPU (torch imported only here), the engines found, the CPU and the path its
        bf16 matrix products take. Paste it into the issue.

        Exit codes: 0 printed.
        """
        from dflash_ckpt.environment import collect, lines

        for line in lines(collect()):
            typer.echo(line)
