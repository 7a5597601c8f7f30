"""How sure a measured ranking is: the gap between two taus in standard errors of their
difference, named ``clear``, ``likely`` or ``narrow``.

In ``stats``, below both the runtime (``probe_result``, ``probe_layout`` name the verdict in
their JSON) and the checks (``run_findings``, ``layout_findings`` gate findings on it), so that
neither package imports the other for a threshold. No torch.
"""

from __future__ import annotations

#: How sure the ranking is: the gap between two taus in standard errors of their difference
#: (each tau is a mean over steps). At least ``CLEAR_Z`` is called clear, at least ``LIKELY_Z``
#: likely, below that narrow. Neighbouring layers carry similar features, so a set one layer
#: off the trained one can come close; on the tiny pair in fp32 with 64 tokens the trained
#: [1, 3, 5] trails [2, 3, 5] by 0.2 (z about 0.5), while the shifted twin's ids trail by 4
#: (z above 10). DF410 needs the configured ids to lose by at least ``LIKELY_Z``.
CLEAR_Z = 2.0
LIKELY_Z = 1.0


def verdict(z: float | None) -> str:
    """``unknown`` (no gap measured), ``clear``, ``likely`` or ``narrow``."""
    if z is None:
        return "unknown"
    return "clear" if z >= CLEAR_Z else "likely" if z >= LIKELY_Z else "narrow"
