"""`python -m bench.dashboard`: the command line (the package's docstring says what it does)."""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

import bench.dashboard
from bench.processes import BASE_DIR

from .demo import Database, Demo
from .drawing import render
from .panels import evaluate, load_rules, summary
from .scenario import RUN_SECONDS, SCRAPE_EVERY, run_scenario
from .scrapes import load_run, save_run

DASHBOARD_JSON = BASE_DIR / "docs" / "grafana-dashboard.json"
OUTPUT_PNG = BASE_DIR / "docs" / "monitoring-dashboard.png"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.dashboard", description=bench.dashboard.__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--database-url",
        help="a PostgreSQL URL whose database this run creates and drops (default: SQLite in a temporary directory)",
    )
    parser.add_argument("--output", type=Path, default=OUTPUT_PNG)
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (scrapes, logs)")
    parser.add_argument("--replay", type=Path, help="draw again from the directory a --keep run left, without a run")
    args = parser.parse_args(argv)

    with open(DASHBOARD_JSON) as file:
        dashboard = json.load(file)
    rules = load_rules()
    if args.replay:
        workdir = args.replay
        run = load_run(workdir)
    else:
        workdir = Path(tempfile.mkdtemp(prefix="dshloop-dashboard-"))
        database = Database(args.database_url, workdir)
        database.create()
        demo = Demo(workdir, database.url)
        try:
            print(f"starting dshloop in {workdir} ({'PostgreSQL' if database.postgres else 'SQLite'})", flush=True)
            demo.start()
            print(f"scraping /metrics every {SCRAPE_EVERY:g} s for {RUN_SECONDS:g} s", flush=True)
            run = run_scenario(demo)
        finally:
            demo.close()
            database.drop()
        save_run(run, workdir)
    data = evaluate(run, rules)
    missing = {p["title"] for p in dashboard["panels"]} - set(data)
    if missing:
        raise SystemExit(f"panels of {DASHBOARD_JSON.name} this script cannot draw: {sorted(missing)}")
    render(run, data, dashboard, args.output)
    print(summary(run, data))
    print(f"wrote {args.output}")
    if args.keep or args.replay:
        print(f"kept {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
