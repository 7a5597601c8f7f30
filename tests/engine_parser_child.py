"""Run in a child process by tests/engine_parsers.py: ``python engine_parser_child.py ENGINE SRC JOB RESULT``.

Runs one engine's own config parser, unmodified, on every draft of JOB and writes what it
resolved. ``SRC`` is the folder the engine's Python files were unpacked into from its wheel
(``-`` for vLLM: the installed package of the interpreter running this). The parser's module is
imported from there; its other imports (torch, the engine's kernels, schedulers, model layers)
are answered by inert stubs, because the parse functions use none of them and importing the
real ones would need CUDA, triton or a compiled extension. Nothing here copies or edits the
engine's code: the stub only stands in for modules the parse function never calls.

Each result: ``raises`` (the exception the parser raised, one line, or ``None``) and what it
resolved: ``block_size``, ``mask_token_id``, ``taps`` (target layers in the z-lab convention:
the output of layer i is tap i) and, where the engine resolves it, ``causal`` per draft layer
and ``refuses_anchor_first``. Standard library, plus what the engine itself imports for real.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
import tempfile
import types
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable


class Stub:
    """Whatever a stubbed module holds: callable, subclassable, falsy, a pass-through decorator."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return Stub()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and not kwargs and callable(args[0]):
            return args[0]  # used as a decorator: keep the decorated function
        return Stub()

    def __mro_entries__(self, bases: tuple[Any, ...]) -> tuple[type, ...]:
        return (object,)

    def __bool__(self) -> bool:
        return False

    def __iter__(self) -> Any:
        return iter(())

    def __getitem__(self, key: Any) -> Any:
        return Stub()

    def __or__(self, other: Any) -> Any:
        return Stub()

    def __lt__(self, other: Any) -> bool:
        return False

    __gt__ = __le__ = __ge__ = __lt__

    __ror__ = __or__


class StubModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return Stub()


class Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports the modules named in ``real`` from ``src`` and their packages as empty namespaces
    (their ``__init__`` would import the whole engine); every other module under ``stubbed`` is a
    ``StubModule``."""

    def __init__(self, src: Path, real: set[str], stubbed: set[str]) -> None:
        self.src, self.real, self.stubbed = src, real, stubbed
        self.packages = {".".join(m.split(".")[:i]) for m in real for i in range(1, m.count(".") + 1)}

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name in self.real:
            return importlib.util.spec_from_file_location(name, self.src / (name.replace(".", "/") + ".py"))
        if name in self.packages:
            spec = importlib.machinery.ModuleSpec(name, self, is_package=True)
            spec.submodule_search_locations = [str(self.src / name.replace(".", "/"))]
            return spec
        if name.split(".")[0] in self.stubbed:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec: Any) -> types.ModuleType:
        module = types.ModuleType(spec.name) if spec.name in self.packages else StubModule(spec.name)
        module.__path__ = list(spec.submodule_search_locations or [])
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


def install(src: Path, real: set[str], stubbed: set[str]) -> None:
    sys.meta_path.insert(0, Finder(src, real, stubbed))


def one_line(exc: BaseException) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:400]


def write_config(cfg: dict[str, Any]) -> str:
    folder = tempfile.mkdtemp(prefix="judge-")
    Path(folder, "config.json").write_text(json.dumps(cfg), encoding="utf-8")
    return folder


# -- SGLang 0.5.23: srt/speculative/dflash_utils.py parse_dflash_draft_config ----------------------

def sglang(src: Path) -> Callable[[dict[str, Any]], dict[str, Any]]:
    install(src, {"sglang.srt.speculative.dflash_utils"}, {"sglang", "torch", "triton", "sgl_kernel", "flashinfer"})
    from sglang.srt.speculative.dflash_utils import parse_dflash_draft_config  # type: ignore[import-not-found]

    def run(draft: dict[str, Any]) -> dict[str, Any]:
        parsed = parse_dflash_draft_config(draft_hf_config=draft["config"])
        depth = draft.get("target_layers")
        taps = parsed.resolve_target_layer_ids(target_num_layers=depth) if depth else parsed.target_layer_ids
        return {"block_size": parsed.block_size, "mask_token_id": parsed.mask_token_id, "taps": list(taps or []) or None,
                "declared_taps": parsed.target_layer_ids is not None}
    return run


# -- lmdeploy 0.18.0: pytorch/spec_decode/dflash_utils.py parse_dflash_config ----------------------

def lmdeploy(src: Path) -> Callable[[dict[str, Any]], dict[str, Any]]:
    install(src, {"lmdeploy.pytorch.spec_decode.dflash_utils"}, {"lmdeploy"})
    from lmdeploy.pytorch.spec_decode.dflash_utils import parse_dflash_config  # type: ignore[import-not-found]
    from transformers import AutoConfig

    def run(draft: dict[str, Any]) -> dict[str, Any]:
        # lmdeploy reads the draft through hf_configs.config_from_pretrained: AutoConfig first
        hf = AutoConfig.from_pretrained(write_config(draft["config"]))
        nested = getattr(hf, "dflash_config", None)
        block = nested.get("block_size") if isinstance(nested, dict) else None
        k = block - 1 if isinstance(block, int) and not isinstance(block, bool) and block > 1 else 1
        taps, mask = parse_dflash_config(hf, k, target_num_layers=draft.get("target_layers"))
        return {"block_size": block, "mask_token_id": mask, "taps": list(taps)}
    return run


# -- exllamav3 1.6.5: architecture/dflash.py DFlashConfig (dflash2.py, dflash_laguna.py) -----------

EXL3_CLASSES = {"DFlashDraftModel": ("dflash", "DFlashConfig"), "DFlash2DraftModel": ("dflash2", "DFlash2Config"),
                "DFlashLagunaForCausalLM": ("dflash_laguna", "DFlashLagunaConfig")}


def exllamav3(src: Path) -> Callable[[dict[str, Any]], dict[str, Any]]:
    real = {"exllamav3.model.config", "exllamav3.util.file", *(f"exllamav3.architecture.{m}" for m, _ in EXL3_CLASSES.values())}
    install(src, real, {"exllamav3", "torch", "typing_extensions"})
    import importlib

    def run(draft: dict[str, Any]) -> dict[str, Any]:
        archs = draft["config"].get("architectures") or []
        arch = archs[0] if isinstance(archs, list) and archs else None
        if arch not in EXL3_CLASSES:  # architecture/architectures.py maps arch_string -> config class
            raise ValueError(f"exllamav3 has no architecture {arch!r}")
        module, cls = EXL3_CLASSES[arch]
        config_class = getattr(importlib.import_module(f"exllamav3.architecture.{module}"), cls)
        c = config_class(write_config(draft["config"]))
        # c.target_layer_ids are export indices (a layer's output), shifted by tap_shift: the z-lab
        # tap of export index e is e - 1 (exllamav3's export index j is the output of layer j - 1
        # in the convention its tap_shift 1 default assumes for the original release)
        causal = None  # block_window indexes layer_types: a short list fails later, at model build
        if hasattr(c, "block_window") and len(c.layer_types) >= c.num_hidden_layers:
            causal = [c.block_window(i)[1] == 0 if c.layer_types[i] == "sliding_attention" else c.is_causal is True
                      for i in range(c.num_hidden_layers)]
        return {"block_size": c.block_size, "mask_token_id": c.mask_token_id, "export_ids": list(c.target_layer_ids),
                "tap_shift": getattr(c, "tap_shift", None), "causal": causal}
    return run


# -- vLLM (installed): its config loader with the speculators adapter, the aux layers of its V1 ----
# -- runner (gpu_model_runner.py) and its V2 runner (eagle3_utils.py), llm_base_proposer's mask id, -
# -- qwen3_dflash's per-layer causality ------------------------------------------------------------

def vllm(src: Path) -> Callable[[dict[str, Any]], dict[str, Any]]:
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    from vllm.model_executor.models.qwen3_dflash import _dflash_layer_causal
    from vllm.transformers_utils.config import get_config
    from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer
    from vllm.v1.worker.gpu.spec_decode.eagle.eagle3_utils import get_eagle3_aux_layers_from_config
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner  # the V1 runner (0.32/0.33; the CPU build's)

    def run(draft: dict[str, Any]) -> dict[str, Any]:
        hf = get_config(write_config(draft["config"]), trust_remote_code=False)
        model = SimpleNamespace(hf_config=hf)
        spec_config = SimpleNamespace(draft_model_config=model)
        aux = get_eagle3_aux_layers_from_config(spec_config)  # the V2 runner's
        aux_v1 = GPUModelRunner._get_eagle3_aux_layers_from_config(SimpleNamespace(speculative_config=spec_config))
        proposer = SimpleNamespace(draft_model_config=model, pass_hidden_states_to_model=False)
        SpecDecodeBaseProposer._init_parallel_drafting_params(proposer)  # raises with no mask id
        mask = proposer.parallel_drafting_token_id
        layers = getattr(hf, "num_hidden_layers", None)
        causal = [bool(_dflash_layer_causal(hf, i)) for i in range(layers)] if isinstance(layers, int) else None
        nested = getattr(hf, "dflash_config", None) or {}
        return {"block_size": None, "mask_token_id": mask, "taps": [i - 1 for i in aux_v1] if aux_v1 else None,
                "taps_v2": [i - 1 for i in aux] if aux else None,
                "causal": causal, "refuses_anchor_first": nested.get("sample_from_anchor") is True}
    return run


# -- speculators (installed): its converter's reading of a z-lab draft (convert/dflash/converter.py --
# -- DFlashConverter._build_config), its config classes for its own format -------------------------

def speculators(src: Path) -> Callable[[dict[str, Any]], dict[str, Any]]:
    from speculators import SpeculatorModelConfig
    from speculators.convert.dflash.converter import DFlashConverter

    def run(draft: dict[str, Any]) -> dict[str, Any]:
        cfg = draft["config"]
        native = "speculators_model_type" in cfg
        if native:
            c = SpeculatorModelConfig.from_pretrained(write_config(cfg))
        else:  # what `speculators convert DRAFT --verifier TARGET` would write
            c = DFlashConverter()._build_config(cfg, draft["target"], None)
        aux = getattr(c, "aux_hidden_state_layer_ids", None)
        return {"block_size": getattr(c, "block_size", None), "mask_token_id": getattr(c, "mask_token_id", None),
                "taps": [i - 1 for i in aux] if aux else None, "anchor_first": getattr(c, "sample_from_anchor", None),
                "converted": not native}
    return run


ENGINES: dict[str, Callable[[Path], Callable[[dict[str, Any]], dict[str, Any]]]] = {
    "sglang": sglang, "lmdeploy": lmdeploy, "exllamav3": exllamav3, "vllm": vllm, "speculators": speculators}


def main() -> int:
    engine, src, job_path, out_path = sys.argv[1:5]
    job = json.loads(Path(job_path).read_text(encoding="utf-8"))
    run = ENGINES[engine](Path(src))
    results: dict[str, Any] = {}
    for name, draft in job.items():
        try:
            results[name] = {"raises": None, **run(draft)}
        except Exception as exc:  # what the engine's parser refuses is the measurement
            results[name] = {"raises": one_line(exc)}
    Path(out_path).write_text(json.dumps(results), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
