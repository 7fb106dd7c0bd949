"""The report's first section: the machine and the versions a run ran on (bench.machine)."""

from __future__ import annotations

from .format import table


def machine_section(results: dict) -> str:
    m = results["machine"]
    load = lambda values: " / ".join(f"{v:.2f}" for v in values) if values else "—"  # noqa: E731
    rows = [
        ["date", m["date"]],
        ["CPU", f"{m['cpu']}, {m['cores']} cores"],
        ["RAM", f"{m['ram_gib']} GiB"],
        ["kernel", m["kernel"]],
        [
            "load average (1/5/15 min) at start · end",
            f"{load(m['load_average_start'])} · {load(m.get('load_average_end'))}",
        ],
        ["PostgreSQL", f"{m['postgresql']} (same machine, 127.0.0.1)"],
        ["Python", m["python"]],
        ["Django", m["django"]],
        ["django-q2", m["django-q2"]],
        ["croniter", m["croniter"]],
        ["psycopg", m["psycopg"]],
        ["repetitions", str(results["sizes"]["reps"])],
        ["run time", f"{results.get('elapsed_s', 0) / 60:.0f} min"],
    ]
    return "## Machine and versions\n\n" + table(["", ""], rows)
