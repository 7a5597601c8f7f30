"""What a ``.safetensors`` file that is not one holds instead: a Git LFS pointer, an HTML page,
JSON, a zip (torch.save's pickle format) or plain text, told from its first bytes.

A clone made without Git LFS leaves ~130-byte text stubs under the weights' names, and their first
eight bytes (``version ``) read as a header length of 2.3e18; saying "exceeds the cap" sends a
person hunting for corruption when the fix is ``git lfs pull``. The sniff runs only when the
header does not make sense, reads at most ``SNIFF_BYTES`` and never interprets the content.
"""

from __future__ import annotations

import re

from dflash_ckpt.sources.base import Source

#: How many bytes the sniff reads (an LFS pointer is about 130).
SNIFF_BYTES = 512
LFS_SIGNATURE = b"version https://git-lfs.github.com/spec/"
_OID = re.compile(rb"^oid sha256:([0-9a-f]{64})$", re.M)
_SIZE = re.compile(rb"^size (\d+)$", re.M)


def lfs_pointer_message(head: bytes) -> str | None:
    """DF230's message (the text after the file's location) when ``head`` is a Git LFS pointer
    file, else ``None``."""
    if not head.startswith(LFS_SIGNATURE):
        return None
    oid, size = _OID.search(head), _SIZE.search(head)
    what = []
    if oid:
        what.append(f"oid sha256:{oid.group(1)[:12].decode()}...")
    if size:
        what.append(f"the real file is {int(size.group(1)):,} bytes")
    detail = f" ({', '.join(what)})" if what else ""
    return (f"this is a Git LFS pointer{detail}, not the weights: run `git lfs pull` in the clone "
            "(in GitHub Actions, actions/checkout with `lfs: true`)")


def other_format(head: bytes) -> str | None:
    """What ``head`` looks like when it is a known non-safetensors format, else ``None``."""
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    if text.startswith((b"<!doctype html", b"<html", b"<head", b"<?xml")):
        return "an HTML page (a download that saved a login or error page)"
    if head.startswith(b"PK\x03\x04"):
        return "a zip archive (torch.save's pickle format; it is never opened here)"
    if head.startswith(b"\x80") and len(head) > 1 and head[1] in range(2, 6):
        return "a Python pickle (it is never opened here)"
    if text.startswith((b"{", b"[")):
        return "JSON text"
    if head and all(32 <= b < 127 or b in (9, 10, 13) for b in head[:64]):
        return "plain text"
    return None


def sniff(source: Source, name: str, size: int, *, signatures_only: bool = False) -> tuple[str, str] | None:
    """``(code, message)`` (the message without the file's location) when the file ``name`` is an LFS pointer (DF230) or another format
    (DF231); ``None`` when it may be a (broken) safetensors file. ``signatures_only``: the first
    eight bytes are a plausible header length (a file cut short), so only a 4-byte magic number
    counts (a zip's), not a first character such as ``{`` that a real length's low byte can be."""
    head = source.read(name, 0, min(size, SNIFF_BYTES))
    message = lfs_pointer_message(head)
    if message is not None:
        return "DF230", message
    kind = other_format(head)
    if signatures_only and not head.startswith(b"PK\x03\x04"):
        kind = None
    if kind is None:
        return None
    return "DF231", (f"this is {kind}, not a safetensors file; download it again "
                     "(`hf download REPO FILE`) or convert it with the publisher's tools")
