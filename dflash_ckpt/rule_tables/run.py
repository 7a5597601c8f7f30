"""Running the pair: DF401-DF419, DF431 and DF433 (smoke-run's and probe-taps' run findings and refusals).

Rows as ``rules.Rule`` takes them (code, name, severity, summary, explanation, fix), plain
data so that ``rules`` (which every layer imports) imports nothing of the package for them."""

from __future__ import annotations

ROWS: tuple[tuple[str, str, str, str, str, str], ...] = (
    ("DF401", "output-differs", "error", "DFlash output differs from target-only output",
     "With greedy decoding, speculative decoding must reproduce the target's own output token for token; "
     "a divergence not explained by a near tie in the target's logits is a bug in the runtime or a broken "
     "checkpoint.",
     "Report it with the --json output attached."),
    ("DF402", "output-tie", "info", "Outputs diverge at a near tie",
     "Where DFlash's token is not the target's choice, its logit is within the documented tolerance of "
     "the target's maximum (at any rank): batched verification and one-token decoding round differently, "
     "and either token is a correct greedy choice.",
     "Nothing to fix."),
    ("DF403", "low-acceptance", "error", "Acceptance is below the threshold",
     "The mean acceptance length tau is below --min-acceptance. A draft reading the wrong tap layers, a "
     "wrong mask id, or an fp16 draft loads cleanly and lands here; so do prompts that are not in the "
     "chat format the draft was trained on (--no-chat-template, --thinking, prompts of your own).",
     "Check target_layer_ids against the model card, the mask id, and keep the draft in bf16; rerun with "
     "the built-in prompts and the chat template to rule out the prompt format."),
    ("DF404", "feature-overflow", "error", "Non-finite values where the target feeds the draft",
     "The tapped features or the fused fc output hold inf/NaN: fp16 overflow on hidden-state outliers.",
     "Keep the draft in bfloat16 (--draft-dtype bfloat16) and let target tensors be cast to it."),
    ("DF405", "block-size-above-trained", "warning", "--block-size is above the draft's trained block",
     "Positions past the trained block_size were never trained: their drafts are rarely accepted, so tau "
     "measured this way understates the draft, and engines run the trained size anyway.",
     "Leave --block-size out, or give at most the draft's block_size."),
    ("DF406", "speedup-implausible", "warning", "The measured speedup exceeds tau",
     "A DFlash step yields tau tokens for one draft call plus one verify pass, each at least as costly as "
     "a target decode step, so a speedup above tau cannot be real: the machine's load changed between the "
     "timed runs (other processes, thread oversubscription, clock changes). The figure is withheld, not "
     "reported as a result.",
     "Rerun on an idle machine, or with fewer threads (--threads 1 on a small shared CPU)."),
    ("DF407", "out-of-memory", "error", "The run does not fit the memory it may use",
     "smoke-run counts its peak before loading (weights in the run dtype from the config shapes and the "
     "files, KV caches at capacity, activations, logits over the vocabulary, the transformers backend's "
     "overhead) against MemAvailable, the RLIMIT_AS and cgroup limits, or the GPU's free memory, and "
     "refuses what does not fit; an out-of-memory error during the run is reported the same way (exit 2: "
     "the run did not happen, the pair is not judged).",
     "Free memory or raise the limit, use a machine or GPU with more memory, or lower --max-new-tokens "
     "and the prompts' length; run a float32 target in bfloat16."),
    ("DF408", "too-little-evidence", "warning", "Too little evidence for a verdict on acceptance",
     "tau is a mean over DFlash steps, and the steps of one prompt move together, so its 95% interval "
     "is clustered by prompt (Student's t with prompts - 1 degrees of freedom). Below 32 DFlash steps or "
     "3 prompts the interval is too wide to call either way (at 4 steps a tau of 5 could be 1 or 9), so "
     "smoke-run gives no verdict on tau (DF403 is not judged) and withholds the speedup, which a few "
     "steps' timing cannot support either. A warning: the exit code stays 0 unless another finding is an "
     "error (the outputs are still checked token for token).",
     "Give more tokens (-n), more prompts (-p, --prompts), or a suite (--suite)."),
    ("DF409", "tau-far-below-published", "warning", "A suite's tau is far below the published figure",
     "The draft is a published one (by the fingerprint of its config and tensor shapes; never by its repo "
     "id or folder name alone), "
     "and for a suite with a comparable published benchmark (math: GSM8K, Math500; code: HumanEval, MBPP; "
     "chat: MT-Bench; the lowest of them, at the same temperature class) even the upper bound of the "
     "measured tau's 95% interval is under 0.6 x the published tau. Honest differences (other prompts, "
     "temperature, hardware) cost 20-25%; a draft run in fp16, the wrong chat template or thinking mode, "
     "wrong target_layer_ids or block layout cost far more.",
     "Keep the draft in bfloat16, check the chat template and --thinking, target_layer_ids and the block "
     "layout (probe-taps measures them)."),
    ("DF410", "taps-not-best", "error", "Another tap set measures better than the configured one",
     "probe-taps measured the draft's acceptance with other target_layer_ids and found a set that beats "
     "the configured ids (or the configured ids cannot be right for fc.weight and the target). A draft "
     "reads whatever layers its config names without complaint, so ids lost or edited in a conversion "
     "show up only as low acceptance.",
     "Check the measured best against the model card, then write it into a normalized copy (probe-taps "
     "--write OUT, or the printed normalize --target-layer-ids command)."),
    ("DF411", "no-taps-work", "error", "No tap set measured reaches the acceptance threshold",
     "Every candidate probe-taps measured stays below --min-acceptance: the draft may belong to another "
     "target, the prompts may not be in the format it was trained on, or a search stopped at its --budget "
     "before it reached the trained set.",
     "Check the draft's target; rerun with the built-in prompts and the chat template, or a larger "
     "--budget."),
    ("DF412", "taps-unclear", "error", "The best tap set leads only within measurement noise",
     "probe-taps recovered no target_layer_ids it can stand behind: the best candidate leads the "
     "runner-up by less than one standard error even after it measured the leading candidates again with "
     "more tokens per prompt (doubling -n, up to 512) and, for your own prompts, the built-in ones. "
     "Neighbouring layers carry similar features, so a set one layer off the trained one can come out "
     "ahead on little evidence; claiming it would write wrong ids that load cleanly (exit 1, and --write "
     "refuses without --force).",
     "Rerun with more tokens (-n) or more prompts in the draft's training format (--prompts FILE.jsonl), "
     "or check the model card; `--write OUT --force` writes the leader anyway."),
    ("DF413", "weights-unfilled", "error", "A weight matrix reads back as one value (zeros)",
     "Before loading, smoke-run and probe-taps sample a few bounded slices of every weight matrix's data "
     "(a few MiB for a whole model; a tensor is reported only when every byte read of it is one repeated "
     "value). A preallocated or never-filled shard, a sparse file, or an export that wrote zeros has a "
     "valid header and passes every header check, and a run on it ties every logit: both sides pick token "
     "0, the outputs match and every draft is accepted, so it would PASS while measuring nothing. The "
     "pair is refused (exit 1). Norm weights and biases are not judged (zero-centred norms are "
     "legitimately zero).",
     "Download the named file again (or re-export the checkpoint) and compare its checksum with the Hub's."),
    ("DF414", "logits-tied", "error", "The target's logits tie at every position",
     "At every position of a prompt the target's two best logits (or all of them) are equal, so greedy "
     "decoding picks by token id alone and DFlash reproducing it proves nothing: the target's weights or "
     "LM head are degenerate (zeros, one constant). The run fails (exit 1).",
     "Check the target's weights (DF413) and download them again."),
    ("DF415", "output-one-token", "error", "Every prompt's output is one token repeated",
     "A draft accepted on an output that repeats one token only had to copy its anchor, so tau and the "
     "output match measure nothing about it. It happens with degenerate weights, or with prompts that "
     "send the target into a loop. The run fails (exit 1).",
     "Rerun with other prompts (-p/--prompts); check the weights (DF413, DF414)."),
    ("DF431", "mask-row-near-zero", "warning", "The target's mask-token embedding row is about zero and no mask embedding is shipped",
     "A DFlash draft embeds its mask slots with the target's embedding row for mask_token_id. Some targets "
     "never trained that row (MiMo: sglang#27924, acceptance length 1.42 against 6.30 with the published "
     "file), and their drafts publish the mask embedding they were trained with: mask_embedding.pt (vLLM and "
     "SGLang load it) or a mask_embedding tensor (exllamav3 1.6.5). The row's norm is below 1/1000 of the "
     "median row's and the draft has neither, so every engine feeds the draft zeros. Judged in smoke-run (the "
     "values are in no header).",
     "Fetch the mask_embedding file its publisher released into the draft's folder (review it: .pt files "
     "are pickles, DF226), or serve with the target the draft was trained against."),
    ("DF419", "cuda-failed", "error", "The GPU is busy, lost, or does not match torch",
     "A run on CUDA (smoke-run, probe-taps) stopped for a reason that says nothing about the pair: the device is busy or "
     "unavailable (exclusive-process mode, another job), it was lost or failed (fallen off the bus, an "
     "uncorrectable ECC error, a launch failure), the NVIDIA driver is older than the CUDA torch was "
     "built for, torch has no kernels for this GPU, or another CUDA error ended the run. The line names "
     "CUDA's own message (exit 2: the run did not happen, the pair is not judged). Out of device memory "
     "is DF407, a bfloat16 kernel missing below compute capability 8.0 is DF318.",
     "Free the GPU or pick another (--device cuda:N; nvidia-smi shows who holds it), update the driver or "
     "install a torch built for it, or run on the CPU (--device cpu); a CUDA error that repeats: report "
     "it with the line (--no-compile skips the CUDA graphs)."),
    ("DF433", "suite-prompts-skipped", "warning", "Suite prompts longer than the target's context were left out",
     "A --suite runs the package's prompts (long: up to ~1,200 tokens). A target whose "
     "max_position_embeddings cannot hold a prompt, -n new tokens and one verify block cannot run it, "
     "so smoke-run leaves those prompts out and runs the rest, naming them: the suite's tau is then "
     "over fewer prompts than the published figures' (a prompt of your own that does not fit is refused "
     "instead, DF004).",
     "Nothing, for a small target; for the whole suite use a target with a longer context, or a smaller -n."),
)
