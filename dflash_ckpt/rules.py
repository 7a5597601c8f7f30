"""The rule registry: every finding the tool can report, with a stable code and one explanation.

Codes never change meaning once published; a retired rule keeps its number. Ranges:
DF0xx reading the input, DF1xx the config, DF2xx the weights, DF3xx pairing with a target,
DF4xx running the pair (smoke-run, probe-taps).
"""

from __future__ import annotations

import os
from enum import Enum
from typing import NamedTuple

from dflash_ckpt.errors import error_line
from dflash_ckpt.rules_engines import ENGINE_RULES
from dflash_ckpt.rules_vllm import VLLM_RULES
from dflash_ckpt.rules_mistakes import MISTAKE_RULES
from dflash_ckpt.rules_layout_probe import LAYOUT_PROBE_RULES
from dflash_ckpt.rules_layout import LAYOUT_RULES
from dflash_ckpt.rules_quant import QUANT_RULES


class Severity(str, Enum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"

    @property
    def rank(self) -> int:
        return {"error": 2, "warning": 1, "info": 0}[self.value]


class Rule(NamedTuple):
    code: str
    name: str
    severity: Severity
    summary: str
    explanation: str
    fix: str

    def to_json(self) -> dict[str, str]:
        return {
            "code": self.code,
            "name": self.name,
            "severity": self.severity.value,
            "summary": self.summary,
            "explanation": self.explanation,
            "fix": self.fix,
        }


class Finding(NamedTuple):
    """One problem (or fact) found in a checkpoint.

    ``path`` is the file (or folder) it is about, ``key`` the config key (dotted, as in
    ``dflash_config.block_size``) or tensor it names, both ``None`` where there is none;
    ``message`` is the text after the path.
    """

    code: str
    severity: Severity
    message: str
    path: str | None = None
    key: str | None = None

    def line(self, where: str | None = None) -> str:
        """``PATH: CODE severity: message``; ``where`` stands in when the finding names no file."""
        return error_line(self.path or where, self.code, self.severity.value, self.message)

    def to_json(self) -> dict[str, str | None]:
        return {"code": self.code, "severity": self.severity.value, "path": self.path, "key": self.key,
                "message": self.message}


E, W, I = Severity.ERROR, Severity.WARNING, Severity.INFO

_RULES: list[Rule] = [
    # -- DF0xx: reading the input ---------------------------------------------------------------
    Rule("DF001", "unreadable-input", E, "A file or folder cannot be read",
         "The checkpoint folder, its config.json or another file could not be opened: it is "
         "missing, not readable by this user, a link that loops or dangles, or a Hub repo that "
         "is not cached and cannot be fetched. Nothing past it can be checked (exit 2).",
         "Check the path or repo id; fix permissions (chmod) or re-download the file."),
    Rule("DF002", "invalid-json", E, "A JSON file does not parse",
         "config.json (or the shard index, or the target's config.json) is not valid JSON. The "
         "message gives the line and column where the parser stopped.",
         "Fix the syntax at the line and column named; a trailing comma or an unquoted key is "
         "the usual cause. Re-download the file if it was cut short."),
    Rule("DF003", "config-not-object", E, "config.json is not a JSON object",
         "A config must be an object of keys ({...}); a list, string or number at the top level "
         "cannot hold the model's settings.",
         "Restore the published config.json; it is an object of keys."),
    Rule("DF004", "usage-error", E, "The command line is wrong",
         "An unknown option, a missing argument, options that contradict each other or the "
         "checkpoint, or a value out of range. Nothing was read or written past it (exit 2).",
         "Read the message and `dflash-ckpt COMMAND --help`; the message names the option."),
    Rule("DF005", "refused-by-checks", E, "The command refused to go on because checks failed",
         "normalize checks the config it would write with inspect's checks and writes nothing "
         "when one fails; the failing codes are listed on the lines before (exit 1).",
         "Run `dflash-ckpt inspect` on the draft and `dflash-ckpt rules CODE` for each code."),
    Rule("DF020", "not-canonical", E, "normalize --check: the config is not in the canonical form",
         "normalize --check found that normalize would change config.json (keys to nest, mirrors "
         "or an explicit layer_types to add; docs/DESIGN.md section 4). Some engine reads a key "
         "from a place where this config does not hold it, or will once it is edited (exit 1).",
         "Run `dflash-ckpt normalize DRAFT --in-place` (or `dflash-ckpt normalize DRAFT OUT` for a "
         "copy); `--dry-run` shows the diff first."),
    # -- DF1xx: the config ----------------------------------------------------------------------
    Rule("DF101", "missing-dflash-key", E, "A required DFlash key is missing",
         "block_size, mask_token_id and target_layer_ids are needed by every engine and cannot "
         "be inferred from the weights. target_layer_ids in particular is a training-time choice: "
         "an evenly spaced guess loads cleanly and collapses acceptance.",
         "Take the value from the draft's model card or training config and run `dflash-ckpt "
         "normalize DRAFT OUT --target-layer-ids ... --block-size N --mask-token-id N`. Lost "
         "target_layer_ids can be measured instead: `dflash-ckpt probe-taps DRAFT --target TARGET "
         "--write OUT`."),
    Rule("DF102", "missing-num-target-layers", W, "num_target_layers is missing",
         "num_target_layers is the target's depth. The z-lab reference, SGLang and lmdeploy read "
         "it, and without it the tap layers cannot be range-checked.",
         "Run `dflash-ckpt normalize DRAFT OUT --num-target-layers N` with N the target's "
         "num_hidden_layers."),
    Rule("DF103", "nested-top-level-conflict", E, "A DFlash key has different values nested and at the top level",
         "The key appears both in dflash_config and at the top level with different values. "
         "Engines disagree on which one wins (see docs/DESIGN.md section 3: SGLang reads nested first, the older "
         "z-lab reference reads block_size only at the top level), so the same file runs with "
         "different settings in different engines.",
         "Decide which value is right and run `dflash-ckpt normalize DRAFT OUT --prefer nested` "
         "(or `--prefer top-level`)."),
    Rule("DF104", "wrong-key-type", E, "A DFlash key has the wrong type",
         "block_size, mask_token_id and num_target_layers must be integers and dflash_config an "
         "object. Engines cast or crash on other types.",
         "Write the value as a plain JSON integer (16, not \"16\" or 16.0)."),
    Rule("DF110", "layer-ids-not-int-list", E, "target_layer_ids is not a list of integers",
         "target_layer_ids must be a JSON list of integers: the 0-based target layers whose "
         "outputs the draft reads.",
         "Write it as a list such as [1, 9, 17, 25, 33]."),
    Rule("DF111", "layer-ids-empty", E, "target_layer_ids is empty",
         "A draft reads at least one tapped target layer; fc.weight is [H, k*H] with k >= 1.",
         "Restore the trained tap layers from the model card."),
    Rule("DF112", "layer-ids-not-increasing", E, "target_layer_ids is not strictly increasing",
         "The order of target_layer_ids is the order in which features are concatenated before "
         "fc. Published drafts and lmdeploy use increasing order; a shuffled list feeds fc the "
         "features in the wrong slots and acceptance collapses.",
         "Restore the trained order (increasing in every published draft)."),
    Rule("DF113", "layer-ids-duplicate", E, "target_layer_ids repeats a layer",
         "Each tap must be a distinct target layer.",
         "Remove the duplicate; the list length must still match fc.weight (see DF211)."),
    Rule("DF114", "layer-id-out-of-range", E, "A tap layer is outside the target",
         "Every id must satisfy -1 <= id < num_target_layers (-1 is the embedding output, which "
         "DeepSpec drafts tap). An id equal to num_target_layers "
         "usually means the ids were written in the HF hidden_states convention (i+1), as vLLM "
         "and llama.cpp store them, instead of the 'output of layer i' convention DFlash uses.",
         "Subtract 1 from every id if they came from a vLLM/speculators/GGUF config; otherwise "
         "check num_target_layers."),
    Rule("DF120", "block-size-too-small", E, "block_size is below 2",
         "block_size counts the anchor token plus the drafted positions; below 2 nothing is "
         "drafted.",
         "Use the block size the draft was trained with (16 for most published drafts)."),
    Rule("DF121", "mask-token-negative", E, "mask_token_id is negative",
         "mask_token_id indexes the target's embedding table.",
         "Use the mask id of the model family (151669 for Qwen3)."),
    Rule("DF122", "mask-token-out-of-vocab", E, "mask_token_id is not below vocab_size",
         "The masked positions are filled with the target embedding of mask_token_id; it must be "
         "a row of the table (< vocab_size). It may lie past the tokenizer's own vocabulary.",
         "Use the family's mask id, or fix vocab_size to the target's."),
    Rule("DF130", "layer-types-length", E, "layer_types does not have one entry per draft layer",
         "layer_types lists the attention kind of each draft layer; its length must equal "
         "num_hidden_layers. Engines index it per layer.",
         "Make layer_types exactly num_hidden_layers entries long."),
    Rule("DF131", "layer-types-value", E, "layer_types holds an unknown attention kind",
         "Each entry must be 'full_attention' or 'sliding_attention'.",
         "Replace the entry with one of the two known kinds."),
    Rule("DF132", "sliding-without-window", E, "A sliding-attention layer has no window",
         "A sliding_attention layer needs a positive sliding_window; without it engines either "
         "crash or silently attend to everything.",
         "Set sliding_window to the trained window (2048 or 4096 in published drafts)."),
    Rule("DF133", "layer-types-missing", I, "layer_types is not given explicitly",
         "Without an explicit layer_types list, engines derive the kind of each layer from "
         "use_sliding_window / max_window_layers, and lmdeploy 0.18 requires the list.",
         "Run `dflash-ckpt normalize`, which writes the list when the config determines it."),
    Rule("DF134", "optional-key-top-level-only", W, "An output scaling key sits only at the top level",
         "SGLang reads output_multiplier and final_logit_softcapping only from dflash_config, so a "
         "draft that keeps them at the top level (gemma-4 drafts carry a softcap of 30) is served "
         "without them there. The z-lab reference reads both places.",
         "Run `dflash-ckpt normalize`, which copies them into dflash_config."),
    Rule("DF140", "unknown-generation", W, "The architecture is not a known DFlash draft",
         "architectures names neither DFlashDraftModel nor DFlash2DraftModel, and no DFlash2 key "
         "is present, so the expected tensors are those of DFlash v1.",
         "Set architectures to [\"DFlashDraftModel\"] (or DFlash2DraftModel) if this is a DFlash draft."),
    Rule("DF141", "remote-code", I, "The config names remote code",
         "auto_map points at Python code shipped with the checkpoint. This tool never runs it; "
         "engines with native DFlash support do not need it either.",
         "Nothing to fix; load with trust_remote_code only if you have read the code."),
    Rule("DF142", "shape-key-invalid", E, "A key that fixes tensor shapes is missing or invalid",
         "hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads, "
         "intermediate_size, vocab_size (and head_dim when given) must be positive integers; "
         "the expected tensor shapes follow from them. smoke-run and probe-taps check a target's "
         "config the same way before building it (both backends), and also its dtype, "
         "quantization_config and pad_token_id, and that the shapes it implies match its "
         "safetensors headers.",
         "Restore the key from the published config."),
    Rule("DF143", "config-dtype", W, "The config declares a dtype other than bfloat16",
         "DFlash drafts are trained and published in bf16. Qwen3 hidden states hold outliers that "
         "overflow float16 in fc; an fp16 draft is known to collapse acceptance (0.06 of 15 "
         "accepted on Qwen3-4B).",
         "Keep the draft in bfloat16; cast target tensors to bf16 where they enter the draft."),
    Rule("DF144", "required-engine-fails", E, "An engine named in --require-engines would not load the config",
         "inspect models where each engine reads the DFlash keys (docs/DESIGN.md section 3). With "
         "--require-engines, a required engine that would not load the config as it is fails "
         "the run (exit 1), so CI catches a draft that one serving stack cannot read.",
         "Where the message says so, `dflash-ckpt normalize DRAFT OUT` writes a config every "
         "engine reads; otherwise supply the missing values it names (normalize's options)."),
    Rule("DF145", "config-value-out-of-bounds", E, "A config number is beyond any real draft",
         "Numbers that size loops and allocations (block_size, num_hidden_layers, hidden_size, "
         "vocab_size, the length of target_layer_ids or layer_types, ...) are checked against "
         "bounds far above every published draft (README, Limits) before anything uses them; a "
         "value past them is corruption or a hostile file, and the checks that depend on it "
         "are skipped.",
         "Restore the value published with the draft."),
    Rule("DF146", "dflash2-key-invalid", E, "A DFlash2 key is missing or invalid",
         "A DFlash2 draft needs conv_kernel_size, conv_group_size, selector_rank and selector_top_k "
         "(in dflash_config) as positive integers: they fix the shapes of the conv kernels, the "
         "kernel projections and the selector codebooks, and engines read them as required. "
         "conv_group_size must divide hidden_size (one dynamic coefficient per group of channels) "
         "and selector_top_k cannot exceed vocab_size.",
         "Restore the keys from the published config of the draft."),
    Rule("DF147", "rope-value-invalid", E, "rope_theta is not a positive finite number, or a rope object is not an object",
         "The draft's attention uses the target's rotary base (rope_theta, at the top level, in "
         "rope_parameters or per layer type in it); engines and smoke-run read it as a float. A "
         "string, a boolean, an object, NaN, 0, a negative number or 1e400 (read as infinity) "
         "fails their load or gives NaN rotary tables; rope_parameters and rope_scaling must be "
         "objects (or null).",
         "Copy rope_theta (and rope_parameters) from the target's config.json."),
    # -- DF2xx: the weights -----------------------------------------------------------------------
    Rule("DF201", "no-safetensors", E, "No safetensors weights",
         "The folder holds no *.safetensors file. This tool reads only safetensors (never pickle "
         "files), and DFlash drafts are published that way.",
         "Download the .safetensors files, or convert a pickle checkpoint in an isolated "
         "environment you trust."),
    Rule("DF202", "pickle-weights", W, "Pickle weight files are present and were not opened",
         "*.bin, *.pt, *.pth and *.ckpt files can execute code when unpickled; they are listed, "
         "never opened, and engines loading safetensors ignore them.",
         "Delete them if the safetensors files are complete."),
    Rule("DF203", "bad-safetensors-header", E, "A safetensors header cannot be read",
         "The file is shorter than 8 bytes, declares a header larger than the format's "
         "100,000,000 bytes, or its header is not the JSON the format prescribes (a known dtype, "
         "a shape and data_offsets for every tensor, string-to-string __metadata__), or it is "
         "something the safetensors library refuses to open: sizes that overflow 64 bits, "
         "offsets that leave a gap or overlap once sorted, bytes after the last tensor. Headers "
         "holding more tensors or values than any draft (README, Limits) are refused unparsed.",
         "Re-download the file; it is corrupt or not a safetensors file."),
    Rule("DF204", "truncated-safetensors", E, "A safetensors file is shorter than its header says",
         "The header places tensor data past the end of the file: the download was cut short.",
         "Re-download the file (hf download REPO FILE --force-download)."),
    Rule("DF205", "index-missing-file", E, "The shard index names a file that is missing",
         "model.safetensors.index.json maps tensors to shard files; one of them is absent, so "
         "every engine fails to load the draft.",
         "Download the missing shard."),
    Rule("DF206", "index-missing-tensor", E, "The shard index names a tensor its shard lacks",
         "A tensor listed in weight_map is not in the header of the shard it points to.",
         "Re-download the index and the shards together; they come from different revisions."),
    Rule("DF207", "bad-index", E, "The shard index is malformed",
         "model.safetensors.index.json must be a JSON object with a weight_map object of "
         "tensor name -> file name.",
         "Re-download the index file."),
    Rule("DF210", "fc-missing", E, "fc.weight is missing",
         "fc fuses the concatenated tapped features into one hidden vector; every DFlash draft "
         "has it.",
         "Check that every shard is present and that names are unprefixed."),
    Rule("DF211", "fc-shape", E, "fc.weight does not match hidden_size and target_layer_ids",
         "fc.weight is [H, k*H] with k = len(target_layer_ids). A mismatch means the config's "
         "tap list does not belong to these weights; the message says which k the weights imply.",
         "Restore the trained target_layer_ids (k entries) from the model card."),
    Rule("DF212", "missing-tensor", E, "A tensor the config implies is missing",
         "Each draft layer has its norms, attention projections, q_norm/k_norm and MLP (plus "
         "biases when attention_bias, and DFlash2's conv and selector tensors); the model also "
         "has hidden_norm and norm.",
         "Check num_hidden_layers and attention_bias against the weights, and that every shard "
         "is present."),
    Rule("DF213", "tensor-shape", E, "A tensor's shape does not match the config",
         "The shape follows from hidden_size, num_attention_heads, num_key_value_heads, head_dim "
         "and intermediate_size. A mismatch means config and weights do not belong together.",
         "Restore the config that was published with these weights."),
    Rule("DF214", "unexpected-tensor", W, "The weights hold a tensor no DFlash draft has",
         "Layers beyond num_hidden_layers, or tensors outside the DFlash layout. Engines either "
         "fail on unknown names or ignore them.",
         "Remove the tensor, or fix num_hidden_layers if whole layers are unexpected."),
    Rule("DF215", "embedding-or-head", W, "The draft carries embed_tokens or lm_head",
         "A DFlash draft borrows the target's embedding table and lm_head; a copy in the draft is "
         "dead weight, and some loaders refuse it or let it shadow the target's.",
         "Drop the tensors from the safetensors files."),
    Rule("DF216", "prefixed-names", W, "Tensor names carry a prefix such as 'model.'",
         "Published drafts use unprefixed names (fc.weight, layers.0...). Third-party dumps add "
         "'model.'; vLLM and lmdeploy expect the unprefixed layout.",
         "Re-save the tensors without the prefix."),
    Rule("DF220", "dtype-summary", I, "Dtypes of the weights",
         "How many parameters are stored in each dtype.",
         "Nothing to fix."),
    Rule("DF221", "non-bf16-weights", W, "Weights are not stored in bfloat16",
         "Published drafts are bf16. float16 overflows on Qwen3's feature outliers in fc and "
         "collapses acceptance; float32 doubles the memory and engines cast it anyway.",
         "Keep or re-save the draft in bfloat16."),
    Rule("DF222", "generation-mismatch", W, "DFlash2 tensors in a DFlash v1 config (or the reverse)",
         "The weights hold tensors of the other generation (conv kernels, candidate selector), "
         "so the architecture in config.json does not describe them.",
         "Set architectures to the generation the weights belong to."),
    Rule("DF223", "no-tensors", E, "The weights hold no tensors",
         "The safetensors headers (or the shard index's weight_map) list no tensor at all: the "
         "files load, but there is no draft in them.",
         "Re-download the weights; an empty file or index is a failed save or upload."),
    Rule("DF224", "dflash2-codebook-suffix", E, "A DFlash2 codebook is stored with a '.weight' suffix",
         "Published DFlash2 checkpoints store candidate_selector.predecessor_codebook and "
         "successor_codebook as bare names (they are parameters, not nn.Embedding modules); engines "
         "look them up by those names, so a re-save through nn.Embedding that adds '.weight' leaves "
         "the selector unloaded (z-lab's loader maps the bare names the other way).",
         "Rename the tensors to drop the '.weight' suffix."),
    # -- DF3xx: pairing with the target -----------------------------------------------------------
    Rule("DF301", "target-depth", E, "num_target_layers differs from the target's depth",
         "num_target_layers must equal the target's num_hidden_layers: the draft was trained on "
         "a target of that depth. lmdeploy refuses the pair; others run it at low acceptance.",
         "Use the draft trained for this target, or fix num_target_layers if it was mistyped."),
    Rule("DF302", "target-hidden-size", E, "hidden_size differs from the target's",
         "The draft consumes the target's hidden states and embeddings; their width must match.",
         "Use the draft trained for this target."),
    Rule("DF303", "target-vocab", E, "vocab_size differs from the target's",
         "The draft uses the target's lm_head, so both must have the same vocabulary size (vLLM "
         "checks it).",
         "Set vocab_size to the target's if the draft was trained for it; otherwise use another draft."),
    Rule("DF304", "mask-outside-target-vocab", E, "mask_token_id is not a row of the target's embeddings",
         "The masked block positions take the target's embedding of mask_token_id, which must "
         "be below the target's vocab_size.",
         "Use the mask id of the target's family."),
    Rule("DF305", "mask-is-pad", E, "mask_token_id is the target's pad token",
         "The pad embedding is often zero or untrained; filling masked positions with it is not "
         "what the draft was trained on.",
         "Use the mask id of the target's family (a dedicated reserved token)."),
    Rule("DF306", "tap-beyond-target", E, "A tap layer is beyond the target's depth",
         "Every target_layer_id must be below the target's num_hidden_layers.",
         "Use the draft trained for this target."),
    Rule("DF307", "tap-on-last-layer", W, "A tap reads the target's last layer",
         "In Hugging Face's hidden_states the last entry is taken after the final norm, not the "
         "raw output of the last layer; engines differ on which they feed, so acceptance depends "
         "on the engine.",
         "Nothing to change in the file; prefer engines that tap the raw layer output."),
    Rule("DF308", "target-unreadable-keys", E, "The target's config lacks a dimension",
         "The target's config.json (or its text_config) must give num_hidden_layers, hidden_size "
         "and vocab_size for the pair to be checked.",
         "Point --target at the target model's folder or repo."),
    # -- DF4xx: running the pair ------------------------------------------------------------------
    Rule("DF401", "output-differs", E, "DFlash output differs from target-only output",
         "With greedy decoding, speculative decoding must reproduce the target's own output "
         "token for token; a divergence not explained by a near tie in the target's logits is a "
         "bug in the runtime or a broken checkpoint.",
         "Report it with the --json output attached."),
    Rule("DF402", "output-tie", I, "Outputs diverge at a near tie",
         "Where DFlash's token is not the target's choice, its logit is within the documented "
         "tolerance of the target's maximum (at any rank): batched verification and one-token "
         "decoding round differently, and either token is a correct greedy choice.",
         "Nothing to fix."),
    Rule("DF403", "low-acceptance", E, "Acceptance is below the threshold",
         "The mean acceptance length tau is below --min-acceptance. A draft reading the wrong tap "
         "layers, a wrong mask id, or an fp16 draft loads cleanly and lands here; so do prompts "
         "that are not in the chat format the draft was trained on (--no-chat-template, "
         "--thinking, prompts of your own).",
         "Check target_layer_ids against the model card, the mask id, and keep the draft in bf16; "
         "rerun with the built-in prompts and the chat template to rule out the prompt format."),
    Rule("DF404", "feature-overflow", E, "Non-finite values where the target feeds the draft",
         "The tapped features or the fused fc output hold inf/NaN: fp16 overflow on hidden-state "
         "outliers.",
         "Keep the draft in bfloat16 (--draft-dtype bfloat16) and let target tensors be cast to it."),
    Rule("DF405", "block-size-above-trained", W, "--block-size is above the draft's trained block",
         "Positions past the trained block_size were never trained: their drafts are rarely "
         "accepted, so tau measured this way understates the draft, and engines run the trained "
         "size anyway.",
         "Leave --block-size out, or give at most the draft's block_size."),
    Rule("DF406", "speedup-implausible", W, "The measured speedup exceeds tau",
         "A DFlash step yields tau tokens for one draft call plus one verify pass, each at least "
         "as costly as a target decode step, so a speedup above tau cannot be real: the machine's "
         "load changed between the timed runs (other processes, thread oversubscription, clock "
         "changes). The figure is withheld, not reported as a result.",
         "Rerun on an idle machine, or with fewer threads (--threads 1 on a small shared CPU)."),
    Rule("DF407", "out-of-memory", E, "The run does not fit the memory it may use",
         "smoke-run counts its peak before loading (weights in the run dtype from the config "
         "shapes and the files, KV caches at capacity, activations, logits over the vocabulary, "
         "the transformers backend's overhead) against MemAvailable, the RLIMIT_AS and cgroup "
         "limits, or the GPU's free memory, and refuses what does not fit; an out-of-memory error "
         "during the run is reported the same way (exit 2: the run did not happen, the pair is "
         "not judged).",
         "Free memory or raise the limit, use a machine or GPU with more memory, or lower "
         "--max-new-tokens and the prompts' length; run a float32 target in bfloat16."),
    Rule("DF410", "taps-not-best", E, "Another tap set measures better than the configured one",
         "probe-taps measured the draft's acceptance with other target_layer_ids and found a set "
         "that beats the configured ids (or the configured ids cannot be right for fc.weight and "
         "the target). A draft reads whatever layers its config names without complaint, so ids "
         "lost or edited in a conversion show up only as low acceptance.",
         "Check the measured best against the model card, then write it into a normalized copy "
         "(probe-taps --write OUT, or the printed normalize --target-layer-ids command)."),
    Rule("DF411", "no-taps-work", E, "No tap set measured reaches the acceptance threshold",
         "Every candidate probe-taps measured stays below --min-acceptance: the draft may belong "
         "to another target, the prompts may not be in the format it was trained on, or a search "
         "stopped at its --budget before it reached the trained set.",
         "Check the draft's target; rerun with the built-in prompts and the chat template, or a "
         "larger --budget."),
    Rule("DF412", "taps-unclear", E, "The best tap set leads only within measurement noise",
         "probe-taps recovered no target_layer_ids it can stand behind: the best candidate leads "
         "the runner-up by less than one standard error even after it measured the leading "
         "candidates again with more tokens per prompt (doubling -n, up to 512) and, for your own "
         "prompts, the built-in ones. Neighbouring layers carry similar features, so a set one "
         "layer off the trained one can come out ahead on little evidence; claiming it would "
         "write wrong ids that load cleanly (exit 1, and --write refuses without --force).",
         "Rerun with more tokens (-n) or more prompts in the draft's training format "
         "(--prompts FILE.jsonl), or check the model card; `--write OUT --force` writes the leader anyway."),
    Rule("DF413", "weights-unfilled", E, "A weight matrix reads back as one value (zeros)",
         "Before loading, smoke-run and probe-taps sample a few bounded slices of every weight "
         "matrix's data (a few MiB for a whole model; a tensor is reported only when every byte "
         "read of it is one repeated value). A preallocated or never-filled shard, a sparse file, or "
         "an export that wrote zeros has a valid header and passes every header check, and a run "
         "on it ties every logit: both sides pick token 0, the outputs match and every draft is "
         "accepted, so it would PASS while measuring nothing. The pair is refused (exit 1). Norm "
         "weights and biases are not judged (zero-centred norms are legitimately zero).",
         "Download the named file again (or re-export the checkpoint) and compare its checksum "
         "with the Hub's."),
    Rule("DF414", "logits-tied", E, "The target's logits tie at every position",
         "At every position of a prompt the target's two best logits (or all of them) are equal, "
         "so greedy decoding picks by token id alone and DFlash reproducing it proves nothing: the "
         "target's weights or LM head are degenerate (zeros, one constant). The run fails (exit 1).",
         "Check the target's weights (DF413) and download them again."),
    Rule("DF415", "output-one-token", E, "Every prompt's output is one token repeated",
         "A draft accepted on an output that repeats one token only had to copy its anchor, so tau "
         "and the output match measure nothing about it. It happens with degenerate weights, or "
         "with prompts that send the target into a loop. The run fails (exit 1).",
         "Rerun with other prompts (-p/--prompts); check the weights (DF413, DF414)."),
]

_RULES += [Rule(code, name, Severity(sev), *texts) for code, name, sev, *texts in
           (*ENGINE_RULES, *LAYOUT_RULES, *LAYOUT_PROBE_RULES, *QUANT_RULES, *VLLM_RULES, *MISTAKE_RULES)]
_RULES.sort(key=lambda rule: rule.code)

RULES: dict[str, Rule] = {rule.code: rule for rule in _RULES}


def finding(code: str, message: str, *, path: str | os.PathLike[str] | None = None,
            key: str | None = None) -> Finding:
    """A finding of rule ``code`` (its severity comes from the registry).

    ``path`` is the file or folder it is about (``None`` for a run's finding about no file),
    ``key`` the config key it names; both are given where the finding is made, so no output
    format has to parse them back out of ``message``, which is the text after the path.
    """
    return Finding(code, RULES[code].severity, message, None if path is None else str(path), key)
