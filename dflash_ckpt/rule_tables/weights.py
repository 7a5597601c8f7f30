"""The draft's safetensors weights: DF201-DF226 (headers, shards, names, shapes, dtypes, side files).

Rows as ``rules.Rule`` takes them (code, name, severity, summary, explanation, fix), plain
data so that ``rules`` (which every layer imports) imports nothing of the package for them."""

from __future__ import annotations

ROWS: tuple[tuple[str, str, str, str, str, str], ...] = (
    ("DF201", "no-safetensors", "error", "No safetensors weights",
     "The folder holds no *.safetensors file. This tool reads only safetensors (never pickle files), and "
     "DFlash drafts are published that way.",
     "Download the .safetensors files, or convert a pickle checkpoint in an isolated environment you "
     "trust."),
    ("DF202", "pickle-weights", "warning", "Pickle weight files are present and were not opened",
     "*.bin, *.pt, *.pth and *.ckpt files can execute code when unpickled; they are listed, never opened, "
     "and engines loading safetensors ignore them.",
     "Delete them if the safetensors files are complete."),
    ("DF203", "bad-safetensors-header", "error", "A safetensors header cannot be read",
     "The file is shorter than 8 bytes, declares a header larger than the format's 100,000,000 bytes, or "
     "its header is not the JSON the format prescribes (a known dtype, a shape and data_offsets for every "
     "tensor, string-to-string __metadata__), or it is something the safetensors library refuses to open: "
     "sizes that overflow 64 bits, offsets that leave a gap or overlap once sorted, bytes after the last "
     "tensor. Headers holding more tensors or values than any draft (README, Limits) are refused unparsed.",
     "Re-download the file; it is corrupt or not a safetensors file."),
    ("DF204", "truncated-safetensors", "error", "A safetensors file is shorter than its header says",
     "The header places tensor data past the end of the file: the download was cut short.",
     "Re-download the file (hf download REPO FILE --force-download)."),
    ("DF205", "index-missing-file", "error", "The shard index names a file that is missing",
     "model.safetensors.index.json maps tensors to shard files; one of them is absent, so every engine "
     "fails to load the draft.",
     "Download the missing shard."),
    ("DF206", "index-missing-tensor", "error", "The shard index names a tensor its shard lacks",
     "A tensor listed in weight_map is not in the header of the shard it points to.",
     "Re-download the index and the shards together; they come from different revisions."),
    ("DF207", "bad-index", "error", "The shard index is malformed",
     "model.safetensors.index.json must be a JSON object with a weight_map object of tensor name -> file "
     "name.",
     "Re-download the index file."),
    ("DF210", "fc-missing", "error", "fc.weight is missing",
     "fc fuses the concatenated tapped features into one hidden vector; every DFlash draft has it.",
     "Check that every shard is present and that names are unprefixed."),
    ("DF211", "fc-shape", "error", "fc.weight does not match hidden_size and target_layer_ids",
     "fc.weight is [H, k*H] with k = len(target_layer_ids). A mismatch means the config's tap list does "
     "not belong to these weights; the message says which k the weights imply.",
     "Restore the trained target_layer_ids (k entries) from the model card."),
    ("DF212", "missing-tensor", "error", "A tensor the config implies is missing",
     "Each draft layer has its norms, attention projections, q_norm/k_norm and MLP (plus biases when "
     "attention_bias, and DFlash2's conv and selector tensors); the model also has hidden_norm and norm.",
     "Check num_hidden_layers and attention_bias against the weights, and that every shard is present."),
    ("DF213", "tensor-shape", "error", "A tensor's shape does not match the config",
     "The shape follows from hidden_size, num_attention_heads, num_key_value_heads, head_dim and "
     "intermediate_size. A mismatch means config and weights do not belong together.",
     "Restore the config that was published with these weights."),
    ("DF214", "unexpected-tensor", "warning", "The weights hold a tensor no DFlash draft has",
     "Layers beyond num_hidden_layers, or tensors outside the DFlash layout. Engines either fail on "
     "unknown names or ignore them.",
     "Remove the tensor, or fix num_hidden_layers if whole layers are unexpected."),
    ("DF215", "embedding-or-head", "warning", "The draft carries embed_tokens or lm_head",
     "A DFlash draft borrows the target's embedding table and lm_head; a copy in the draft is dead "
     "weight, and some loaders refuse it or let it shadow the target's.",
     "Drop the tensors from the safetensors files."),
    ("DF216", "prefixed-names", "warning", "Tensor names carry a prefix such as 'model.'",
     "Published drafts use unprefixed names (fc.weight, layers.0...). Third-party dumps add 'model.'; "
     "vLLM and lmdeploy expect the unprefixed layout.",
     "Re-save the tensors without the prefix."),
    ("DF220", "dtype-summary", "info", "Dtypes of the weights",
     "How many parameters are stored in each dtype.",
     "Nothing to fix."),
    ("DF221", "non-bf16-weights", "warning", "Weights are not stored in bfloat16",
     "Published drafts are bf16. float16 overflows on Qwen3's feature outliers in fc and collapses "
     "acceptance; float32 doubles the memory and engines cast it anyway.",
     "Keep or re-save the draft in bfloat16."),
    ("DF222", "generation-mismatch", "warning", "DFlash2 tensors in a DFlash v1 config (or the reverse)",
     "The weights hold tensors of the other generation (conv kernels, candidate selector), so the "
     "architecture in config.json does not describe them.",
     "Set architectures to the generation the weights belong to."),
    ("DF223", "no-tensors", "error", "The weights hold no tensors",
     "The safetensors headers (or the shard index's weight_map) list no tensor at all: the files load, "
     "but there is no draft in them.",
     "Re-download the weights; an empty file or index is a failed save or upload."),
    ("DF224", "dflash2-codebook-suffix", "error", "A DFlash2 codebook is stored with a '.weight' suffix",
     "Published DFlash2 checkpoints store candidate_selector.predecessor_codebook and successor_codebook "
     "as bare names (they are parameters, not nn.Embedding modules); engines look them up by those names, "
     "so a re-save through nn.Embedding that adds '.weight' leaves the selector unloaded (z-lab's loader "
     "maps the bare names the other way).",
     "Rename the tensors to drop the '.weight' suffix."),
    ("DF225", "vocab-map-shape", "error", "d2t/t2d are missing or do not match draft_vocab_size",
     "With draft_vocab_size, d2t must be [draft_vocab_size] (the offset from each draft id to its target "
     "id) and t2d [vocab_size]; without them, or with other shapes, draft ids cannot be mapped to target "
     "ids.",
     "Re-download the weights together with the config they were published with."),
    ("DF226", "pickled-side-file", "warning", "A pickled side file an engine loads sits beside the weights",
     "Files such as mask_embedding.pt (vLLM's qwen3_dflash.py loads it with torch.load) are pickles: "
     "loading them can run code. This tool lists them and never opens them.",
     "Read what produced the file before serving; drop it if your engine does not need it."),
)
