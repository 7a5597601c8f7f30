"""Every bound this tool puts on what it reads, in one place (the README's "Limits" table).

A checkpoint, a Hub endpoint or a prompts file may be hostile or broken. Nothing from them may
size a loop, an allocation, a download or a wait before it is checked against one of these
numbers, so that a 1 KB file cannot cost gigabytes or minutes. Each bound is far above what any
published draft, target or tokenizer needs (the figures in the comments), and crossing it gives
one line or a finding, never a traceback.
"""

from __future__ import annotations

KiB, MiB, GiB = 1024, 1024**2, 1024**3

# -- files read whole ---------------------------------------------------------------------------
#: config.json, generation_config.json, special_tokens_map.json (published ones: 1-10 KiB).
MAX_CONFIG_BYTES = 16 * MiB
#: model.safetensors.index.json (a 1T-parameter target's index: about 10 MiB).
MAX_INDEX_BYTES = 64 * MiB
#: tokenizer_config.json (the largest published ones, with added_tokens_decoder: about 2 MiB).
MAX_TOKENIZER_CONFIG_BYTES = 64 * MiB
#: tokenizer.json (Gemma's 262k-token vocabulary: 33 MiB).
MAX_TOKENIZER_BYTES = 256 * MiB
#: chat_template.jinja, chat_template.json (published templates: 2-40 KiB).
MAX_TEMPLATE_BYTES = 4 * MiB
#: A --prompts JSONL file, and an --args-file.
MAX_PROMPTS_BYTES = 64 * MiB
#: Prompts in one run (-p and --prompts together), counted before the file is parsed: each is
#: decoded twice, so ten thousand already take hours; 4 million one-byte prompts fit in 16 MiB.
MAX_PROMPTS = 10_000
#: An ``inspect --from-file`` list of DRAFT arguments (a thousand drafts, one a line: under 100 KiB).
MAX_ARG_FILE_BYTES = 16 * MiB
#: Nesting of any JSON document (configs are 3 levels deep, tokenizer.json about 6).
MAX_JSON_DEPTH = 64
#: Values in a config-like JSON file, counted as its commas before it is parsed: what keeps the
#: parsed objects within a few times the file's size (a published config has about a hundred).
MAX_JSON_ITEMS = 200_000
#: The same for tokenizer_config.json (150k added tokens of 7 fields each fit in it).
MAX_TOKENIZER_CONFIG_ITEMS = 2_000_000

# -- safetensors headers ------------------------------------------------------------------------
#: The header length the safetensors library itself accepts at most (its MAX_HEADER_SIZE).
MAX_HEADER_BYTES = 100_000_000
#: Tensors in one draft, all shards together (a DFlash draft has 11 to 19 per layer, 3 more:
#: published ones have at most about 100).
MAX_TENSORS = 16_384
#: Values in one header, counted as its commas before it is parsed (a tensor takes 5 to 8).
MAX_HEADER_ITEMS = 8 * MAX_TENSORS
#: Sizes, offsets and element counts are usize in the format: anything from 2**64 up overflows.
MAX_USIZE = 2**64 - 1

# -- config numbers, checked before they size a loop or an allocation ---------------------------
#: num_hidden_layers of a draft (published: 1-8), num_target_layers and tap ids (targets: up to 128).
MAX_LAYERS = 4096
#: hidden_size, intermediate_size, heads, head_dim, selector rank, conv sizes (largest: 53,248).
MAX_DIM = 1 << 20
#: vocab_size (largest published: 262,208).
MAX_VOCAB = 1 << 24
#: block_size (published: 8-16); also the longest block smoke-run will allocate.
MAX_BLOCK_SIZE = 1024
#: Entries of target_layer_ids and layer_types.
MAX_LIST_LEN = MAX_LAYERS

# -- chat templates (smoke-run) -----------------------------------------------------------------
#: CPU seconds one rendering may take (real templates render in milliseconds).
TEMPLATE_CPU_SECONDS = 5.0
#: Characters one rendering may produce (a prompt is kilobytes).
MAX_TEMPLATE_OUTPUT = 4 * MiB
#: Memory one rendering may add (it runs in a child process under this RLIMIT_AS margin): filters
#: and formatting that build gigabytes in one call stop here (real templates need kilobytes).
TEMPLATE_MEMORY_BYTES = 256 * MiB
#: Wall-clock seconds this process waits for each rendering (the first: compile and render) before
#: it kills the child: a child stopped, or starved of CPU on a loaded machine, is not waited for.
TEMPLATE_WALL_SECONDS = 30.0
#: Characters of one prompt, after the template (also bounds what the tokenizer is given).
MAX_PROMPT_CHARS = 4 * MiB

# -- the Hub ------------------------------------------------------------------------------------
#: Seconds all the Hub requests of one command may take, retries, pauses and reconnects included
#: (env DFLASH_CKPT_HUB_DEADLINE); every HUB_MIN_RATE bytes received add one second, so a
#: download that keeps that pace is never cut, and a server that drips bytes gains nothing.
HUB_DEADLINE = 120.0
HUB_MIN_RATE = 256 * KiB
#: The longest Retry-After honoured; a server asking for more gets our error instead.
MAX_RETRY_AFTER = 60.0
#: A repo-info answer, or a cached listing (a listing of 10,000 files is about 2 MiB).
MAX_LISTING_BYTES = 64 * MiB
#: Files one repo listing may name, counted (``"rfilename"``) before the answer is parsed (the
#: largest model repos hold a few thousand; each file costs a request and a cache entry).
MAX_LISTING_FILES = 100_000
#: JSON objects (``{``) and values (``,``) in a listing, counted before it is parsed: 64 MiB of
#: ``[{}, ...]`` would otherwise become 20 million dicts (1.6 GB). A sibling takes 2 and 7.
MAX_LISTING_OBJECTS = 4 * MAX_LISTING_FILES
MAX_LISTING_ITEMS = 16 * MAX_LISTING_FILES
#: A file name from a listing: bytes per folder or file name (NAME_MAX of ext4, xfs, btrfs, APFS)
#: and in all (published repos: under 200).
MAX_NAME_PART_BYTES = 255
MAX_NAME_BYTES = 1024
#: Incomplete downloads of ours older than this are swept from ``blobs/`` even when the process
#: that wrote them may still live (a download has at most this long by the deadline's rate).
STALE_DOWNLOAD_SECONDS = 24 * 3600
#: Any single file downloaded, whatever the listing says (the largest safetensors shards: 10 GiB).
MAX_DOWNLOAD_BYTES = 256 * GiB

# -- runs (smoke-run) ---------------------------------------------------------------------------
#: ``--threads`` at most this many per logical CPU (``os.cpu_count()``): more only oversubscribes,
#: and OpenMP sizes its pool by it (a billion threads asked libgomp for 216 GB and ended the process).
MAX_THREADS_PER_CPU = 4

# -- normalize ----------------------------------------------------------------------------------
#: Free space OUT must have beyond the bytes to write (copies, or the config when linking).
FREE_SPACE_MARGIN = 64 * MiB


def human_bytes(n: int) -> str:
    """``n`` bytes in GiB / MiB / KiB (binary units, as the README uses)."""
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= size:
            value = n / size
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{n} bytes"
