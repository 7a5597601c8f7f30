"""The engines, one line each: every table keyed by an engine is derived from ``ENGINES``.

Adding an engine is its file (``checks/engines/<engine>.py``, one ``ENGINE = Engine(...)``) and
its line here; inspect's readers table and JSON ``readers``, ``--require-engines``, normalize's
report, the layout findings (DF160, DF163), the acceptance-key findings (DF150) and the serve
lines all iterate what this module derives (``tests/test_engine_registry.py`` holds that claim).
The order is the report's.
"""

from __future__ import annotations

from dflash_ckpt.checks.engines import (exllamav3, exllamav3_legacy, lmdeploy, mlx_vlm, sglang, speculators, tensorrt_llm,
                                        vllm, zlab, zlab_legacy, zlab_mlx)
from dflash_ckpt.checks.engines.record import Engine

ENGINES: tuple[Engine, ...] = (
    zlab_legacy.ENGINE,
    zlab.ENGINE,
    sglang.ENGINE,
    vllm.ENGINE,
    lmdeploy.ENGINE,
    speculators.ENGINE,
    tensorrt_llm.ENGINE,
    zlab_mlx.ENGINE,
    mlx_vlm.ENGINE,
    exllamav3_legacy.ENGINE,
    exllamav3.ENGINE,
)

#: Engine key -> its record.
BY_KEY: dict[str, Engine] = {e.key: e for e in ENGINES}
#: The readers of the readers table, in report order (each has ``key``, ``title``, ``judge``).
READERS: tuple[Engine, ...] = ENGINES
#: Every reader's short name (``--require-engines``, JSON ``readers``) and how a report names it.
TITLES: dict[str, str] = {e.key: e.title for e in ENGINES}
READER_TITLES = TITLES
#: Readers that serve drafts (speculators converts them for vLLM and serves nothing itself).
SERVING: tuple[str, ...] = tuple(e.key for e in ENGINES if e.serves)
#: Engines with a launch command, in the order of the serve lines.
SERVE_ENGINES: tuple[str, ...] = tuple(e.key for e in sorted((e for e in ENGINES if e.serve), key=lambda e: e.serve_rank))
