#!/usr/bin/env python
"""Django's command-line utility for dshloop: the `dshloop` command, run from the clone."""

from dshloop.cli import main, run

__all__ = ["main"]  # tests drive manage.main() as the command line does

if __name__ == "__main__":
    run()
