"""``python -m dflash_ckpt``: the console entry point, with Ctrl-C covered from this file's first line."""

try:
    from dflash_ckpt.entry import main
except KeyboardInterrupt:  # before entry.main's own handler exists; the same line and status
    import sys

    print("interrupted", file=sys.stderr)
    sys.exit(130)

main()
