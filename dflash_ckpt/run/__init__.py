"""The run layer: each command's work end to end, with no printing and no ``sys.exit``.

Per command, one torch-free dataclass of its options and every default (``options.py``, named as
the CLI's long options), and one run function that takes it and returns a result with ``.ok``,
``.exit_code``, ``.findings`` and ``.to_dict()``: ``run_inspect`` (``inspect.py``),
``run_normalize`` (``normalize.py``), ``run_smoke_run`` (``smoke.py``) and ``run_probe_taps``
(``probe.py``); the two that load a pair open it through ``pair.py``. ``commands/`` fills the
dataclasses from typer and prints the reports; ``api.py`` fills them from keywords.

Layering: this package sits above ``runtime/``, ``checks/``, ``sources/`` and ``canonical/`` and
below ``commands/`` and ``api.py``; nothing below imports it. Importing it imports nothing heavy:
torch loads inside the functions that load models.
"""
