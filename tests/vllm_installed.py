"""Whether the engine's python can run the vLLM-marked tests: the tests' skip condition, read
with the same facts probe ``smoke-run --engine vllm`` runs before it starts an engine."""

from __future__ import annotations

from dflash_ckpt.engine_runners.vllm_facts import read_facts


def vllm_available(python: str | None = None) -> bool:
    """Whether the engine's python imports a vLLM with DFlash."""
    facts = read_facts(python)
    return facts.installed and facts.dflash
