"""``--report FILE.md``: a validation report in Markdown, to paste into a pull request or a model
card (or GitHub's step summary), with the acceptance-by-position chart beside it as a PNG.

What the lmdeploy #4991 author pasted by hand, from the result the command computed: what was
checked, where it ran, the settings, tau with its interval, acceptance by draft position (chart
and table), the acceptance-length histogram, the speedup with its interval and what it predicts,
the lossless verdict with its ties, the findings and the serve lines. Deterministic apart from the
measured times: a re-run's diff shows what changed. One module a job: ``markdown.py`` the text
blocks, ``chart.py`` the PNG (matplotlib, the ``report`` extra; without it the report says so and
keeps the table), ``build.py`` a report per command. Torch-free.
"""

from __future__ import annotations

from dflash_ckpt.report.build import write_report

__all__ = ["write_report"]
