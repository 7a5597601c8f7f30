"""What a draft checkpoint holds, resolved: ``specs`` (``DraftSpec``, ``TargetSpec``, the DFlash keys
with where each came from), ``tensor_layout`` (the tensors a config implies) and ``layer_kinds``
(which draft layers slide). Reads through a ``sources.Source``; no torch."""
