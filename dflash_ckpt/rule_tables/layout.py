"""Block layouts and the sibling families: DF160-DF168 (what the config declares, what the engines'
paths run) and the layout measurements of probe-taps and smoke-run --layout (DF416-DF418).

Rows as ``rules.Rule`` takes them (code, name, severity, summary, explanation, fix), plain
data so that ``rules`` (which every layer imports) imports nothing of the package for them."""

from __future__ import annotations

ROWS: tuple[tuple[str, str, str, str, str, str], ...] = (
    ("DF160", "anchor-first-layout", "warning", "The draft is anchor-first: most DFlash paths misserve it silently",
     "Two block layouts share one block_size: 1+N drafts take block slots 1..B-1 (B-1 drafts, verify "
     "width B), anchor-first drafts (DeepSpec DFlash/DSpark, speculators' DSpark default, SpecForge "
     "Domino with shift_label) take slots 0..B-1 (B drafts, verify width B+1). The layout comes from "
     "sample_from_anchor (nested or top level), dflash_config.query_zero_predicts_next, "
     "dflash_config.shift_label, a speculators export's speculative_tokens, or a DSpark-family architecture. An engine path that runs the other "
     "layout loads the draft and accepts ~1 token per step with no error (sglang#40144, vllm#56792). The "
     "message names, per engine, whether it runs it, refuses it, or misserves it; reader rows and serve "
     "lines follow it.",
     "Serve it with an engine the message says runs it (DSpark paths: vLLM method \"dspark\", SGLang DSPARK "
     "with markov_rank > 0, TensorRT-LLM decoding_type DSpark)."),
    ("DF161", "layout-declarations-conflict", "error", "The block-layout declarations contradict each other",
     "Two of sample_from_anchor (nested, top level), dflash_config.query_zero_predicts_next, "
     "dflash_config.shift_label and a speculators export's speculators_config.proposal_methods[0]"
     ".speculative_tokens (block_size: anchor-first, block_size - 1: 1+N) disagree. Each engine reads one of them (or none), so engines would run "
     "the draft in different layouts, and at most one of them is the trained one.",
     "Keep the declaration of the layout it was trained in and drop the other; `dflash-ckpt probe-taps` "
     "measures it when unknown."),
    ("DF162", "layout-declaration-invalid", "error", "A block-layout declaration is not true or false",
     "sample_from_anchor, query_zero_predicts_next and shift_label are booleans; a string or number is "
     "read as true by some engines and ignored by others.",
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
     "DFlash), markov_head_type (a string), enable_confidence_head / confidence_head_with_markov "
     "(booleans), dspark_block_size, dspark_draft_topk and num_anchors (positive integers), "
     "dspark_noise_token_id and dspark_target_layer_ids. A value of another type builds another head or "
     "none.",
     "Restore the value the draft was exported with."),
    ("DF166", "laguna-layer-types", "error", "A Laguna draft mixes layer kinds",
     "vLLM's laguna_dflash.py runs one layer flavour for every draft layer and raises when layer_types "
     "holds more than one kind.",
     "Use the layer_types the draft was trained with (one kind, one entry per layer)."),
    ("DF167", "lilicorr-draft", "info", "A LiLiCorr draft: served by vLLM's V2 runner only",
     "LiLiCorr (LiLiCorrDraftModel, lilicorr_* keys in dflash_config) is a DFlash backbone with a "
     "candidate-lattice head. vLLM's models/lilicorr.py serves it on the V2 model runner; its V1 runner "
     "(and so the CPU build) refuses it, no other modelled engine has it, and smoke-run's reference "
     "runtime does not run the head.",
     "Serve it with vLLM on a GPU (V2 runner)."),
    ("DF168", "speculative-tokens-above-block", "error",
     "The config asks for more drafts per step than a block holds",
     "A block of B drafts B-1 tokens (1+N) or B (anchor-first); DSpark collapses above dspark_block_size. "
     "A num_speculative_tokens above that (16 on a b16 1+N draft) breaks vLLM's scheduler (vllm#50708: "
     "\"max_num_scheduled_tokens is set to -1792\").",
     "Serve it with num_speculative_tokens at most the number the message gives."),
    ("DF416", "layout-wrong", "error", "The draft measures clearly better in the other block layout",
     "Run in the layout it was not trained in, every draft token is one position off: acceptance falls to "
     "about 1 and nothing fails (sglang#40144, vllm#56792). probe-taps measured both layouts and the one "
     "the config declares (or, with no declaration, the 1+N default every DFlash reader assumes) loses by "
     "at least one standard error.",
     "Record the measured layout: probe-taps --write OUT writes dflash_config.sample_from_anchor (or the "
     "keys the engines named with --layout-for read); serve the draft where that layout runs."),
    ("DF417", "layout-unclear", "error", "The other block layout leads only within measurement noise",
     "probe-taps measured both layouts with the winning taps and the one the config does not declare "
     "leads, but by less than one standard error or on fewer than 8 steps each: the declared layout is "
     "not confirmed and no layout is named (a wrong one loads cleanly and serves at tau ~1); --write "
     "records none. (The declared layout leading within noise stands, as configured taps do.)",
     "Rerun with more tokens (-n) or more prompts in the draft's training format (--prompts), or check "
     "the model card."),
    ("DF418", "layout-overridden", "warning", "smoke-run ran the draft in another layout than its config declares",
     "--layout forced the block layout; every engine follows the config instead, so the run's figures are "
     "not what an engine would serve. Run in the wrong layout a working draft drops to tau ~1.",
     "If the forced layout is the trained one, record it (probe-taps --write OUT); otherwise leave "
     "--layout out."),
)
