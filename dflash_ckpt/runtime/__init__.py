"""The reference runtime behind ``smoke-run``: plain PyTorch, plus an optional transformers target.

The native modules never import transformers; ``hf_target`` does (the ``hf`` extra), and only
``smoke-run`` with the transformers backend imports it. Importing this package imports torch, so only ``smoke-run`` (inside its command body), the
benchmarks and the tests import it. ``inspect`` and ``normalize`` never do.

Modules, one job each:
- ``families``: the target families implemented and what differs between them (one table);
- ``args``: model settings from config dicts (what is supported, and a clear error otherwise);
- ``rope``: rotary tables for the ``default``, ``linear``, ``llama3`` and ``yarn`` rope types;
- ``loading``: safetensors (single or sharded) into the modules, never pickle;
- ``target``: dense Qwen3 / Llama 3.x with a preallocated KV cache and tapped features;
- ``draft``: the DFlash v1 draft;
- ``draft2``: the DFlash2 draft (conv layers, candidate selector) and ``make_draft``, which picks one;
- ``generate``: prefill, target-only greedy decoding, greedy DFlash decoding (the generic path),
  the teacher-forced lossless check;
- ``static``: the same loops with fixed shapes and device-side state, captured as CUDA graphs on GPU.
- ``hf_target``: any target family transformers implements, behind the same target protocol,
  with exact cache rollback for sliding-window and Gated DeltaNet layers;
- ``memory``: the bytes a checkpoint takes once loaded, against the device's free memory.

The ``smoke-run`` command around it (prompts, verdict, report) lives in ``dflash_ckpt.commands``.
"""
