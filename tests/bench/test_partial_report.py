"""A bench run of some sections rewrites only their parts of docs/BENCHMARKS.md (bench.run.splice)."""

from __future__ import annotations

from bench.run import splice

EXISTING = """# Benchmarks

intro

## Issue 37: by hand

### Targets
kept

## B1 burst: 10,000 due at one instant

old B1

## B2 lateness at steady load

old B2

## B5, where the time goes (by hand)

kept too

## Reproduce

    make bench
"""

RENDERED = """# Benchmarks

generated intro

## B1 burst: 10,000 due at one instant

new B1

### B1 notes

new notes

## B2 lateness at steady load

new B2

## Physical limit: pgbench

new limit

## Reproduce

    make bench
"""


def test_a_partial_run_replaces_its_own_sections_and_keeps_the_rest():
    spliced = splice(EXISTING, RENDERED, ["B1"])
    assert "new B1" in spliced and "new notes" in spliced and "old B1" not in spliced
    assert "old B2" in spliced and "new B2" not in spliced
    assert "intro\n" in spliced and "generated intro" not in spliced
    assert spliced.count("kept") == 2


def test_a_section_the_report_lacked_goes_before_reproduce():
    spliced = splice(EXISTING, RENDERED, ["limit"])
    assert spliced.index("new limit") < spliced.index("## Reproduce") and spliced.endswith("    make bench\n")
    assert "old B1" in spliced
