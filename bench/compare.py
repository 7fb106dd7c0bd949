"""B1 and the whole-list benchmark for two source trees, side by side in one run.

    python -m bench.compare BEFORE_TREE AFTER_TREE [--reps 3] [--quick]

Each tree runs its own harness (`python -m bench.run`, from the tree's directory, so its own code)
in a child process, the trees taking turns within each repetition so that the machine's noise hits
both alike; they share the bench databases, so never two at once. B1 measures dshloop only (the
baseline's numbers do not depend on dshloop's code). Prints the medians of each tree and their
ratio; the raw results stay in each tree's var/bench/.
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import subprocess
import sys
from pathlib import Path

from bench.processes import stop_children_on_exit

# Runs inside a tree: its harness with the baseline system left out and no report written. It hooks
# the harness's Django set-up, after which both the old and the new harness build their Run.
_B1_CHILD = """
import sys
import bench.run

try:
    import bench.harness as harness
except ImportError:  # a harness from before bench.harness: its set-up is in bench.run
    harness = bench.run
real_setup = harness.setup_django


def setup_dshloop_only(*args, **kwargs):
    real_setup(*args, **kwargs)
    import bench.report

    bench.report.render = lambda results: ""
    try:
        from bench.sections import Run
    except ImportError:
        Run = bench.run.Run
    real_init = Run.__init__

    def init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        self.systems = [system for system in self.systems if system.name == "dshloop"]

    Run.__init__ = init


harness.setup_django = setup_dshloop_only
sys.exit(bench.run.main(["--only", "B1", "--reps", "1", "--output", "/dev/null", *sys.argv[1:]]))
"""


def _newest_results(tree: Path, *, lists: bool) -> dict:
    runs = [path for path in (tree / "var" / "bench").iterdir() if path.name.endswith("-lists") == lists]
    return json.loads((max(runs, key=lambda path: path.name) / "results.json").read_text())


def _child(tree: Path, args: list[str]) -> None:
    """One bench run in `tree`. Interrupted (Ctrl-C, SIGTERM), it is asked to stop as Ctrl-C asks
    it, so that it stops its own `runloops` children, and waited for; never killed outright."""
    child = subprocess.Popen([sys.executable, *args], cwd=tree)
    try:
        returncode = child.wait()
    except BaseException:
        child.send_signal(signal.SIGINT)
        child.wait(120)
        raise
    if returncode:
        raise subprocess.CalledProcessError(returncode, child.args)


def b1(tree: Path, quick: bool) -> dict[str, float]:
    _child(tree, ["-c", _B1_CHILD, *(["--quick"] if quick else [])])
    numbers = {}
    for key, reps in _newest_results(tree, lists=False)["sections"]["B1"].items():
        numbers[f"B1 {key} occurrences/s"] = reps[0]["rate"]
        numbers[f"B1 {key} scheduler CPU ms/1k"] = reps[0]["scheduler_cpu_ms_per_1k"]
    return numbers


def whole_list(tree: Path, quick: bool) -> dict[str, float]:
    _child(tree, ["-m", "bench.run", "--lists", *(["--quick"] if quick else [])])
    numbers = {}
    for key, value in _newest_results(tree, lists=True)["lists"].items():
        if isinstance(value, dict) and "p50" in value:  # a latency: its median, in ms
            numbers[f"lists {key} p50 ms"] = value["p50"]
        elif isinstance(value, int | float):
            numbers[f"lists {key}"] = value
    return numbers


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="tiny sizes (checks the driver)")
    args = parser.parse_args(argv)
    stop_children_on_exit()
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    samples: dict[str, dict[str, list[float]]] = {name: {} for name in trees}
    for rep in range(args.reps):
        for name, tree in trees.items():
            print(f"rep {rep + 1}/{args.reps}: {name} ({tree})", flush=True)
            for measure in (b1, whole_list):
                for key, value in measure(tree, args.quick).items():
                    samples[name].setdefault(key, []).append(value)
    print(f"\n| measure | before (median of {args.reps}) | after | after/before |\n|---|---|---|---|")
    for key in samples["before"]:
        before = statistics.median(samples["before"][key])
        after = statistics.median(samples["after"].get(key, [float("nan")]))
        print(f"| {key} | {before:.4g} | {after:.4g} | {after / before if before else float('nan'):.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
