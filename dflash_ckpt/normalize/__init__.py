"""``normalize``'s modules (plan, config text, build, lock, run), and ``dflash_ckpt.normalize(...)``.

The package shares its name with the API function ``dflash_ckpt.normalize``: Python binds a
subpackage to its parent's attribute once it is imported, so the function could not keep the
name. The package is made callable instead: ``dflash_ckpt.normalize(draft, out=None, ...)``
calls ``dflash_ckpt.api.normalize`` and ``dflash_ckpt.normalize.run`` stays this package's module.
"""

from __future__ import annotations

import inspect
import sys
import types
from typing import Any


class _CallablePackage(types.ModuleType):
    def __call__(self, *args: Any, **options: Any) -> Any:
        """``dflash_ckpt.api.normalize``: rewrite a draft's config.json into the canonical form."""
        from dflash_ckpt.api import normalize

        return normalize(*args, **options)

    @property
    def __signature__(self) -> inspect.Signature:
        """The API function's typed signature, so ``help()`` and ``inspect.signature`` show it."""
        from dflash_ckpt.api import normalize

        return inspect.signature(normalize)


sys.modules[__name__].__class__ = _CallablePackage
