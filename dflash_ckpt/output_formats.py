"""The ``--output-format`` values, one record each in ``FORMATS``: JSON, GitHub annotations and
SARIF 2.1.0 (as ruff writes them) beside the text report.

Each renderer is a pure function over the command's JSON document (the dict ``--json`` prints),
so every format says exactly what the JSON says: a finding the JSON holds is an annotation or a
SARIF result, nothing is re-checked and nothing is dropped. The CLI's choices and their help are
read from the table at start-up (this module imports the standard library only); neither rich nor
torch is imported on this path.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Iterator, Literal
from urllib.parse import quote

from dflash_ckpt._version import __version__
from dflash_ckpt.errors import inert
from dflash_ckpt.neutral import json_safe

SARIF_VERSION = "2.1.0"
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"

#: Finding severity -> GitHub workflow command (GitHub has no "info": its lowest is a notice).
GITHUB_COMMAND = {"error": "error", "warning": "warning", "info": "notice"}
#: Finding severity -> SARIF ``level``.
SARIF_LEVEL = {"error": "error", "warning": "warning", "info": "note"}


def inert_lines(text: str) -> str:
    """``text`` with every line made inert (``errors.inert``, what every other line of ours goes
    through: terminal escapes, BEL, OSC-8 links, bidi overrides and ``##[`` openers written as
    visible escapes) but its line breaks kept, for a workflow command to escape itself (``%0A``)."""
    return "\n".join("\r".join(inert(part) for part in line.split("\r")) for line in text.split("\n"))


def escape_data(text: str) -> str:
    """A workflow command's message, escaped as GitHub's runner reads it back (``%``, CR, LF),
    its text made inert first (``inert_lines``: no terminal escape, BEL, OSC-8 link or
    ``##[`` opener from a config or an engine's log reaches the CI log)."""
    return inert_lines(text).replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A workflow command's property value (``file=``, ``title=``): also ``:`` and ``,``, which
    would otherwise end the value."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def iter_findings(doc: dict[str, Any]) -> Iterator[tuple[dict[str, Any], str]]:
    """Every finding of the document with the file it is about: its ``path``, else the draft.

    The document's own ``error`` (the run stopped before any draft, e.g. an unreadable target) is
    yielded as an error finding too, so CI sees why the run failed, unless a result carries that
    same error as its finding (a missing draft is one annotation, not two). A refused pair's
    pre-check findings (smoke-run's and probe-taps' ``precheck``) count as findings.
    """
    results = doc.get("results", [])
    carried = {(r["error"].get("code"), r["error"].get("message")) for r in results if isinstance(r.get("error"), dict)}
    error = doc.get("error")
    if error and (error.get("code"), error.get("message")) not in carried:
        path, message = error.get("path"), error["message"]
        if path and message.startswith(f"{path}: "):
            # an error's JSON message is its own ``path`` field then its text (``DFlashCkptError``):
            # the file goes in its own property, as a finding's does
            message = message[len(path) + 2:]
        yield {"code": error["code"], "severity": "error", "path": path, "key": error.get("key"), "message": message}, path or ""
    for result in results:
        for f in [*result.get("precheck", []), *result.get("findings", [])]:
            yield f, f.get("path") or result.get("draft") or ""


#: ``--annotations``: which severities become GitHub annotations. Notices (DF220 on every draft)
#: would spend the run's annotation quota (10 per step and kind) on facts, so they are asked for.
ANNOTATIONS = {"warnings": ("error", "warning"), "all": ("error", "warning", "info"), "errors": ("error",)}


def github_annotations(doc: dict[str, Any], annotations: str = "warnings") -> str:
    """``::error file=PATH,title=DF101::message`` lines, one per finding of the severities
    ``annotations`` names (errors and warnings by default; ``all`` adds the info notices).

    GitHub shows them on the run's summary and, when ``file`` is a file of the repository, on the
    file in a pull request's diff. The key a finding names is put in front of its message.
    """
    wanted = ANNOTATIONS[annotations]
    lines = []
    for f, where in iter_findings(doc):
        if f.get("severity", "error") not in wanted:
            continue
        where = file_of(where) if where else where
        props = [f"file={escape_property(where)}"] if where else []
        line = key_line(where, f.get("key")) if where else 1
        if line > 1:
            props.append(f"line={line}")
        props.append(f"title={escape_property(f['code'])}")
        message = f["message"] if not f.get("key") or f["key"] in f["message"] else f"{f['key']}: {f['message']}"
        lines.append(f"::{GITHUB_COMMAND.get(f['severity'], 'error')} {','.join(props)}::{escape_data(message)}")
    notice = verdict_notice(doc)
    if notice is not None:  # a pass is said too: a run that printed nothing reads as one that did not run
        lines.append(f"::notice title={escape_property('dflash-ckpt ' + doc['command'])}::{escape_data(notice)}")
    return "".join(line + "\n" for line in lines)


def verdict_notice(doc: dict[str, Any]) -> str | None:
    """The verdict of a passing smoke-run or probe-taps in one line (the github format's one
    notice: a passing run printed nothing at all), None otherwise (inspect's pass stays silent,
    as a linter's does)."""
    if not doc.get("ok") or not doc.get("results"):
        return None
    r, command = doc["results"][0], doc.get("command")
    if command == "smoke-run":
        o = r.get("overall") or {}
        if o.get("tau") is None:
            return None
        codes = {f.get("code") for f in r.get("findings", [])}
        word = "NO VERDICT (DF408: too little evidence)" if "DF408" in codes else "PASS"
        ci = o.get("tau_ci95")
        tau = f"tau {o['tau']:.2f}" + (f" (95% {ci[0]:.2f}-{ci[1]:.2f})" if ci else "")
        prompts = r.get("prompts", [])
        same = sum(1 for p in prompts if (p.get("lossless") or {}).get("status") in ("identical", "tie"))
        outputs = ("outputs sampled" if (r.get("settings") or {}).get("lossless") == "sampled"
                   else f"outputs match on {same}/{len(prompts)} prompt(s)")
        sci = o.get("speedup_ci95")
        speed = "speedup withheld" if o.get("speedup") is None else f"speedup {o['speedup']:.2f}x" + (
            f" (95% {sci[0]:.2f}x-{sci[1]:.2f}x)" if sci else "")
        return f"{word}: {r.get('draft')} on {r.get('target')}: {tau}, {outputs}, {speed}"
    if command == "probe-taps":
        best = r.get("best") or {}
        if best.get("tau") is None:
            return None
        return (f"OK: {r.get('draft')} on {r.get('target')}: best target_layer_ids {best.get('target_layer_ids')}, "
                f"tau {best['tau']:.2f}")
    return None


#: The largest JSON file searched for a key's line (a config is a few KB).
_KEY_LINE_MAX_BYTES = 4_000_000


def key_line(path: str, key: str | None) -> int:
    """The line of ``key`` (dotted: ``dflash_config.block_size``; each part searched after the one
    before) in the JSON file ``path``; 1 when there is no key, the file is not a local JSON file,
    or the key is not written in it (a missing key's finding points at the file's top)."""
    if not key or not path.endswith(".json"):
        return 1
    try:
        file = Path(path)
        if not file.is_file() or file.stat().st_size > _KEY_LINE_MAX_BYTES:
            return 1
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError, ValueError):
        return 1
    pos, found = 0, False
    for part in re.sub(r"\[\d+\]", "", key).split("."):
        m = re.compile(re.escape(json.dumps(part)) + r"\s*:").search(text, pos)
        if m is None:
            break
        pos, found = m.start(), True
    return text.count("\n", 0, pos) + 1 if found else 1


def file_of(where: str) -> str:
    """A finding's location as a file: a local draft folder stands for its config.json (code
    scanning places alerts on files, never on a folder)."""
    folder = Path(where)
    try:
        if folder.is_dir() and (folder / "config.json").is_file():
            return str(folder / "config.json")
    except (OSError, ValueError):
        pass
    return where


def artifact_uri(path: str, root: str | None = None) -> str:
    """A finding's file as a SARIF ``uri``: relative to ``root`` (default: the working directory)
    when it lies below it, so code scanning can place it in the repository; else absolute
    (``file://``). Hub locations (``org/name@rev:config.json``) stay as written, percent-encoded."""
    root = os.getcwd() if root is None else root
    try:
        p = Path(path).expanduser()
    except RuntimeError:  # ``~nosuchuser/...``: no home to expand; the location stays as written
        p = Path(path)
    if p.is_absolute():
        try:
            return quote(PurePosixPath(*p.resolve().relative_to(Path(root).resolve()).parts).as_posix(), safe="/@")
        except ValueError:
            return p.resolve().as_uri()
    return quote(PurePosixPath(*p.parts).as_posix() if p.parts else path, safe="/@")


def sarif_rules() -> list[dict[str, Any]]:
    """One SARIF ``reportingDescriptor`` per rule code, from the registry (``dflash-ckpt rules``)."""
    from dflash_ckpt.rules import RULES

    return [
        {
            "id": r.code,
            "name": r.name,
            "shortDescription": {"text": r.summary},
            "fullDescription": {"text": r.explanation},
            "help": {"text": f"{r.explanation}\nFix: {r.fix}", "markdown": f"{r.explanation}\n\n**Fix:** {r.fix}"},
            "defaultConfiguration": {"level": SARIF_LEVEL[r.severity.value]},
        }
        for r in RULES.values()
    ]


def sarif_document(doc: dict[str, Any], root: str | None = None) -> dict[str, Any]:
    """A SARIF 2.1.0 log of the run: one tool run, every rule described, one result per finding."""
    rules = sarif_rules()
    index = {r["id"]: i for i, r in enumerate(rules)}
    results = []
    for f, where in iter_findings(doc):
        result: dict[str, Any] = {
            "ruleId": f["code"],
            "level": SARIF_LEVEL.get(f["severity"], "error"),
            "message": {"text": inert_lines(f["message"])},
        }
        if f["code"] in index:
            result["ruleIndex"] = index[f["code"]]
        if where:
            file = file_of(where)
            location: dict[str, Any] = {"physicalLocation": {
                "artifactLocation": {"uri": artifact_uri(file, root)},
                "region": {"startLine": key_line(file, f.get("key"))}}}
            if f.get("key"):
                location["logicalLocations"] = [{"fullyQualifiedName": f["key"], "kind": "member"}]
            result["locations"] = [location]
        results.append(result)
    return {
        "$schema": SARIF_SCHEMA,
        "version": SARIF_VERSION,
        "runs": [{
            "tool": {"driver": {"name": "dflash-ckpt", "version": __version__, "rules": rules}},
            "invocations": [{"executionSuccessful": not doc.get("error"), "exitCode": doc.get("exit_code", 0)}],
            "results": results,
        }],
    }


def json_text(doc: dict[str, Any], annotations: str = "warnings") -> str:
    """The document as JSON (``--json``), every string JSON-escaped safe for a terminal."""
    return json_safe(json.dumps(doc, indent=2)) + "\n"


def sarif_text(doc: dict[str, Any], annotations: str = "warnings") -> str:
    """The document as a SARIF 2.1.0 log (``sarif_document``)."""
    return json_text(sarif_document(doc))


@dataclass(frozen=True)
class OutputFormat:
    """One ``--output-format``: its name, its words in ``--help``, and how a document prints in
    it (``render(doc, annotations)``; ``None`` for the text report each command draws with rich)."""

    name: str
    help: str
    render: Callable[[dict[str, Any], str], str] | None
    #: smoke-run and probe-taps offer it too (SARIF: a run's findings name no file lines).
    runs: bool = True
    #: A run printing it still writes its progress lines to stderr (a CI log wants them).
    progress_lines: bool = False


#: Every ``--output-format``, in the order ``--help`` names them; ``--json`` is ``json``'s alias.
FORMATS = {f.name: f for f in (
    OutputFormat("text", "text (the report)", None),
    OutputFormat("json", "json (as --json)", json_text),
    OutputFormat("github", "github (workflow annotations of the findings; see --annotations)", github_annotations,
                 progress_lines=True),
    OutputFormat("sarif", "sarif (SARIF 2.1.0)", sarif_text, runs=False),
)}


def choices(runs: bool = False) -> tuple[Any, str]:
    """The ``Literal`` of the format names a command offers (a run's, or inspect's: all), and the
    ``--output-format`` help that names them."""
    names = [f for f in FORMATS.values() if f.runs or not runs]
    words = ", ".join(f.help for f in names[:-1]) + " or " + names[-1].help
    return Literal[tuple(f.name for f in names)], words + "."  # type: ignore[valid-type]
