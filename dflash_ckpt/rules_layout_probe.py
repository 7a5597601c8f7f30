"""The rules of the block-layout measurements (probe-taps, smoke-run --layout; issue 26): DF416-DF418, as plain
data that ``rules`` turns into ``Rule``s (as ``rules_engines``). Fields as ``rules.Rule``: code,
name, severity, summary, explanation, fix."""

from __future__ import annotations

LAYOUT_PROBE_RULES: list[tuple[str, str, str, str, str, str]] = [
    ("DF416", "layout-wrong", "error", "The draft measures clearly better in the other block layout",
         "Run in the layout it was not trained in, every draft token is one position off: acceptance "
         "falls to about 1 and nothing fails (sglang#40144, vllm#56792). probe-taps measured both "
         "layouts and the one the config declares (or, with no declaration, the 1+N default every "
         "DFlash reader assumes) loses by at least one standard error.",
         "Record the measured layout: probe-taps --write OUT writes dflash_config.sample_from_anchor (or "
         "the keys the engines named with --layout-for read); serve the draft where that layout runs."),
    ("DF417", "layout-unclear", "error", "The other block layout leads only within measurement noise",
         "probe-taps measured both layouts with the winning taps and the one the config does not declare "
         "leads, but by less than one standard error or on fewer than 8 steps each: the declared layout is "
         "not confirmed and no layout is named (a wrong one loads cleanly and serves at tau ~1); --write "
         "records none. (The declared layout leading within noise stands, as configured taps do.)",
         "Rerun with more tokens (-n) or more prompts in the draft's training format (--prompts), or "
         "check the model card."),
    ("DF418", "layout-overridden", "warning", "smoke-run ran the draft in another layout than its config declares",
         "--layout forced the block layout; every engine follows the config instead, so the run's "
         "figures are not what an engine would serve. Run in the wrong layout a working draft drops to "
         "tau ~1.",
         "If the forced layout is the trained one, record it (probe-taps --write OUT); otherwise leave "
         "--layout out."),
]
