"""The command layer: per command, options (``*_cmd.py``, typer only, registered in ``cli.py``),
a run function ``run_<command>(..., **options)`` that prints nothing and returns a result with
``.ok``, ``.exit_code``, ``.findings`` and ``.to_dict()`` (``*_run.py``), and a report for people
(``*_report.py``; JSON through ``json_out``). Options shared by commands are spelled once in
``options.py``."""
