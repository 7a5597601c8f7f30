"""dflash-ckpt: check, normalize and smoke-run DFlash speculative-decoding drafts.

The package is split so that the checker never pays for torch: ``source`` finds the files,
``spec`` resolves the DFlash keys, ``checks`` turns them into findings with stable codes and
``report`` renders them. ``runtime`` (torch) is imported only by ``smoke-run``.
"""

__version__ = "0.1.0"
