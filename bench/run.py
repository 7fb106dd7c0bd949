"""`python -m bench.run [--quick]`: every benchmark, dshloop and django-q2 side by side on the same
PostgreSQL, written to docs/BENCHMARKS.md (raw numbers in var/bench/).

Full size takes about 50 minutes; run it on a quiet machine (nothing else on the two cores).
--quick runs tiny sizes with one repetition in about 7 minutes, to check the harness.
B5, delivery into a real DSH (bench/dsh_delivery.py), runs last, in a process of its own, when a DSH
is installed (`make dsh`; DSHLOOP_DSH_DIR); --dsh runs it alone. It rewrites only its section (with
--quick, not even that: its section goes beside the raw results in var/bench/).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from bench.processes import BASE_DIR, stop_children_on_exit
from bench.sizes import FULL, QUICK, Sizes

SECTIONS = ("limit", "B1", "B2", "B3", "B4")
# B5 needs a DSH and a database of its own: a process of its own after the others (--dsh alone).
DSH_SECTION = "B5"
# How each section's part of the report begins (bench.report): a run of some sections only rewrites
# those parts of the existing report and leaves everything else (the other sections, B5, the notes
# written by hand) as it was.
HEADINGS = {"limit": "## Physical limit", "B1": "## B1 ", "B2": "## B2 ", "B3": "## B3 ", "B4": "## B4 "}


def _parts(report: str) -> list[str]:
    """The report cut before each `## ` heading (the first part is what precedes the first)."""
    parts, start = [], 0
    for index in range(1, len(report)):
        if report.startswith("## ", index) and report[index - 1] == "\n":
            parts.append(report[start:index])
            start = index
    return [*parts, report[start:]]


def splice(existing: str, rendered: str, sections: list[str]) -> str:
    """`existing` with the parts of `sections` taken from `rendered`; a part it lacks goes before
    `## Reproduce` (or at the end)."""
    prefixes = [HEADINGS[section] for section in sections]
    fresh = {prefix: part for part in _parts(rendered) for prefix in prefixes if part.startswith(prefix)}
    out = []
    for part in _parts(existing):
        prefix = next((prefix for prefix in prefixes if part.startswith(prefix)), None)
        if prefix is None and part.startswith("## Reproduce"):
            out.extend(fresh.pop(prefix) for prefix in list(fresh))
        out.append(fresh.pop(prefix, part) if prefix is not None else part)
    return "".join([*out, *fresh.values()])


def write_report(output: Path, rendered: str, only: list[str]) -> None:
    """The report of a run of the sections `only`: the whole of `rendered` when every section
    `run_sections` renders ran, else their parts spliced into the existing report. B5 is never among
    them: its own process splices its part in afterwards."""
    ran = [section for section in only if section in SECTIONS]
    if set(ran) != set(SECTIONS) and output.exists():
        rendered = splice(output.read_text(), rendered, ran)
    output.write_text(rendered)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one repetition (checks the harness)")
    parser.add_argument("--reps", type=int, help="repetitions (default 3, or 1 with --quick)")
    parser.add_argument(
        "--only",
        default=",".join([*SECTIONS, DSH_SECTION]),
        help=f"comma-separated subset of {','.join([*SECTIONS, DSH_SECTION])}",
    )
    parser.add_argument("--output", default=str(BASE_DIR / "docs" / "BENCHMARKS.md"))
    parser.add_argument("--keep-databases", action="store_true", help="leave the bench databases for inspection")
    parser.add_argument("--render", metavar="RESULTS_JSON", help="only rewrite the report from a saved results.json")
    parser.add_argument(
        "--lists", action="store_true", help="only the list benchmark (its own database; prints numbers)"
    )
    parser.add_argument(
        "--dsh", action="store_true", help="only B5, delivery into a real DSH (its own database; writes its section)"
    )
    parser.add_argument("--dsh-profiles", help="B5: cold profile sizes, comma-separated (default 100,5000)")
    parser.add_argument("--dsh-bursts", help="B5: occurrences due together, comma-separated (default 50,200,500)")
    parser.add_argument("--dsh-poll-profile", type=int, help="B5: sessions for the composer poll (default 10000)")
    args = parser.parse_args(argv)
    stop_children_on_exit()  # an interrupted run leaves no runloops behind to take the next run's tasks
    if args.dsh:
        from bench.dsh_delivery import run_dsh, sizes_from

        sizes = sizes_from(args.quick, args.dsh_profiles, args.dsh_bursts, args.dsh_poll_profile)
        return run_dsh(sizes, args.quick, Path(args.output), args.keep_databases)
    if args.lists:
        from bench.lists import run_lists

        return run_lists(args.quick, args.keep_databases)
    if args.render:
        from bench import report

        Path(args.output).write_text(report.render(json.loads(Path(args.render).read_text())))
        return 0
    only = [section.strip() for section in args.only.split(",") if section.strip()]
    unknown = set(only) - {*SECTIONS, DSH_SECTION}
    if unknown:
        parser.error(f"unknown section(s) {sorted(unknown)}; choose from {(*SECTIONS, DSH_SECTION)}")

    missing = [tool for tool in ("psql", "pgbench") if shutil.which(tool) is None]
    if missing:
        parser.error(
            f"{' and '.join(missing)} not found: they come with PostgreSQL "
            "(Debian: postgresql-client for psql, postgresql-15 for pgbench)"
        )
    sizes = QUICK if args.quick else FULL
    if args.reps:
        sizes = replace(sizes, reps=args.reps)
    code = 0
    if set(only) & set(SECTIONS):
        code = run_sections(sizes, args.quick, only, Path(args.output), keep_databases=args.keep_databases)
    if code == 0 and DSH_SECTION in only:
        code = run_dsh_beside(args)
    return code


def run_dsh_beside(args: argparse.Namespace) -> int:
    """B5 after the others, so that one `make bench` reports B1 and B5 from one run; skipped, with
    how to have it, where no DSH is installed."""
    from tests.dsh import configured_dsh_dir, dsh_dir

    if dsh_dir() is None:
        print(f"B5 skipped: no DSH installed in {configured_dsh_dir()} (`make dsh`, or DSHLOOP_DSH_DIR)")
        return 0
    command = [sys.executable, "-m", "bench.run", "--dsh", "--output", args.output]
    if args.quick:
        command.append("--quick")
    if args.keep_databases:
        command.append("--keep-databases")
    return subprocess.call(command, cwd=BASE_DIR)


def run_sections(sizes: Sizes, quick: bool, only: list[str], output: Path, *, keep_databases: bool) -> int:
    from bench.harness import log, setup_django

    setup_django()
    # After setup_django: the benchmarks use the product's models and API.
    from bench import db, report
    from bench.machine import machine_facts
    from bench.sections import Run

    out_dir = BASE_DIR / "var" / "bench" / time.strftime("%Y%m%d-%H%M%S")
    out_dir.mkdir(parents=True)
    run = Run(sizes, quick, out_dir)
    run.results["machine"] = machine_facts()
    started = time.monotonic()
    log(f"bench: {'quick' if quick else 'full'} run, {sizes.reps} repetition(s); raw results in {out_dir}")
    try:
        for system in run.systems:
            system.create_database()
        db.recreate(db.PGBENCH_DB)
        for section in SECTIONS:
            if section in only:
                log(f"{section} …")
                getattr(run, section.lower())()
    finally:
        run.results["machine"]["load_average_end"] = os.getloadavg()
        run.results["elapsed_s"] = time.monotonic() - started
        (out_dir / "results.json").write_text(json.dumps(run.results, indent=1, default=str))
        if not keep_databases:
            from django.db import connection

            connection.close()
            for system in run.systems:
                if system.conn is not None:
                    system.conn.close()
            for database in db.ALL_DATABASES:
                db.drop(database)
    write_report(output, report.render(run.results), only)
    log(f"bench: done in {(time.monotonic() - started) / 60:.1f} min; wrote {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
