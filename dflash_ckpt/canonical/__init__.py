"""The canonical config and how it is written: what ``dflash-ckpt normalize`` (and ``probe-taps
--write``) do with a draft's config.json.

- ``plan``: the canonical config a draft's config implies (pure; ``inspect`` asks it which failing
  readers a rewrite would fix);
- ``config_text``: the edits, applied to the JSON text so the untouched lines keep their bytes;
- ``run``: one normalize, from the argument to the written folder (``normalize_into``);
- ``measured``: ``probe-taps --write``'s copy with the measured taps and layout;
- ``build``, ``fsops``, ``outdir``, ``lock``: building OUT atomically beside the draft, its free
  space and file plan, its parent folders, and the lock that keeps two writers apart.

The API function is ``dflash_ckpt.normalize`` (``dflash_ckpt/api.py``); no torch here.
"""
