"""OUT's parent folders: which are missing, whether normalize may create them, creating them and
undoing that after a failure. The writing of OUT itself is ``canonical/fsops.py``."""

from __future__ import annotations

from pathlib import Path


def missing_parents(out: Path) -> list[Path]:
    """OUT's ancestors that do not exist yet, outermost first (normalize creates them)."""
    missing: list[Path] = []
    parent = out.absolute().parent
    while not parent.exists() and not parent.is_symlink() and parent != parent.parent:
        missing.append(parent)
        parent = parent.parent
    return missing[::-1]


def require_new_parents(draft_dir: Path, out: Path) -> None:
    """Before anything is created: the folders normalize would make for OUT can be made, outside DRAFT."""
    import os

    from dflash_ckpt.errors import InputError, UsageError

    missing = missing_parents(out)
    base = missing[0].parent
    if not base.is_dir():
        raise UsageError(f"OUT {out}: {base} is not a folder, so OUT's parent folders cannot be created there")
    real_out = Path(os.path.realpath(base)) / out.absolute().relative_to(base)
    real_draft = Path(os.path.realpath(draft_dir))
    if real_draft == real_out or real_draft in real_out.parents:
        raise UsageError(f"OUT {out} is inside DRAFT {draft_dir}; give a folder outside it")
    if not os.access(base, os.W_OK | os.X_OK):
        raise InputError("not writable by this user; OUT's parent folders cannot be created there (choose another folder or fix its permissions)",
                         path=base)


def make_parents(out: Path) -> list[Path]:
    """Create OUT's missing parent folders; the ones created, outermost first."""
    from dflash_ckpt.errors import InputError
    from dflash_ckpt.sources.base import os_error

    created: list[Path] = []
    for folder in missing_parents(out):
        try:
            folder.mkdir()
        except FileExistsError:
            continue
        except OSError as err:
            remove_empty(created)
            raise os_error(err, str(folder)) from None
        created.append(folder)
    return created


def remove_empty(created: list[Path]) -> None:
    """Undo ``make_parents`` after a failure: remove the folders it made, innermost first, if empty."""
    for folder in reversed(created):
        try:
            folder.rmdir()
        except OSError:
            return
