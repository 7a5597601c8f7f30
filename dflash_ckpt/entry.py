"""The console entry point, kept free of imports so that Ctrl-C while the CLI starts is one line.

``dflash-ckpt`` spends its first few hundred milliseconds importing typer, rich and the commands;
a KeyboardInterrupt raised there would escape ``cli.run`` (which is not running yet) as a
traceback. Importing ``cli`` inside ``main`` puts those imports under the same handler as the
command itself: one ``interrupted`` line and exit 130, whenever Ctrl-C comes.
"""

from __future__ import annotations

import sys

#: The exit status of a run stopped by Ctrl-C (128 + SIGINT), as shells report it.
INTERRUPTED = 130


def main() -> None:
    """Console entry point: run the CLI; Ctrl-C at any moment, start-up included, exits 130.

    The garbage collector is off while the CLI is imported and what the imports made (module
    objects that live as long as the process) is then frozen out of its reach: collected again
    and again, they cost inspect a twentieth of its start and free nothing."""
    import gc

    gc.disable()
    try:
        from dflash_ckpt.cli import run

        gc.freeze()
        gc.enable()
        code = run()
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        code = INTERRUPTED
    sys.exit(code)
