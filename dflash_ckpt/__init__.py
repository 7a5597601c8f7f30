"""dflash-ckpt: check, normalize and smoke-run DFlash speculative-decoding drafts.

The package is split so that the checker never pays for torch: ``sources`` reads the files (local
or Hub), ``draftspec`` resolves the DFlash keys into a ``DraftSpec``, ``checks`` turns specs (and run
results) into findings with stable codes (``rules``), ``normalize`` plans and writes canonical
configs, and ``commands`` parse options, call one ``run_<command>`` function each and render
the result (rich or JSON). ``runtime`` (torch) is imported only by ``smoke-run`` and
``probe-taps``, inside their command bodies; docs/DESIGN.md section 11 draws the data flow.
"""

__version__ = "0.1.0"
