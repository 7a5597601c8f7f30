"""Package data read at run time: the prompt suites (``suites/*.json``, read by
``sources/suites.py``) and the published figures (``published_figures.json``, read by
``checks/published.py``). Data, not code: shipped through ``[tool.setuptools.package-data]`` like
the JSON Schema, so an installed wheel has them and a test can pin their content."""
