"""The speculators-native draft format: DF170-DF175 (what the format's keys resolve to, what its
converters are known to lose, and what vLLM's speculators adapter does with it).

Rows as ``rules.Rule`` takes them (code, name, severity, summary, explanation, fix), plain
data so that ``rules`` (which every layer imports) imports nothing of the package for them."""

from __future__ import annotations

ROWS: tuple[tuple[str, str, str, str, str, str], ...] = (
    ("DF170", "speculators-native", "info", "A speculators-native draft: its layout and taps were not measured",
     "speculators (the vLLM project's draft library) writes drafts without dflash_config: the decoder under "
     "transformer_layer_config, the taps as aux_hidden_state_layer_ids (target_layer_ids + 1), block_size, "
     "mask_token_id and sample_from_anchor at the top level, and speculators_config.proposal_methods[0]"
     ".speculative_tokens (block_size for anchor-first, block_size - 1 for 1+N). inspect reads it as the "
     "z-lab form it stands for and names where each value came from. Such a draft came out of a converter "
     "or an exporter, and neither measures anything: speculators 0.9.0's DFlash converter writes "
     "sample_from_anchor false and speculative_tokens block_size - 1 whatever the source declared (an "
     "anchor-first z-lab draft comes out as 1+N), and a third-party z-lab converter copies target_layer_ids "
     "into aux_hidden_state_layer_ids without the + 1 (every tap one layer early). Neither leaves a trace "
     "in the config or the weights.",
     "Measure both with the probe-taps command the message gives (it runs both block layouts); "
     "`dflash-ckpt normalize DRAFT OUT` writes the z-lab form every reader loads."),
    ("DF171", "layout-from-speculative-tokens", "warning",
     "Only speculative_tokens declares the block layout",
     "speculators exports before PR #760 have no sample_from_anchor; speculators_config.proposal_methods[0]"
     ".speculative_tokens (block_size: anchor-first, block_size - 1: 1+N) is then their only layout "
     "evidence. vLLM's speculators adapter reads sample_from_anchor alone (absent: false, 1+N), so an "
     "anchor-first draft declared this way runs one position off there.",
     "Add the top-level sample_from_anchor the draft was trained with (or measure it with probe-taps)."),
    ("DF172", "speculators-taps", "error", "aux_hidden_state_layer_ids do not fit the weights or the target",
     "The taps of a speculators draft are aux_hidden_state_layer_ids - 1, and fc.weight is "
     "[H, len(aux_hidden_state_layer_ids) * H]. speculators' DFlash converter drops an aux id equal to the "
     "verifier's depth (a tap on its last layer: its trainer takes that layer implicitly), so a z-lab draft "
     "tapping the last layer comes out with one aux id fewer than its fc holds; an aux id above the "
     "verifier's depth taps no layer.",
     "Restore the aux ids the draft was trained with (target_layer_ids + 1, the last layer's included), "
     "or measure them: `dflash-ckpt probe-taps DRAFT --target T --write OUT`."),
    ("DF173", "vllm-causal-override", "warning",
     "vLLM runs every layer of this speculators draft causal",
     "vLLM's speculators adapter (transformers_utils/configs/speculators/algos.py) maps "
     "sliding_window_non_causal: false, which speculators writes for DFlash drafts, to dflash_config.causal: "
     "true, and qwen3_dflash.py (_dflash_layer_causal) lets that override every layer, full-attention ones "
     "included. A draft whose full-attention layers were trained bidirectional within the block then runs "
     "causal in vLLM: it loads, serves the same greedy tokens, and accepts fewer drafts (the tiny pair: 11 "
     "of 154 draft tokens against 12 of 147 in its z-lab form, vLLM 0.32.0 CPU). The converse: a DFlash "
     "export without the key was trained with causal sliding windows (speculators' default), and the "
     "adapter reads the absent key as non-causal. DSpark's adapter sets no causality.",
     "Serve the z-lab form `dflash-ckpt normalize DRAFT OUT` writes (vLLM runs its full-attention layers "
     "bidirectional), or compare both with `dflash-ckpt smoke-run DRAFT --target T --engine both`."),
    ("DF174", "verifier-mismatch", "warning", "The verifier the draft names is not the target given",
     "A speculators draft names the model it was trained against (speculators_config.verifier: "
     "name_or_path and architectures) and, where set, its hidden size (target_hidden_size). A Hub id other "
     "than the --target's, architectures the target does not have, or another hidden size mean the draft is paired with another model than it was trained for.",
     "Pair the draft with the verifier it names, or check that the target is that model under another name."),
    ("DF175", "aux-id-zero", "warning", "An aux_hidden_state_layer_ids entry is 0 (the embedding output)",
     "aux id 0 is target_layer_ids -1, a tap on the embedding output, which no published speculators DFlash "
     "draft takes: it is the mark of a converter that copied z-lab target_layer_ids into "
     "aux_hidden_state_layer_ids without the + 1 (every tap one layer early, acceptance collapses silently). "
     "It can be meant, so it is a warning.",
     "Measure the taps: `dflash-ckpt probe-taps DRAFT --target T --write OUT` records the winners."),
)
