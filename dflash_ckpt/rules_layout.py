"""The rules of block layouts, sibling families and what users hit (issue 26): DF160-DF171,
DF227-DF229, DF315-DF317, as plain data that ``rules`` turns into ``Rule``s. Fields as
``rules.Rule``: code, name, severity, summary, explanation, fix."""

from __future__ import annotations

LAYOUT_RULES: list[tuple[str, str, str, str, str, str]] = [
    ("DF160", "anchor-first-layout", "warning", "The draft is anchor-first: most DFlash paths misserve it silently",
         "Two block layouts share one block_size: 1+N drafts take block slots 1..B-1 (B-1 drafts, verify width B), "
         "anchor-first drafts (DeepSpec DFlash/DSpark, speculators' DSpark default, SpecForge Domino with "
         "shift_label) take slots 0..B-1 (B drafts, verify width B+1). The layout comes from sample_from_anchor "
         "(nested or top level), dflash_config.query_zero_predicts_next, dflash_config.shift_label, or a "
         "DSpark-family architecture. An engine path that runs the other layout loads the draft and accepts ~1 "
         "token per step with no error (sglang#40144, vllm#56792). The message names, per engine, whether it "
         "runs it, refuses it, or misserves it; reader rows and serve lines follow it.",
         "Serve it with an engine the message says runs it (DSpark paths: vLLM method \"dspark\", SGLang DSPARK "
         "with markov_rank > 0, TensorRT-LLM decoding_type DSpark)."),
    ("DF161", "layout-declarations-conflict", "error", "The block-layout declarations contradict each other",
         "Two of sample_from_anchor (nested, top level), dflash_config.query_zero_predicts_next and "
         "dflash_config.shift_label disagree. Each engine reads one of them (or none), so engines would run the "
         "draft in different layouts, and at most one of them is the trained one.",
         "Keep the declaration of the layout it was trained in and drop the other; `dflash-ckpt probe-taps` "
         "measures it when unknown."),
    ("DF162", "layout-declaration-invalid", "error", "A block-layout declaration is not true or false",
         "sample_from_anchor, query_zero_predicts_next and shift_label are booleans; a string or number is read "
         "as true by some engines and ignored by others.",
         "Write true or false (JSON booleans)."),
    ("DF163", "dspark-layout-ambiguous", "warning", "A speculators DSpark export does not declare its layout",
         "speculators_model_type \"dspark\" without sample_from_anchor: speculators' DSpark exports default to "
         "anchor-first and the DSpark paths of vLLM and SGLang read a missing key as true, while every DFlash "
         "path runs 1+N. The message names what each reader assumes.",
         "Add \"sample_from_anchor\" at the top level with the layout the draft was trained in."),
    ("DF164", "own-embedding", "info", "The draft ships its own embed_tokens",
         "Most DFlash drafts borrow the target's embeddings; some ship their own (Nemotron-3.5 NVFP4-DFlash: "
         "embed_tokens without lm_head; DeepSpec drafts: both, frozen copies of the target's). vLLM loads "
         "them (process_eagle_weight), the MLX ports stop on them (omlx#827), the other engines use the "
         "target's. Their shapes are checked like every tensor's.",
         "Nothing to do for vLLM; for the MLX ports, drop the tensor (the target's is the same)."),
    ("DF165", "dspark-key-invalid", "error", "A DSpark key has the wrong type",
         "A DSpark draft's heads are built from markov_rank (a non-negative integer; 0 is plain anchor-first "
         "DFlash), markov_head_type (a string), enable_confidence_head / confidence_head_with_markov (booleans), "
         "dspark_block_size, dspark_draft_topk and num_anchors (positive integers), dspark_noise_token_id and "
         "dspark_target_layer_ids. A value of another type builds another head or none.",
         "Restore the value the draft was exported with."),
    ("DF166", "laguna-layer-types", "error", "A Laguna draft mixes layer kinds",
         "vLLM's laguna_dflash.py runs one layer flavour for every draft layer and raises when layer_types holds "
         "more than one kind.",
         "Use the layer_types the draft was trained with (one kind, one entry per layer)."),
    ("DF167", "lilicorr-draft", "info", "A LiLiCorr draft: served by vLLM's V2 runner only",
         "LiLiCorr (LiLiCorrDraftModel, lilicorr_* keys in dflash_config) is a DFlash backbone with a "
         "candidate-lattice head. vLLM's models/lilicorr.py serves it on the V2 model runner; its V1 runner (and "
         "so the CPU build) refuses it, no other modelled engine has it, and smoke-run's reference runtime does "
         "not run the head.",
         "Serve it with vLLM on a GPU (V2 runner)."),
    ("DF168", "speculative-tokens-above-block", "error", "The config asks for more drafts per step than a block holds",
         "A block of B drafts B-1 tokens (1+N) or B (anchor-first); DSpark collapses above dspark_block_size. A "
         "num_speculative_tokens above that (16 on a b16 1+N draft) breaks vLLM's scheduler (vllm#50708: "
         "\"max_num_scheduled_tokens is set to -1792\").",
         "Serve it with num_speculative_tokens at most the number the message gives."),
    ("DF315", "draft-context-short", "warning", "The draft's max_position_embeddings is below the target's context",
         "vLLM's V2 runner sizes the draft's positions from the draft config and crashes at the first request "
         "longer than that (vllm#57941: Muse-Glimmer at 131072; a DFlash2 draft at 262144 under a 1M YaRN target). "
         "The vLLM serve line caps --max-model-len at the draft's value.",
         "Serve with --max-model-len at most the draft's max_position_embeddings (the serve line does)."),
    ("DF316", "token-id-beyond-embedding", "error", "A token id is not a row of the embedding",
         "The target's eos/bos/pad ids, the ids its tokenizer config names, or the draft's draft_vocab_size reach "
         "past the target's embedding rows (vocab_size): the first such token is an out-of-bounds gather or an "
         "'invalid token' error (llama.cpp#28158 'invalid token[1] = 248320'; a vLLM index assertion with an AWQ "
         "target).",
         "Use the tokenizer and configs published with the target's weights."),
    ("DF317", "laguna-draft-vocab", "error", "A Laguna draft's draft_vocab_size is not the target's vocabulary",
         "vLLM's laguna_dflash.py requires draft_vocab_size and requires it equal to the target's vocab_size.",
         "Set draft_vocab_size to the target's vocab_size (the draft's lm_head must have that many rows)."),
    ("DF318", "fp16-run", "warning", "The run is in float16, or on a GPU without bfloat16",
         "DFlash drafts are trained in bfloat16. fp16 activations overflow in fc on Qwen3 hidden-state outliers and "
         "acceptance falls to ~0 (dflash-mlx#60, lmdeploy #4991; fp16 DFlash2 on vLLM: vllm#55250); GPUs of compute "
         "capability below 8.0 (V100 and older) have no bf16, so engines there run fp16 (1Cat-vLLM#478).",
         "Run in bfloat16 on an SM 8.0+ GPU (or the CPU); --draft-dtype bfloat16."),
    ("DF319", "hub-repo-changed-in-place", "warning", "Another cached commit of the Hub repo is a different draft",
         "The local Hugging Face cache holds another commit of the draft's repo whose depth, taps, layer kinds, "
         "sliding window or block differ: the repo was re-uploaded in place (z-lab/dflash#152: 4 layers and 6 taps "
         "became 6 and 8; the old draft accepted 1.4-2.6% on the new target code). An engine started from the old "
         "snapshot serves the other draft. Only cached files are read (no request).",
         "Pin the commit checked (ORG/NAME@COMMIT) in inspect and in the engine, or delete the old snapshot."),
]
