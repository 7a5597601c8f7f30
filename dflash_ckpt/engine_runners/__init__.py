"""Serving engines run as they are deployed (``smoke-run --engine vllm|both``): the runners.

What the project knows about each engine statically (its reader, block-layout path, serve line,
rules) is its record in ``checks/engines/<engine>.py``; no record imports this package
(``run/smoke.engine_runner`` picks the runner: ``smoke_engine`` offline, ``serve_engine`` served).
vLLM runs in a child process of ours (``vllm_child.py``), started and cleaned up by its runner
(``vllm_run.py``); what the install can do is read first, without importing it
(``vllm_facts.py``), so a run that cannot work is refused before an engine starts.
"""
