"""``python -m mmgate.config FILE...``: the same as ``mmgate check FILE...``."""

from mmgate.config.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
