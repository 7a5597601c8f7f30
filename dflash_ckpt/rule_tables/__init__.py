"""Every rule's row, by subject: the one place the rule registry (``rules.RULES``) is built from.

A rule is one row in the table of its subject (the code ranges of ``rules``: DF0xx ``inputs``,
DF1xx ``config``, DF2xx ``weights``, DF3xx ``target``, DF4xx ``run``; across ranges ``layout``,
``quantization``, ``mistakes``) or, for an engine's own rules, in ``vllm`` (named for the engine
whose record, ``checks/engines/<engine>.py``, claims them). The tables are plain data: ``rules``
is imported by every layer, down to ``sources/``, so what it imports must import nothing back.
"""

from __future__ import annotations

from dflash_ckpt.rule_tables import config, inputs, layout, mistakes, quantization, run, speculators, target, vllm, weights

#: Subject -> its rows (code, name, severity, summary, explanation, fix).
SUBJECTS: dict[str, tuple[tuple[str, str, str, str, str, str], ...]] = {
    "inputs": inputs.ROWS,
    "config": config.ROWS,
    "layout": layout.ROWS,
    "speculators": speculators.ROWS,
    "quantization": quantization.ROWS,
    "weights": weights.ROWS,
    "target": target.ROWS,
    "run": run.ROWS,
    "mistakes": mistakes.ROWS,
    "vllm": vllm.ROWS,
}

#: Every row of every subject.
ROWS: tuple[tuple[str, str, str, str, str, str], ...] = tuple(row for rows in SUBJECTS.values() for row in rows)
