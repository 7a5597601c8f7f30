"""dflash-ckpt: check, normalize and smoke-run DFlash speculative-decoding drafts.

The package is split so that the checker never pays for torch: ``sources`` reads the files (local
or Hub), ``draftspec`` resolves the DFlash keys into a ``DraftSpec``, ``checks`` turns specs (and run
results) into findings with stable codes (``rules``), ``inspection`` runs them over one draft or
many, ``canonical`` plans and writes canonical configs (``normalize``), and ``commands`` parse
options, call one ``run_<command>`` function each and render the result (rich or JSON).
``runtime`` (torch) is imported only by ``smoke-run`` and ``probe-taps``, inside their command
bodies; docs/DESIGN.md section 11 draws the data flow.

The Python API: ``dflash_ckpt.inspect``, ``normalize``, ``smoke_run`` and ``probe_taps``
(``dflash_ckpt/api.py``), each returning a result with ``.ok``, ``.exit_code``, ``.findings``,
``.to_dict()`` and ``.envelope()``; errors raise ``DFlashCkptError``.
"""

#: The public API (``dflash_ckpt.api``), loaded on first use so ``import dflash_ckpt`` stays light.
__all__ = ["DFlashCkptError", "__version__", "inspect", "normalize", "probe_taps", "smoke_run"]


def __getattr__(name: str) -> object:
    """``dflash_ckpt.inspect`` and the others: imported from ``dflash_ckpt.api`` when first read.

    ``__version__`` too is read on first use: this module runs before the entry point's Ctrl-C
    handler exists (``python -m dflash_ckpt``), so it imports nothing of its own."""
    if name == "__version__":
        from dflash_ckpt._version import __version__

        return __version__
    if name in __all__:
        from dflash_ckpt import api

        return getattr(api, name)
    raise AttributeError(f"module 'dflash_ckpt' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
