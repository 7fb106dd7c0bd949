"""`python -m dshloop …`: the `dshloop` command without its script on PATH (serve starts runloops so)."""

from dshloop.cli import run

run()
