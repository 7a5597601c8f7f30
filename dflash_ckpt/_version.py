"""The package version, in a module of its own: the HTTP client's User-Agent and ``--version``
read it without importing the package's ``__init__`` (which reaches the API and the commands)."""

__version__ = "0.1.0"
