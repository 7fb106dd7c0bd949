"""Benchmarks of issue 7: dshloop against django-q2's own Schedule + qcluster, and pgbench.

Entry point: `python -m bench.run` (`make bench`); `--quick` for tiny sizes. Results go to
docs/BENCHMARKS.md. Not part of `make test`.
"""
