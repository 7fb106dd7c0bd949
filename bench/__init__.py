"""Benchmarks: dshloop against django-q2's own Schedule + qcluster, and pgbench; not part of `make test`.

Entry points: `python -m bench.run` (`make bench`; `--quick` for tiny sizes, `--lists` for the list
benchmark) writes docs/BENCHMARKS.md; `python -m bench.storage`, `python -m bench.web_tier` and
`python -m bench.dashboard` (`make dashboard`) measure or draw one thing each. Every size is in
bench/sizes.py, every child process goes through bench/processes.py.
"""
