"""What a draft checkpoint holds, resolved: ``specs`` (``DraftSpec``, ``TargetSpec``, the DFlash keys
with where each came from), ``tensor_layout`` (the tensors a config implies) and ``layer_kinds``
(which draft layers slide). Reads through a ``sources.Source``; no torch.

A run's settings are built from the specs here too, validated once: ``draft_settings``
(``DraftSettings``), ``target_settings`` (``TargetSettings``, and which targets the native runtime
implements, ``families``), with ``decoder_dims``, ``rope_spec`` and ``config_values`` (the typed
reads and their DF142 line)."""
