"""Mistakes a newcomer makes, named for what they are: DF010 (a Python API argument of the wrong type),
DF230-DF232 (an LFS pointer or another format as weights, a target given as the draft).

Rows as ``rules.Rule`` takes them (code, name, severity, summary, explanation, fix), plain
data so that ``rules`` (which every layer imports) imports nothing of the package for them."""

from __future__ import annotations

ROWS: tuple[tuple[str, str, str, str, str, str], ...] = (
    ("DF010", "api-wrong-type", "error", "A Python API call has an argument of the wrong type",
     "dflash_ckpt.inspect, normalize, smoke_run and probe_taps check their arguments against their "
     "signatures before anything is read: a value of the wrong type (a number for a path, None in a list "
     "of drafts, bytes for a path, a str for max_new_tokens), an unknown keyword or a missing argument is "
     "this one DFlashCkptError (exit_code 2) naming the function and the keyword, not a TypeError from "
     "deep inside the run.",
     "Pass the type the signature names (`help(dflash_ckpt.smoke_run)`); keywords are the CLI's long "
     "options with - written _ (prompt= takes one text or a list; prompts= is the JSONL file)."),
    ("DF230", "lfs-pointer", "error", "A .safetensors file is a Git LFS pointer, not the weights",
     "The file is the small text stub Git LFS leaves in a clone made without LFS (it starts `version "
     "https://git-lfs.github.com/spec/v1` and names the object's oid and size); its first bytes read as "
     "an absurd safetensors header length. Nothing in it can be checked.",
     "Run `git lfs pull` in the clone (install git-lfs first); in GitHub Actions, check out with `lfs: "
     "true` (actions/checkout)."),
    ("DF231", "not-safetensors", "error", "A .safetensors file holds something else (HTML, JSON, a pickle, text)",
     "The file's first bytes are not a safetensors header but a recognisable other format: an HTML page "
     "(a download that saved a login or error page), JSON, a zip (torch.save's pickle format) or plain "
     "text. The message names what it looks like.",
     "Download the file again (`hf download REPO FILE`, with a token for a gated repo); convert a pickle "
     "with the publisher's tools, never by loading it here."),
    ("DF232", "target-as-draft", "error", "The folder given as the draft looks like a target model",
     "config.json names a plain causal language model (architectures such as Qwen3ForCausalLM, no DFlash "
     "keys) and its weights hold embed_tokens and lm_head but no fc.weight: this is a target (or another "
     "full model), not a DFlash draft. The draft checks that would follow (fc.weight missing, prefixed "
     "names, block_size) are not shown, as they would all be about the wrong folder.",
     "Pass the draft folder first and the target with --target (`dflash-ckpt inspect DRAFT --target "
     "TARGET`); in the pre-commit hook, narrow `files:` to your drafts' config.json."),
)
