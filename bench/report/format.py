"""The report's numbers and tables: about three significant digits, medians with their range
over repetitions, dshloop ÷ django-q2, and whether a target was met."""

from __future__ import annotations

from bench.stats import over_reps

DQ = "django-q2"  # bench.systems.Baseline.name (not imported: rendering needs no database)


def number(value: float | None) -> str:
    """About three significant digits, thousands separators, no scientific notation."""
    if value is None:
        return "—"
    size = abs(value)
    if size >= 100 or value == 0:
        return f"{value:,.0f}"
    if size >= 10:
        return f"{value:.1f}"
    if size >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def cell(reps: list[dict], key: str, scale: float = 1.0) -> str:
    median, low, high = over_reps(reps, key)
    if median is None:
        return "—"
    text = number(median * scale)
    if len([rep for rep in reps if rep.get(key) is not None]) > 1:
        text += f" ({number(low * scale)}–{number(high * scale)})"
    return text


def ratio(ours: list[dict], theirs: list[dict], key: str) -> str:
    a, b = over_reps(ours, key)[0], over_reps(theirs, key)[0]
    if a is None or b is None or b == 0:
        return "—"
    return f"×{number(a / b)}"


HEADER = ["", "dshloop", DQ, "dshloop ÷ django-q2", "target", "met?"]


def compared(
    label: str,
    ours: list[dict],
    theirs: list[dict],
    key: str,
    *,
    scale: float = 1.0,
    target: str = "",
    verdict: str = "",
) -> list[str]:
    """A HEADER row: both systems' medians (with their ranges) and dshloop ÷ django-q2."""
    return [label, cell(ours, key, scale), cell(theirs, key, scale), ratio(ours, theirs, key), target, verdict]


def met(value: float | None, target: float | None, *, at_most: bool) -> str:
    if value is None or target is None:
        return "—"
    return "yes" if (value <= target if at_most else value >= target) else "**no**"


def duplicates_row(ours: list[dict], theirs: list[dict]) -> list[str]:
    """A HEADER row of both systems' duplicates, against dshloop's target of none."""
    return [
        "duplicates",
        cell(ours, "duplicates"),
        cell(theirs, "duplicates"),
        "",
        "0",
        met(over_reps(ours, "duplicates")[0], 0, at_most=True),
    ]


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)
