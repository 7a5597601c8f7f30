"""The command layer: per command, its typer options (``*_cmd.py``, registered by ``cli.COMMANDS``),
filled into the command's options dataclass (``run/options.py``) for its run (``run/``), and its
report for people (``*_report.py``, ``output.py``; JSON through ``json_out.py``). Options shared by
commands are spelled once in ``options.py``."""
