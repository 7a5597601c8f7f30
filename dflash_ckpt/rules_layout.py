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
]
