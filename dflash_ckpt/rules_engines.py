"""The rules of the engines checks (issue 21): DF150-DF154, DF225-DF226, DF310-DF314, as plain
data that ``rules`` turns into ``Rule``s, so the registry stays one module's read without growing
past it. Fields as ``rules.Rule``: code, name, severity, summary, explanation, fix."""

from __future__ import annotations

ENGINE_RULES: list[tuple[str, str, str, str, str, str]] = [
    ("DF150", "acceptance-key-ignored", "warning", "A key that changes acceptance is set, and some engines ignore it",
         "attention_sink_bias, use_swa/swa_window_size, attention_value_scale, partial_rotary_factor, "
         "output_multiplier, final_logit_softcapping and is_causal/causal change what the draft computes "
         "without changing its tensors. An engine that does not read the key (or reads it from the other "
         "place) loads the draft without a word and runs it as if the key were absent: acceptance drops "
         "and nothing fails. The message names the engines that ignore it and those that apply it; the "
         "reader verdicts say \"loads, but ignores KEY\".",
         "Serve the draft with an engine that applies the key (the message names them); smoke-run refuses "
         "keys the reference runtime does not implement (DF151)."),
    ("DF151", "runtime-lacks-key", "error", "smoke-run refuses a draft whose acceptance keys it does not implement",
         "The reference runtime implements output_multiplier, final_logit_softcapping, "
         "input_embedding_scale, is_causal and sliding layers; a draft that sets attention_sink_bias, "
         "use_swa, attention_value_scale, partial_rotary_factor or dflash_config.causal, or a reduced "
         "vocabulary (draft_vocab_size with d2t/t2d), would run as another model, and its tau would say "
         "nothing about the checkpoint. smoke-run stops before loading anything (exit 2).",
         "Measure the draft in an engine that applies the key (see `dflash-ckpt inspect` readers)."),
    ("DF152", "dflash2-labelled-v1", "error", "A DFlash2 draft's architectures says DFlashDraftModel",
         "The config holds the DFlash2 keys (conv_kernel_size, ...), but architectures names the v1 model (vLLM 0.23's "
         "speculators update rewrote it that way). Engines pick the model class by that name: they "
         "build DFlash v1, drop the conv layers and the candidate selector, and accept almost nothing.",
         "Set architectures to [\"DFlash2DraftModel\"]."),
    ("DF153", "reduced-draft-vocab", "warning", "The draft uses a reduced vocabulary (draft_vocab_size)",
         "speculators-format drafts may predict over draft_vocab_size ids and map them to target ids "
         "through a d2t tensor (t2d marks the target ids kept). vLLM maps them; engines that do not read "
         "draft ids as target ids and accept nothing, and smoke-run refuses the draft (DF151). An invalid "
         "draft_vocab_size is reported here too.",
         "Serve it with vLLM, or use a draft over the full target vocabulary."),
    ("DF154", "quantized-draft", "warning", "The draft is quantized (quantization_config)",
         "vLLM and SGLang load a quantized draft through the quantizer its config names; z-lab, lmdeploy "
         "and the MLX ports expect bf16 tensors. Quantized DFlash2 drafts are reported at ~0% "
         "acceptance or crashing (sglang#39087); the draft is small and bf16 is what it was trained in.",
         "Use the bf16 draft as published."),
    ("DF225", "vocab-map-shape", "error", "d2t/t2d are missing or do not match draft_vocab_size",
         "With draft_vocab_size, d2t must be [draft_vocab_size] (the offset from each draft id to its "
         "target id) and t2d [vocab_size]; without them, or with other shapes, draft ids cannot be "
         "mapped to target ids.",
         "Re-download the weights together with the config they were published with."),
    ("DF226", "pickled-side-file", "warning", "A pickled side file an engine loads sits beside the weights",
         "Files such as mask_embedding.pt (vLLM's qwen3_dflash.py loads it with torch.load) are pickles: "
         "loading them can run code. This tool lists them and never opens them.",
         "Read what produced the file before serving; drop it if your engine does not need it."),
    ("DF310", "mask-is-special-token", "error", "mask_token_id is the target's eos, bos or pad token",
         "The masked block positions take the target's embedding of mask_token_id. When that id is an "
         "eos, bos or pad id of the target (config.json, its text_config, or generation_config.json), "
         "the block is filled with that token instead of the trained mask (a mask falling back to pad, "
         "often equal to eos: NeMo#2461). It loads and accepts little. DF305 reports pad in config.json.",
         "Use the family's dedicated mask id (151669 for Qwen3, 248070/248077 for Qwen3.5/3.6)."),
    ("DF312", "quantized-lm-head-dflash2", "error", "The target quantizes lm_head and the draft is DFlash2",
         "A DFlash2 draft's candidate selector re-ranks the target lm_head's top-k; vLLM's "
         "qwen3_dflash2.py requires an unquantized lm_head and SGLang accepts ~0% with a quantized one "
         "(sglang#35534). The target's quantization_config quantizes lm_head when it says so or when its "
         "ignore list does not name it.",
         "Use a target quantized with lm_head in the ignore list (or unquantized)."),
    ("DF313", "unknown-target-family", "warning", "No engine serves DFlash drafts for the target's model_type",
         "The target's model_type is neither one any modelled engine's DFlash path serves nor one the "
         "reference runtime runs; the pairing checks pass on dimensions alone, which says nothing about "
         "whether any engine can tap this target's layers.",
         "Check --target names the target model, and the engine's supported models."),
    ("DF314", "hub-revision-not-pinned", "info", "A Hub draft was given without a pinned revision",
         "The same Hub repo has changed layout between revisions (z-lab/dflash#152: 4 layers and 6 taps "
         "became 6 and 8), so a draft named without a commit may not be the one checked. The message "
         "gives the exact commit it resolved to.",
         "Pin the commit shown: ORG/NAME@COMMIT (or --revision COMMIT) in inspect and in the engine."),
]
