"""CI output formats of ``inspect``, as ruff writes them: GitHub annotations and SARIF 2.1.0.

Pure functions over inspect's JSON document (the dict ``--json`` prints), so every format says
exactly what the JSON says: a finding the JSON holds is an annotation or a SARIF result, nothing
is re-checked and nothing is dropped. Neither rich nor torch is imported on this path.
"""

from __future__ import annotations

import json
import os
from pathlib import Path, PurePosixPath
from typing import Any, Iterator
from urllib.parse import quote

from dflash_ckpt._version import __version__

#: ``--output-format`` values; ``--json`` is the ``json`` alias.
OUTPUT_FORMATS = ("text", "json", "github", "sarif")

SARIF_VERSION = "2.1.0"
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"

#: Finding severity -> GitHub workflow command (GitHub has no "info": its lowest is a notice).
GITHUB_COMMAND = {"error": "error", "warning": "warning", "info": "notice"}
#: Finding severity -> SARIF ``level``.
SARIF_LEVEL = {"error": "error", "warning": "warning", "info": "note"}


def escape_data(text: str) -> str:
    """A workflow command's message, escaped as GitHub's runner reads it back (``%``, CR, LF)."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A workflow command's property value (``file=``, ``title=``): also ``:`` and ``,``, which
    would otherwise end the value."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def iter_findings(doc: dict[str, Any]) -> Iterator[tuple[dict[str, Any], str]]:
    """Every finding of the document with the file it is about: its ``path``, else the draft.

    The document's own ``error`` (the run stopped before any draft, e.g. an unreadable target) is
    yielded as an error finding too, so CI sees why the run failed.
    """
    error = doc.get("error")
    if error:
        yield {"code": error["code"], "severity": "error", "path": None, "key": None, "message": error["message"]}, ""
    for result in doc.get("results", []):
        for f in result.get("findings", []):
            yield f, f.get("path") or result.get("draft") or ""


def github_annotations(doc: dict[str, Any]) -> str:
    """``::error file=PATH,title=DF101::message`` lines, one per finding (empty for a clean run).

    GitHub shows them on the run's summary and, when ``file`` is a file of the repository, on the
    file in a pull request's diff. The key a finding names is put in front of its message.
    """
    lines = []
    for f, where in iter_findings(doc):
        props = [f"file={escape_property(where)}"] if where else []
        props.append(f"title={escape_property(f['code'])}")
        message = f["message"] if not f.get("key") or f["key"] in f["message"] else f"{f['key']}: {f['message']}"
        lines.append(f"::{GITHUB_COMMAND.get(f['severity'], 'error')} {','.join(props)}::{escape_data(message)}")
    return "".join(line + "\n" for line in lines)


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
            "message": {"text": f["message"]},
        }
        if f["code"] in index:
            result["ruleIndex"] = index[f["code"]]
        if where:
            location: dict[str, Any] = {"physicalLocation": {"artifactLocation": {"uri": artifact_uri(where, root)}}}
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


def render(doc: dict[str, Any], output_format: str) -> str:
    """The text to print for ``doc`` in a machine format (``json``, ``github`` or ``sarif``)."""
    if output_format == "github":
        return github_annotations(doc)
    if output_format == "sarif":
        return json.dumps(sarif_document(doc), indent=2) + "\n"
    return json.dumps(doc, indent=2) + "\n"
