"""Pairing the draft with its target: DF301-DF321 (dimensions, mask and special ids, the target's
family, quantized lm_head, context, the Hub revision, Hub code named by the target's config).

Rows as ``rules.Rule`` takes them (code, name, severity, summary, explanation, fix), plain
data so that ``rules`` (which every layer imports) imports nothing of the package for them."""

from __future__ import annotations

ROWS: tuple[tuple[str, str, str, str, str, str], ...] = (
    ("DF301", "target-depth", "error", "num_target_layers differs from the target's depth",
     "num_target_layers must equal the target's num_hidden_layers: the draft was trained on a target of "
     "that depth. lmdeploy refuses the pair; others run it at low acceptance.",
     "Use the draft trained for this target, or fix num_target_layers if it was mistyped."),
    ("DF302", "target-hidden-size", "error", "hidden_size differs from the target's",
     "The draft consumes the target's hidden states and embeddings; their width must match.",
     "Use the draft trained for this target."),
    ("DF303", "target-vocab", "error", "vocab_size differs from the target's",
     "The draft uses the target's lm_head, so both must have the same vocabulary size (vLLM checks it).",
     "Set vocab_size to the target's if the draft was trained for it; otherwise use another draft."),
    ("DF304", "mask-outside-target-vocab", "error", "mask_token_id is not a row of the target's embeddings",
     "The masked block positions take the target's embedding of mask_token_id, which must be below the "
     "target's vocab_size.",
     "Use the mask id of the target's family."),
    ("DF305", "mask-is-pad", "error", "mask_token_id is the target's pad token",
     "The pad embedding is often zero or untrained; filling masked positions with it is not what the "
     "draft was trained on.",
     "Use the mask id of the target's family (a dedicated reserved token)."),
    ("DF306", "tap-beyond-target", "error", "A tap layer is beyond the target's depth",
     "Every target_layer_id must be below the target's num_hidden_layers.",
     "Use the draft trained for this target."),
    ("DF307", "tap-on-last-layer", "warning", "A tap reads the target's last layer",
     "In Hugging Face's hidden_states the last entry is taken after the final norm, not the raw output of "
     "the last layer; engines differ on which they feed, so acceptance depends on the engine.",
     "Nothing to change in the file; prefer engines that tap the raw layer output."),
    ("DF308", "target-unreadable-keys", "error", "The target's config lacks a dimension",
     "The target's config.json (or its text_config) must give num_hidden_layers, hidden_size and "
     "vocab_size for the pair to be checked.",
     "Point --target at the target model's folder or repo."),
    ("DF310", "mask-is-special-token", "error", "mask_token_id is the target's eos, bos or pad token",
     "The masked block positions take the target's embedding of mask_token_id. When that id is an eos, "
     "bos or pad id of the target (config.json, its text_config, or generation_config.json), the block is "
     "filled with that token instead of the trained mask (a mask falling back to pad, often equal to eos: "
     "NeMo#2461). It loads and accepts little. DF305 reports pad in config.json.",
     "Use the family's dedicated mask id (151669 for Qwen3, 248070/248077 for Qwen3.5/3.6)."),
    ("DF312", "quantized-lm-head-dflash2", "error", "The target quantizes lm_head and the draft is DFlash2",
     "A DFlash2 draft's candidate selector re-ranks the target lm_head's top-k; vLLM's qwen3_dflash2.py "
     "requires an unquantized lm_head and SGLang accepts ~0% with a quantized one (sglang#35534). The "
     "target's quantization_config quantizes lm_head when it says so or when its ignore list does not "
     "name it.",
     "Use a target quantized with lm_head in the ignore list (or unquantized)."),
    ("DF313", "unknown-target-family", "warning", "No engine serves DFlash drafts for the target's model_type",
     "The target's model_type is neither one any modelled engine's DFlash path serves nor one the "
     "reference runtime runs; the pairing checks pass on dimensions alone, which says nothing about "
     "whether any engine can tap this target's layers.",
     "Check --target names the target model, and the engine's supported models."),
    ("DF314", "hub-revision-not-pinned", "info", "A Hub draft was given without a pinned revision",
     "The same Hub repo has changed layout between revisions (z-lab/dflash#152: 4 layers and 6 taps "
     "became 6 and 8), so a draft named without a commit may not be the one checked. The message gives "
     "the exact commit it resolved to.",
     "Pin the commit shown: ORG/NAME@COMMIT (or --revision COMMIT) in inspect and in the engine."),
    ("DF315", "draft-context-short", "warning", "The draft's max_position_embeddings is below the target's context",
     "vLLM's V2 runner sizes the draft's positions from the draft config and crashes at the first request "
     "longer than that (vllm#57941: Muse-Glimmer at 131072; a DFlash2 draft at 262144 under a 1M YaRN "
     "target). The vLLM serve line caps --max-model-len at the draft's value.",
     "Serve with --max-model-len at most the draft's max_position_embeddings (the serve line does)."),
    ("DF316", "token-id-beyond-embedding", "error", "A token id is not a row of the embedding",
     "The target's eos/bos/pad ids, the ids its tokenizer config names, or the draft's draft_vocab_size "
     "reach past the target's embedding rows (vocab_size): the first such token is an out-of-bounds "
     "gather or an 'invalid token' error (llama.cpp#28158 'invalid token[1] = 248320'; a vLLM index "
     "assertion with an AWQ target).",
     "Use the tokenizer and configs published with the target's weights."),
    ("DF317", "laguna-draft-vocab", "error", "A Laguna draft's draft_vocab_size is not the target's vocabulary",
     "vLLM's laguna_dflash.py requires draft_vocab_size and requires it equal to the target's vocab_size.",
     "Set draft_vocab_size to the target's vocab_size (the draft's lm_head must have that many rows)."),
    ("DF318", "fp16-run", "warning", "The run is in float16, or on a GPU without bfloat16",
     "DFlash drafts are trained in bfloat16. fp16 activations overflow in fc on Qwen3 hidden-state "
     "outliers and acceptance falls to ~0 (dflash-mlx#60, lmdeploy #4991; fp16 DFlash2 on vLLM: "
     "vllm#55250); GPUs of compute capability below 8.0 (V100 and older) have no bf16, so engines there "
     "run fp16 (1Cat-vLLM#478). A warning on a run that finished; a bfloat16 run that fails on such a "
     "GPU for want of a bf16 kernel stops with this code as an error line (exit 2: the pair is not judged).",
     "Run in bfloat16 on an SM 8.0+ GPU (or the CPU); --draft-dtype bfloat16."),
    ("DF319", "hub-repo-changed-in-place", "warning", "Another cached commit of the Hub repo is a different draft",
     "The local Hugging Face cache holds another commit of the draft's repo whose depth, taps, layer "
     "kinds, sliding window or block differ: the repo was re-uploaded in place (z-lab/dflash#152: 4 "
     "layers and 6 taps became 6 and 8; the old draft accepted 1.4-2.6% on the new target code). An "
     "engine started from the old snapshot serves the other draft. Only cached files are read (no "
     "request).",
     "Pin the commit checked (ORG/NAME@COMMIT) in inspect and in the engine, or delete the old snapshot."),
    ("DF320", "mask-is-ordinary-token", "warning", "mask_token_id is an ordinary token of the target's tokenizer",
     "The masked block positions take the target's embedding of mask_token_id. Published drafts use a "
     "dedicated id: a reserved row past the tokenizer's vocabulary (151669 for Qwen3) or a token added "
     "for it. An id the tokenizer numbers below its first special or added token "
     "(tokenizer_config.json's added_tokens_decoder) is an ordinary token (mask_token_id 100 in Qwen3): "
     "it loads in every engine and fills the block with that word, so a draft trained on the "
     "real mask accepts little. Checked when the target ships a tokenizer config that lists its added "
     "tokens (read as JSON, no tokenizer library).",
     "Use the family's dedicated mask id (151669 for Qwen3, 248070/248077 for Qwen3.6/3.5, 200000 for "
     "gpt-oss): `dflash-ckpt normalize DRAFT OUT --mask-token-id N`."),
    ("DF321", "target-names-hub-code", "error", "The target's config names kernel code to fetch from the Hub",
     "transformers turns an attention or experts implementation spelled org/name (kernels-community/flash-attn) "
     "into a download and import of that Hub repo's kernel, and use_kernels or kernel_config into Hub kernels "
     "for the whole model. This tool never runs code from a checkpoint, and running the target without them "
     "would run something the config does not say, so smoke-run and probe-taps refuse the target on either "
     "backend before anything is built.",
     "Remove the key from the target's config.json (the run pins its own attention: sdpa, or eager)."),
)
