"""What a measured acceptance says: ``confidence`` (tau's clustered interval, the speedup's, the
minimum of evidence, the chi-square homogeneity of two engines' acceptance) and ``ranking`` (how
sure a ranking of two taus is).

Below ``checks/``, ``run/``, ``runtime/`` and ``engine_runners/``, which all read it, and torch-free
at import: ``inspect``'s findings on a run's evidence use it without loading torch. Only the
chi-square tail (``chi2_sf``) asks torch, and only when called: its callers compare two engines'
runs, which have torch loaded already.
"""
