"""Edit a JSON config as text, so that everything not edited stays byte for byte as it was.

``normalize`` must keep every other key, the key order, the indentation, the number spelling
(``1e-06`` stays ``1e-06``) and the trailing newline. Re-serializing the parsed object cannot
promise that for files written by other tools, so edits are applied to the text itself: a value
is replaced in its span, a member is inserted with the whitespace its siblings use, a member is
removed with its comma. New values are rendered in the style detected from the file. After the
edits the text is parsed again and compared with the object the edits describe; only if that
ever disagreed would the whole document be re-serialized in the detected style.
"""

from __future__ import annotations

import copy
import difflib
import json
import math
from typing import Any, NamedTuple, Sequence

from dflash_ckpt.errors import InputError

_WS = " \t\n\r"
_DECODER = json.JSONDecoder()
BOM = "\ufeff"

ADD, SET, REMOVE = "add", "set", "remove"


# NamedTuples, not frozen dataclasses: a frozen dataclass costs about 1.5 ms to build at import,
# and inspect imports this module whenever a reader fails (its normalize command).
class Edit(NamedTuple):
    """One change to a JSON object tree: ``path`` names the member, from the top-level object.

    ``add`` inserts a new member at ``index`` among its object's members (the end when ``None``),
    ``set`` replaces an existing member's value, ``remove`` deletes the member.
    """

    op: str
    path: tuple[str, ...]
    value: Any = None
    index: int | None = None


class Member(NamedTuple):
    key: str
    key_start: int
    key_end: int
    value_start: int
    value_end: int
    value: Any


class ObjectSpan(NamedTuple):
    start: int  # index of '{'
    end: int  # index just past '}'
    members: list[Member]

    def find(self, key: str) -> int | None:
        for i, m in enumerate(self.members):
            if m.key == key:
                return i
        return None


class TextStyle(NamedTuple):
    """How new content is written: the file's indent unit (``None``: one line), separators, escapes."""

    indent: str | None
    key_sep: str
    item_sep: str
    ensure_ascii: bool
    newline: str


def _skip_ws(text: str, i: int) -> int:
    n = len(text)
    while i < n and text[i] in _WS:
        i += 1
    return i


def parse_object(text: str, i: int) -> ObjectSpan:
    """The members of the object starting at ``text[i] == '{'``, with their spans."""
    if text[i] != "{":
        raise ValueError(f"expected an object at offset {i}")
    start = i
    i = _skip_ws(text, i + 1)
    members: list[Member] = []
    if text[i] == "}":
        return ObjectSpan(start, i + 1, members)
    while True:
        i = _skip_ws(text, i)
        key, key_end = _DECODER.raw_decode(text, i)
        j = _skip_ws(text, key_end)
        if text[j] != ":":
            raise ValueError(f"expected ':' at offset {j}")
        vstart = _skip_ws(text, j + 1)
        value, vend = _DECODER.raw_decode(text, vstart)
        members.append(Member(key, i, key_end, vstart, vend, value))
        i = _skip_ws(text, vend)
        if text[i] == ",":
            i += 1
            continue
        if text[i] == "}":
            return ObjectSpan(start, i + 1, members)
        raise ValueError(f"expected ',' or '}}' at offset {i}")


def _line_indent(text: str, pos: int) -> str:
    """The leading whitespace of the line holding ``pos``."""
    line_start = text.rfind("\n", 0, pos) + 1
    end = line_start
    while end < len(text) and text[end] in " \t":
        end += 1
    return text[line_start:end]


def _ws_before(text: str, obj: ObjectSpan, i: int) -> str:
    """The whitespace between member ``i`` and the ``{`` or ``,`` that precedes it."""
    key_start = obj.members[i].key_start
    if i == 0:
        return text[obj.start + 1:key_start]
    comma = text.index(",", obj.members[i - 1].value_end)
    return text[comma + 1:key_start]


def detect_style(text: str, top: ObjectSpan) -> TextStyle:
    """The conventions of an existing document, defaulting to what transformers writes."""
    newline = "\r\n" if "\r\n" in text else "\n"
    ensure_ascii = not any(ord(c) > 127 for c in text)
    indent: str | None = "  "
    key_sep, item_sep = ": ", ", "
    if top.members:
        ws0 = _ws_before(text, top, 0)
        if "\n" in ws0:
            own = _line_indent(text, top.start)
            line = ws0.rsplit("\n", 1)[1]
            indent = line[len(own):] if line.startswith(own) and len(line) > len(own) else "  "
        else:
            indent = None
            if len(top.members) > 1:
                item_sep = "," + _ws_before(text, top, 1)
        first = top.members[0]
        key_sep = text[first.key_end:first.value_start] or ":"
    return TextStyle(indent=indent, key_sep=key_sep, item_sep=item_sep, ensure_ascii=ensure_ascii, newline=newline)


def render_value(value: Any, style: TextStyle, base_indent: str, *, one_line: bool = False) -> str:
    """``value`` as JSON text placed on a line indented by ``base_indent``."""
    if style.indent is None or one_line:
        return json.dumps(value, separators=(style.item_sep, style.key_sep), ensure_ascii=style.ensure_ascii)
    text = json.dumps(value, indent=style.indent, separators=(",", style.key_sep), ensure_ascii=style.ensure_ascii)
    return text.replace("\n", style.newline + base_indent)


def apply_edit(obj: dict[str, Any], edit: Edit) -> dict[str, Any]:
    """``edit`` applied to a parsed object tree, returning a new tree (key order as the text gets it)."""
    out = copy.deepcopy(obj)
    *parents, key = edit.path
    node = out
    for p in parents:
        node = node[p]
    if edit.op == SET:
        if key not in node:
            raise KeyError(f"cannot set {'.'.join(edit.path)}: absent")
        node[key] = copy.deepcopy(edit.value)
    elif edit.op == REMOVE:
        del node[key]
    elif edit.op == ADD:
        if key in node:
            raise KeyError(f"cannot add {'.'.join(edit.path)}: present")
        items = list(node.items())
        index = len(items) if edit.index is None else edit.index
        items.insert(index, (key, copy.deepcopy(edit.value)))
        node.clear()
        node.update(items)
    else:
        raise ValueError(f"unknown edit {edit.op!r}")
    return out


def same_tree(a: Any, b: Any) -> bool:
    """Equal as JSON text, key order included (dict equality ignores order)."""
    return json.dumps(a) == json.dumps(b)


class ConfigText:
    """The text of a JSON config with its top-level object, edited in place."""

    def __init__(self, raw: bytes, where: str) -> None:
        self.where = where
        text = raw.decode("utf-8")
        self.bom = text.startswith(BOM)
        self.text = text[1:] if self.bom else text
        self.original = raw
        top = self._top()
        self.trailing = self.text[top.end:]
        self.style = detect_style(self.text, top)
        self.fell_back = False
        self._refuse_duplicates(top, ())

    def _top(self) -> ObjectSpan:
        return parse_object(self.text, _skip_ws(self.text, 0))

    def _refuse_duplicates(self, obj: ObjectSpan, path: tuple[str, ...]) -> None:
        """A key given twice is read as the last one by Python and as either by other parsers:
        refused at every level (``dflash_config``, ``rope_parameters`` and its per-layer objects)."""
        seen: set[str] = set()
        for m in obj.members:
            if m.key in seen:
                place = "the top level" if not path else ".".join(path)
                raise InputError(
                    f"key '{m.key}' appears twice in {place}; JSON readers disagree "
                    "on which one counts, delete one of them",
                    code="DF002", path=self.where,
                )
            seen.add(m.key)
            if isinstance(m.value, dict):
                self._refuse_duplicates(parse_object(self.text, m.value_start), (*path, m.key))

    def value(self) -> Any:
        return json.loads(self.text)

    def _object_at(self, path: Sequence[str]) -> ObjectSpan:
        obj = self._top()
        for key in path:
            i = obj.find(key)
            if i is None:
                raise KeyError(".".join(path))
            obj = parse_object(self.text, obj.members[i].value_start)
        return obj

    def apply(self, edit: Edit) -> None:
        *parents, key = edit.path
        obj = self._object_at(parents)
        t = self.text
        i = obj.find(key)
        if edit.op == SET:
            assert i is not None
            m = obj.members[i]
            one_line = "\n" not in t[obj.start:obj.end]
            new = render_value(edit.value, self.style, _line_indent(t, m.key_start), one_line=one_line)
            self.text = t[:m.value_start] + new + t[m.value_end:]
        elif edit.op == REMOVE:
            assert i is not None
            ms = obj.members
            if len(ms) == 1:
                self.text = t[:obj.start] + "{}" + t[obj.end:]
            elif i < len(ms) - 1:
                self.text = t[:ms[i].key_start] + t[ms[i + 1].key_start:]
            else:
                self.text = t[:ms[i - 1].value_end] + t[ms[i].value_end:]
        elif edit.op == ADD:
            assert i is None
            self.text = self._insert(obj, key, edit.value, edit.index)
        else:
            raise ValueError(f"unknown edit {edit.op!r}")

    def _insert(self, obj: ObjectSpan, key: str, value: Any, index: int | None) -> str:
        t, st = self.text, self.style
        ms = obj.members
        index = len(ms) if index is None else index
        key_text = json.dumps(key, ensure_ascii=st.ensure_ascii)
        if not ms:
            own = _line_indent(t, obj.start)
            if st.indent is None:
                body = key_text + st.key_sep + render_value(value, st, "")
                return t[:obj.start] + "{" + body + "}" + t[obj.end:]
            inner = own + st.indent
            body = key_text + st.key_sep + render_value(value, st, inner)
            return t[:obj.start] + "{" + st.newline + inner + body + st.newline + own + "}" + t[obj.end:]
        key_sep = t[ms[0].key_end:ms[0].value_start] or st.key_sep
        if len(ms) > 1:
            between = _ws_before(t, obj, 1 if index == 0 else min(index, len(ms) - 1))
        else:
            ws0 = _ws_before(t, obj, 0)
            between = ws0 if "\n" in ws0 else (ws0 or st.item_sep[1:] or "")
        multi_line = "\n" in between
        indent = between.rsplit("\n", 1)[1] if multi_line else ""
        member = key_text + key_sep + render_value(value, st, indent, one_line=not multi_line)
        if index < len(ms):
            at = ms[index].key_start
            lead = _ws_before(t, obj, index)
            # the new member takes member ``index``'s place and hands it the sibling whitespace
            return t[:at] + member + "," + (between if index == 0 else lead) + t[at:]
        end = ms[-1].value_end
        return t[:end] + "," + between + member + t[end:]

    def render(self, edits: Sequence[Edit], expected: Any) -> bytes:
        """Apply ``edits`` and return the file's new bytes; the original bytes when there are none.
        Either way the result is strict JSON (``refuse_non_finite``)."""
        refuse_non_finite(self.value(), self.where)  # named as the source spells it
        refuse_non_finite(expected, self.where)
        if not edits:
            return self.original
        for edit in edits:
            self.apply(edit)
        try:
            ok = same_tree(json.loads(self.text), expected)
        except json.JSONDecodeError:
            ok = False
        if not ok:
            # Never expected; the verified fallback keeps the promise that the content is right.
            self.fell_back = True
            self.text = render_value(expected, self.style, "") + self.trailing
            if not same_tree(json.loads(self.text), expected):
                raise AssertionError("re-serialized config does not match the planned config")
        return ((BOM if self.bom else "") + self.text).encode("utf-8")


def non_finite_path(value: Any, path: tuple[str, ...] = ()) -> tuple[str, ...] | None:
    """Where ``value`` holds a float that is NaN or infinite (``NaN``, ``Infinity``, or ``1e400``
    which Python reads as infinity), else ``None``."""
    if isinstance(value, float) and not math.isfinite(value):
        return path
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found = non_finite_path(item, (*path, str(key)))
        if found is not None:
            return found
    return None


def refuse_non_finite(value: Any, where: str) -> None:
    """normalize writes strict JSON: ``json.dumps`` would write ``Infinity`` or ``NaN``, which
    JSON does not have (serde_json, JavaScript and Go refuse the file); one DF002 line instead."""
    path = non_finite_path(value)
    if path is not None:
        raise InputError(
            f"key '{'.'.join(path)}' is not a finite number (NaN, Infinity, or a literal like 1e400 "
            "beyond a double); normalize writes strict JSON only: fix the value in the source", code="DF002",
            key=".".join(path), path=where)


def unified_diff(old: bytes, new: bytes, old_name: str, new_name: str) -> str:
    """The change to config.json as a unified diff ('' when nothing changes)."""
    if old == new:
        return ""
    a = old.decode("utf-8-sig").splitlines(keepends=True)
    b = new.decode("utf-8-sig").splitlines(keepends=True)
    lines = list(difflib.unified_diff(a, b, old_name, new_name))
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)
