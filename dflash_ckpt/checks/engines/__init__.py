"""One record per engine: each ``checks/engines/<engine>.py`` holds what the project knows about
one engine (its reader, the block layout its path runs, its serve line, its runner, the rules it
owns) as one ``Engine`` (``record.py``); ``registry.py`` lists them, one line each.

Shared by every record: ``reading.py`` (``Reading``, ``Verdict``, the lookup orders, the layout
path helpers) and ``launch.py`` (what a serve line is built from). ``verdicts.py`` judges every
engine (``judge_readers``). This package's own module imports nothing, so that a record or the
registry can be imported from anywhere in ``checks/`` without a circle.
"""
