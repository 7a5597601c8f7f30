"""The reference runtime behind ``smoke-run`` and ``probe-taps``: plain PyTorch, plus an optional
transformers target.

The native modules never import transformers; ``hf_target`` does (the ``hf`` extra), and only a
run on the transformers backend imports it. The modules import torch, so only ``smoke-run`` and
``probe-taps`` (inside their command bodies), the benchmarks and the tests import them.
``inspect`` and ``normalize`` never do.

Modules, one job each:
- ``plan``: the run's plan, resolved once from the checked spec and the options (block size,
  capacity, device, dtypes, inventories); ``backend``: which backend runs the target;
- ``loops``: the eager or static loop of a pair, chosen once;
- ``measure``: the lossless judge and the acceptance and speed figures;
- ``probe``: any tap set's acceptance from draft calls only (``probe-taps``);
- ``rope``: rotary tables for the ``default``, ``linear``, ``llama3`` and ``yarn`` rope types;
- ``loading``: safetensors (single or sharded) into the modules, never pickle;
- ``target``: dense Qwen3 / Llama 3.x with a preallocated KV cache and tapped features;
- ``draft``: the DFlash v1 draft;
- ``draft2``: the DFlash2 draft (conv layers, candidate selector) and ``make_draft``, which picks one;
- ``generate``: what a loop records, prefill, target-only greedy decoding, the teacher-forced
  logits of the lossless judge;
- ``dflash_loop``: the one DFlash host loop (accept, step record, stop) over executors:
  ``eager_dflash`` (the generic path, the oracle), ``static`` (fixed shapes and device-side
  state, captured as CUDA graphs on GPU; also its target-only loop) and ``probe``'s replay;
- ``hf_target``: any target family transformers implements, behind the same target protocol,
  with exact cache rollback for sliding-window and Gated DeltaNet layers;
- ``memory``: the bytes a checkpoint takes once loaded, against the device's free memory.

The model settings the modules take (``DraftSettings``, ``TargetSettings``) are built from the
specs in ``dflash_ckpt.draftspec`` (``draft_settings``, ``target_settings``, with the families
table in ``families``), where every bad value is reported once; nothing here reads a config.

The commands around it (options, report) live in ``dflash_ckpt.commands``; their findings
(DF401-DF406) in ``dflash_ckpt.checks.run_findings``.
"""
