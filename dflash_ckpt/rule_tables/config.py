"""The draft's config.json: DF101-DF154 (the DFlash keys, tap layers, layer kinds, shape keys, and the
keys engines read differently or ignore).

Rows as ``rules.Rule`` takes them (code, name, severity, summary, explanation, fix), plain
data so that ``rules`` (which every layer imports) imports nothing of the package for them."""

from __future__ import annotations

ROWS: tuple[tuple[str, str, str, str, str, str], ...] = (
    ("DF101", "missing-dflash-key", "error", "A required DFlash key is missing",
     "block_size, mask_token_id and target_layer_ids are needed by every engine and cannot be inferred "
     "from the weights. target_layer_ids in particular is a training-time choice: an evenly spaced guess "
     "loads cleanly and collapses acceptance.",
     "Take the value from the draft's model card or training config and run `dflash-ckpt normalize DRAFT "
     "OUT --target-layer-ids ... --block-size N --mask-token-id N`. Lost target_layer_ids can be measured "
     "instead: `dflash-ckpt probe-taps DRAFT --target TARGET --write OUT`."),
    ("DF102", "missing-num-target-layers", "warning", "num_target_layers is missing",
     "num_target_layers is the target's depth. The z-lab reference, SGLang and lmdeploy read it, and "
     "without it the tap layers cannot be range-checked.",
     "Run `dflash-ckpt normalize DRAFT OUT --num-target-layers N` with N the target's num_hidden_layers."),
    ("DF103", "nested-top-level-conflict", "error", "A DFlash key has different values nested and at the top level",
     "The key appears both in dflash_config and at the top level with different values. Engines disagree "
     "on which one wins (see docs/DESIGN.md section 3: SGLang reads nested first, the older z-lab "
     "reference reads block_size only at the top level), so the same file runs with different settings in "
     "different engines.",
     "Decide which value is right and run `dflash-ckpt normalize DRAFT OUT --prefer nested` (or `--prefer "
     "top-level`)."),
    ("DF104", "wrong-key-type", "error", "A DFlash key has the wrong type",
     "block_size, mask_token_id and num_target_layers must be integers and dflash_config an object. "
     "Engines cast or crash on other types.",
     "Write the value as a plain JSON integer (16, not \"16\" or 16.0)."),
    ("DF110", "layer-ids-not-int-list", "error", "target_layer_ids is not a list of integers",
     "target_layer_ids must be a JSON list of integers: the 0-based target layers whose outputs the draft "
     "reads.",
     "Write it as a list such as [1, 9, 17, 25, 33]."),
    ("DF111", "layer-ids-empty", "error", "target_layer_ids is empty",
     "A draft reads at least one tapped target layer; fc.weight is [H, k*H] with k >= 1.",
     "Restore the trained tap layers from the model card."),
    ("DF112", "layer-ids-not-increasing", "error", "target_layer_ids is not strictly increasing",
     "The order of target_layer_ids is the order in which features are concatenated before fc. Published "
     "drafts and lmdeploy use increasing order; a shuffled list feeds fc the features in the wrong slots "
     "and acceptance collapses.",
     "Restore the trained order (increasing in every published draft)."),
    ("DF113", "layer-ids-duplicate", "error", "target_layer_ids repeats a layer",
     "Each tap must be a distinct target layer.",
     "Remove the duplicate; the list length must still match fc.weight (see DF211)."),
    ("DF114", "layer-id-out-of-range", "error", "A tap layer is outside the target",
     "Every id must satisfy -1 <= id < num_target_layers (-1 is the embedding output, which DeepSpec "
     "drafts tap). An id equal to num_target_layers usually means the ids were written in the HF "
     "hidden_states convention (i+1), as vLLM and llama.cpp store them, instead of the 'output of layer "
     "i' convention DFlash uses.",
     "Subtract 1 from every id if they came from a vLLM/speculators/GGUF config; otherwise check "
     "num_target_layers."),
    ("DF120", "block-size-too-small", "error", "block_size is below 2",
     "block_size counts the anchor token plus the drafted positions; below 2 nothing is drafted.",
     "Use the block size the draft was trained with (16 for most published drafts)."),
    ("DF121", "mask-token-negative", "error", "mask_token_id is negative",
     "mask_token_id indexes the target's embedding table.",
     "Use the mask id of the model family (151669 for Qwen3)."),
    ("DF122", "mask-token-out-of-vocab", "error", "mask_token_id is not below vocab_size",
     "The masked positions are filled with the target embedding of mask_token_id; it must be a row of the "
     "table (< vocab_size). It may lie past the tokenizer's own vocabulary.",
     "Use the family's mask id, or fix vocab_size to the target's."),
    ("DF130", "layer-types-length", "error", "layer_types does not have one entry per draft layer",
     "layer_types lists the attention kind of each draft layer; its length must equal num_hidden_layers. "
     "Engines index it per layer.",
     "Make layer_types exactly num_hidden_layers entries long."),
    ("DF131", "layer-types-value", "error", "layer_types holds an unknown attention kind",
     "Each entry must be 'full_attention' or 'sliding_attention'.",
     "Replace the entry with one of the two known kinds."),
    ("DF132", "sliding-without-window", "error", "A sliding-attention layer has no window",
     "A sliding_attention layer needs a positive sliding_window; without it engines either crash or "
     "silently attend to everything.",
     "Set sliding_window to the trained window (2048 or 4096 in published drafts)."),
    ("DF133", "layer-types-missing", "info", "layer_types is not given explicitly",
     "Without an explicit layer_types list, engines derive the kind of each layer from use_sliding_window "
     "/ max_window_layers, and lmdeploy 0.18 requires the list.",
     "Run `dflash-ckpt normalize`, which writes the list when the config determines it."),
    ("DF134", "optional-key-top-level-only", "warning", "An output scaling key sits only at the top level",
     "SGLang reads output_multiplier and final_logit_softcapping only from dflash_config, so a draft that "
     "keeps them at the top level (gemma-4 drafts carry a softcap of 30) is served without them there. "
     "The z-lab reference reads both places.",
     "Run `dflash-ckpt normalize`, which copies them into dflash_config."),
    ("DF140", "unknown-generation", "warning", "The architecture is not a known DFlash draft",
     "architectures names neither DFlashDraftModel nor DFlash2DraftModel, and no DFlash2 key is present, "
     "so the expected tensors are those of DFlash v1.",
     "Set architectures to [\"DFlashDraftModel\"] (or DFlash2DraftModel) if this is a DFlash draft."),
    ("DF141", "remote-code", "info", "The config names remote code",
     "auto_map points at Python code shipped with the checkpoint. This tool never runs it; engines with "
     "native DFlash support do not need it either.",
     "Nothing to fix; load with trust_remote_code only if you have read the code."),
    ("DF142", "shape-key-invalid", "error", "A key that fixes tensor shapes is missing or invalid",
     "hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads, intermediate_size, "
     "vocab_size (and head_dim when given) must be positive integers; the expected tensor shapes follow "
     "from them. smoke-run and probe-taps check a target's config the same way before building it (both "
     "backends), and also its dtype, quantization_config and pad_token_id, and that the shapes it implies "
     "match its safetensors headers.",
     "Restore the key from the published config."),
    ("DF143", "config-dtype", "warning", "The config declares a dtype other than bfloat16",
     "DFlash drafts are trained and published in bf16. Qwen3 hidden states hold outliers that overflow "
     "float16 in fc; an fp16 draft is known to collapse acceptance (0.06 of 15 accepted on Qwen3-4B).",
     "Keep the draft in bfloat16; cast target tensors to bf16 where they enter the draft."),
    ("DF144", "required-engine-fails", "error", "An engine named in --require-engines would not load the config",
     "inspect models where each engine reads the DFlash keys (docs/DESIGN.md section 3). With "
     "--require-engines, a required engine that would not load the config as it is fails the run (exit "
     "1), so CI catches a draft that one serving stack cannot read.",
     "Where the message says so, `dflash-ckpt normalize DRAFT OUT` writes a config every engine reads; "
     "otherwise supply the missing values it names (normalize's options)."),
    ("DF145", "config-value-out-of-bounds", "error", "A config number is beyond any real draft",
     "Numbers that size loops and allocations (block_size, num_hidden_layers, hidden_size, vocab_size, "
     "the length of target_layer_ids or layer_types, ...) are checked against bounds far above every "
     "published draft (README, Limits) before anything uses them; a value past them is corruption or a "
     "hostile file, and the checks that depend on it are skipped.",
     "Restore the value published with the draft."),
    ("DF146", "dflash2-key-invalid", "error", "A DFlash2 key is missing or invalid",
     "A DFlash2 draft needs conv_kernel_size, conv_group_size, selector_rank and selector_top_k (in "
     "dflash_config) as positive integers: they fix the shapes of the conv kernels, the kernel "
     "projections and the selector codebooks, and engines read them as required. conv_group_size must "
     "divide hidden_size (one dynamic coefficient per group of channels) and selector_top_k cannot exceed "
     "vocab_size.",
     "Restore the keys from the published config of the draft."),
    ("DF147", "rope-value-invalid", "error",
     "rope_theta is not a positive finite number, or a rope object is not an object",
     "The draft's attention uses the target's rotary base (rope_theta, at the top level, in "
     "rope_parameters or per layer type in it); engines and smoke-run read it as a float. A string, a "
     "boolean, an object, NaN, 0, a negative number or 1e400 (read as infinity) fails their load or gives "
     "NaN rotary tables; rope_parameters and rope_scaling must be objects (or null).",
     "Copy rope_theta (and rope_parameters) from the target's config.json."),
    ("DF148", "reader-needs-normalize", "warning", "A reader cannot load the draft as published; normalize fixes it",
     "Engines read the DFlash keys from different places (docs/DESIGN.md section 3): a draft whose "
     "block_size is only at the top level, as z-lab's early uploads are, loads in vLLM and SGLang and "
     "fails lmdeploy 0.18, which reads it only from dflash_config. The readers table says so, but a "
     "`no` row alone is silent in CI (`inspect -q`, `--strict`), and that engine's serve line is left "
     "out. The message names each reader and the normalize line that writes a config it loads.",
     "Run the `dflash-ckpt normalize DRAFT OUT` line of the message (weights are hard-linked, not "
     "changed) and publish or serve OUT; `--require-engines` makes a reader you need an error (DF144)."),
    ("DF150", "acceptance-key-ignored", "warning", "A key that changes acceptance is set, and some engines ignore it",
     "attention_sink_bias, use_swa/swa_window_size, attention_value_scale, partial_rotary_factor, "
     "output_multiplier, final_logit_softcapping and is_causal/causal change what the draft computes "
     "without changing its tensors. An engine that does not read the key (or reads it from the other "
     "place) loads the draft without a word and runs it as if the key were absent: acceptance drops and "
     "nothing fails. The message names the engines that ignore it and those that apply it; the reader "
     "verdicts say \"loads, but ignores KEY\".",
     "Serve the draft with an engine that applies the key (the message names them); smoke-run refuses "
     "keys the reference runtime does not implement (DF151)."),
    ("DF151", "runtime-lacks-key", "error", "smoke-run and probe-taps refuse a draft whose acceptance keys the runtime does not implement",
     "The reference runtime implements output_multiplier, final_logit_softcapping, input_embedding_scale, "
     "is_causal and sliding layers; a draft that sets attention_sink_bias, use_swa, "
     "attention_value_scale, partial_rotary_factor or dflash_config.causal, or a reduced vocabulary "
     "(draft_vocab_size with d2t/t2d), would run as another model, and its tau would say nothing about "
     "the checkpoint. smoke-run stops before loading anything (exit 2).",
     "Measure the draft in an engine that applies the key (see `dflash-ckpt inspect` readers)."),
    ("DF152", "dflash2-labelled-v1", "error", "A DFlash2 draft's architectures says DFlashDraftModel",
     "The config holds the DFlash2 keys (conv_kernel_size, ...), but architectures names the v1 model "
     "(vLLM 0.23's speculators update rewrote it that way). Engines pick the model class by that name: "
     "they build DFlash v1, drop the conv layers and the candidate selector, and accept almost nothing.",
     "Set architectures to [\"DFlash2DraftModel\"]."),
    ("DF153", "reduced-draft-vocab", "warning", "The draft uses a reduced vocabulary (draft_vocab_size)",
     "speculators-format drafts may predict over draft_vocab_size ids and map them to target ids through "
     "a d2t tensor (t2d marks the target ids kept). vLLM maps them; engines that do not read draft ids as "
     "target ids and accept nothing, and smoke-run refuses the draft (DF151). An invalid draft_vocab_size "
     "is reported here too.",
     "Serve it with vLLM, or use a draft over the full target vocabulary."),
    ("DF154", "quantized-draft", "warning", "The draft is quantized (quantization_config)",
     "vLLM and SGLang load a quantized draft through the quantizer its config names; z-lab, lmdeploy and "
     "the MLX ports expect bf16 tensors. Quantized DFlash2 drafts are reported at ~0% acceptance or "
     "crashing (sglang#39087); the draft is small and bf16 is what it was trained in.",
     "Use the bf16 draft as published."),
)
