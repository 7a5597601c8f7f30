"""Serving engines run as they are deployed (``smoke-run --engine vllm|both``).

Each engine runs in a child process of ours (``vllm_child.py``), started and cleaned up by its
runner (``vllm_run.py``); what the install can do is read first, without importing it
(``vllm_facts.py``), so a run that cannot work is refused before an engine starts.
"""
