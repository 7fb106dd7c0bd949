"""A bench run of some sections rewrites only their parts of docs/BENCHMARKS.md (bench.run.splice)."""

from __future__ import annotations

from bench.run import SECTIONS, splice, write_report

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


def test_a_run_with_b5_among_its_sections_splices_only_the_sections_it_rendered(tmp_path):
    """`make bench --only B1,B5` (or any run naming B5): B5's own process writes its part later."""
    output = tmp_path / "BENCHMARKS.md"
    output.write_text(EXISTING)
    write_report(output, RENDERED, ["B1", "B5"])
    written = output.read_text()
    assert "new B1" in written and "old B2" in written and "kept too" in written


def test_a_run_of_every_section_writes_the_whole_report_whether_or_not_b5_follows(tmp_path):
    output = tmp_path / "BENCHMARKS.md"
    output.write_text(EXISTING)
    write_report(output, RENDERED, [*SECTIONS, "B5"])
    assert output.read_text() == RENDERED
