"""Reader verdicts: would each engine load this config as is, and if not, why (docs/DESIGN.md
section 3), and what every verdict must agree with beyond where the engine reads the keys.

Each engine's reader (``ENGINE.judge``) encodes the lookup order the engine documents or
implements (late 2026), not its whole loader. On top of it, ``judge_readers`` adds what loads but
will not work, the same way for every engine: the draft in the block layout its path runs
(``ENGINE.path``), weights that do not load, a sibling family or DSpark head it has no path for,
DFlash2 content it cannot run, and the acceptance-changing keys it ignores (``checks.acceptance``:
"loads, but ignores KEY").

A verdict of "loads as is" beside a DF211 error (an fc width that contradicts target_layer_ids)
told the user the opposite of the findings (issue 31): every engine loads the draft's tensors into
modules sized by the config, strictly, so the header findings that say a tensor is missing or
mis-shaped stop each of them, and each verdict says so.
"""

from __future__ import annotations

from dflash_ckpt.checks.acceptance import ignored_by
from dflash_ckpt.checks.config import DSPARK_ALIASES
from dflash_ckpt.checks.engines.architectures import architecture_problems
from dflash_ckpt.checks.engines.reading import RUNS, TOP_THEN_NESTED, Reading, Verdict
from dflash_ckpt.checks.engines.record import Engine
from dflash_ckpt.checks.engines.registry import ENGINES
from dflash_ckpt.checks.pitfalls import runs_as_v1
from dflash_ckpt.draftspec.siblings import DSPARK, LAGUNA, LILICORR, MUSE_GLIMMER_NAMES
from dflash_ckpt.draftspec.specs import DraftSpec, TargetSpec, build_spec

__all__ = ["LOAD_STOPPERS", "Verdict", "judge_readers"]

#: Header findings that stop every engine's weight load (shape or presence of a tensor the model
#: is built with, or a file that cannot be read).
LOAD_STOPPERS = ("DF203", "DF204", "DF205", "DF206", "DF210", "DF211", "DF212", "DF213", "DF223", "DF224",
                 "DF230", "DF231")


def weight_load_problems(spec: DraftSpec) -> list[str]:
    """One clause per finding in ``LOAD_STOPPERS``, for every reader's verdict."""
    if spec.weights is None:
        return []
    from dflash_ckpt.checks.weights import check_weights  # noqa: PLC0415 - header checks, only with weights

    return [f"its weights do not load ({f.code}: {f.message})" for f in check_weights(spec) if f.code in LOAD_STOPPERS]


def dspark_verdict(engine: Engine, spec: DraftSpec) -> Verdict:
    """The verdict of an engine's DSpark path: the keys at the top level (DeepSpec) or nested, or
    under their ``dspark_`` names."""
    r = Reading(spec)
    for key, alias in DSPARK_ALIASES.items():
        if spec.keys[key].present or spec.dspark(alias) is None:
            r.read(key, TOP_THEN_NESTED, kind="list" if key == "target_layer_ids" else "int")
    return r.verdict(f"loads as DSpark through {engine.dspark_launch}")


def family_problems(engine: Engine, spec: DraftSpec, target: TargetSpec | None) -> list[str]:
    """Why ``engine`` cannot run a sibling family's draft (``Engine.families``; vLLM 0.32.0 is the
    one engine with ``lilicorr.py`` and ``laguna_dflash.py``, and the only one that renames
    Muse-Glimmer's ``encoder.fc``), what its family paths require (``Engine.family_gate``), and a
    DSpark draft's Markov head where it has no DSpark path."""
    family = spec.family
    out: list[str] = []
    if family in (LILICORR, LAGUNA) and family not in engine.families:
        what = "LiLiCorr's candidate-lattice head" if family == LILICORR else "Laguna's draft layers"
        out.append(f"has no {family} path ({what}: vLLM's models/{'lilicorr' if family == LILICORR else 'laguna_dflash'}.py "
                   "is the one modelled engine that serves it)")
    if engine.family_gate is not None:
        out += engine.family_gate(spec, target)
    names = spec.weights.tensors if spec.weights is not None else {}
    if not engine.renames_muse_glimmer and spec.muse_glimmer and any(n in names for n in MUSE_GLIMMER_NAMES):
        out.append("finds no fc.weight: Muse-Glimmer names it encoder.fc.weight (only vLLM renames it)")
    rank = spec.markov_rank
    if family == DSPARK and rank and not engine.path(spec).dspark:
        out.append(f"has no DSpark path: it would drop the Markov head (markov_rank {rank})")
    return out


def generation_problems(engine: Engine, spec: DraftSpec, target: TargetSpec | None) -> list[str]:
    """Why ``engine`` cannot run this draft's generation, beyond where it finds the DFlash keys:
    DFlash2 content labelled v1 (every engine), or what it needs of DFlash2 (``Engine.dflash2_gate``)."""
    if runs_as_v1(spec):
        return ["architectures says DFlashDraftModel over the DFlash2 keys, so it runs the draft as "
                "DFlash v1 without its conv layers and selector, and accepts almost nothing (DF152)"]
    if spec.generation != "DFlash2" or engine.dflash2_gate is None:
        return []
    return engine.dflash2_gate(spec, target)


def speculators_verdict(engine: Engine, spec: DraftSpec, target: TargetSpec | None, verdict: Verdict) -> Verdict:
    """A speculators-native draft's row: an engine with a reader of the format keeps the verdict of
    the z-lab view (and says through what it reads it); any other fails, saying what is known of it
    and what its modelled reader finds in the raw file."""
    if engine.speculators_reader is not None:
        if not verdict.loads:
            return verdict
        return Verdict(True, f"{verdict.reason}; {engine.speculators_reader}")
    assert spec.native is not None
    raw = build_spec(spec.native.raw, label=spec.label, where=spec.where, weights=spec.weights, view=False)
    found = engine.judge(raw, target)
    detail = f"; as modelled: {found.reason.removeprefix('fails: ')}" if not found.loads else ""
    return Verdict(False, f"fails: no reader of the speculators-native format ({engine.speculators_fact}){detail}")


def judge_readers(spec: DraftSpec, target: TargetSpec | None = None) -> dict[str, Verdict]:
    """Verdict of every reader, keyed by its short name: where it reads the keys (through its DSpark
    path for a DSpark draft it serves that way), then what it cannot run: the draft in the block
    layout its path runs (``checks.layout``), weights that do not load (the DF210-DF213 findings
    stop every engine), a family or generation it has no path for, and the acceptance-changing
    keys it loads the draft without."""
    out: dict[str, Verdict] = {}
    stoppers = weight_load_problems(spec)
    for engine in ENGINES:
        path = engine.path(spec)
        verdict = dspark_verdict(engine, spec) if path.dspark and path.status == RUNS else engine.judge(spec, target)
        if spec.native is not None:
            verdict = speculators_verdict(engine, spec, target, verdict)
        layout = () if path.status == RUNS else (path.why,)
        arch_problems, arch_notes = architecture_problems(engine.key, spec)  # architectures new since 0.32
        problems = [*stoppers, *family_problems(engine, spec, target), *generation_problems(engine, spec, target),
                    *arch_problems]
        if problems or layout:
            old = verdict.reason.removeprefix("fails: ") if not verdict.loads else ""
            verdict = Verdict(False, "fails: " + "; ".join(p for p in (*layout, old, *problems) if p))
        elif verdict.loads:
            ignored = ignored_by(spec, engine.key)
            if ignored:
                rest = verdict.reason.removeprefix("loads as is").lstrip("; ")
                verdict = Verdict(True, f"loads, but ignores {', '.join(ignored)} (acceptance drops)" + (f"; {rest}" if rest else ""))
        note = engine.loading_note(spec) if engine.loading_note is not None and verdict.loads else None
        if note:
            verdict = Verdict(True, f"{verdict.reason}; {note}")
        if verdict.loads and arch_notes:
            verdict = Verdict(True, "; ".join((verdict.reason, *arch_notes)))
        out[engine.key] = verdict
    return out
