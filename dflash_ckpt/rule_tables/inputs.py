"""Reading the input: DF001-DF020 (a file that cannot be read or parsed, the command line, normalize's
refusals).

Rows as ``rules.Rule`` takes them (code, name, severity, summary, explanation, fix), plain
data so that ``rules`` (which every layer imports) imports nothing of the package for them."""

from __future__ import annotations

ROWS: tuple[tuple[str, str, str, str, str, str], ...] = (
    ("DF001", "unreadable-input", "error", "A file or folder cannot be read",
     "The checkpoint folder, its config.json or another file could not be opened: it is missing, not "
     "readable by this user, a link that loops or dangles, or a Hub repo that is not cached and cannot be "
     "fetched. Nothing past it can be checked (exit 2).",
     "Check the path or repo id; fix permissions (chmod) or re-download the file."),
    ("DF002", "invalid-json", "error", "A JSON file does not parse",
     "config.json (or the shard index, or the target's config.json) is not valid JSON. The message gives "
     "the line and column where the parser stopped.",
     "Fix the syntax at the line and column named; a trailing comma or an unquoted key is the usual "
     "cause. Re-download the file if it was cut short."),
    ("DF003", "config-not-object", "error", "config.json is not a JSON object",
     "A config must be an object of keys ({...}); a list, string or number at the top level cannot hold "
     "the model's settings.",
     "Restore the published config.json; it is an object of keys."),
    ("DF004", "usage-error", "error", "The command line is wrong",
     "An unknown option, a missing argument, options that contradict each other or the checkpoint, or a "
     "value out of range. Nothing was read or written past it (exit 2).",
     "Read the message and `dflash-ckpt COMMAND --help`; the message names the option."),
    ("DF005", "refused-by-checks", "error", "The command refused to go on because checks failed",
     "normalize checks the config it would write with inspect's checks and writes nothing when one fails; "
     "the failing codes are listed on the lines before (exit 1).",
     "Run `dflash-ckpt inspect` on the draft and `dflash-ckpt rules CODE` for each code."),
    ("DF020", "not-canonical", "error", "normalize --check: the config is not in the canonical form",
     "normalize --check found that normalize would change config.json (keys to nest, mirrors or an "
     "explicit layer_types to add; docs/DESIGN.md section 4). Some engine reads a key from a place where "
     "this config does not hold it, or will once it is edited (exit 1).",
     "Run `dflash-ckpt normalize DRAFT --in-place` (or `dflash-ckpt normalize DRAFT OUT` for a copy); "
     "`--dry-run` shows the diff first."),
)
