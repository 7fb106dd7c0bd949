"""The panels drawn in Grafana's dark theme, with the dashboard JSON's titles and layout."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path

from .panels import PanelData
from .scenario import RATE_INTERVAL, SCRAPE_EVERY
from .scrapes import ScrapedRun

BACKGROUND = "#111217"
PANEL = "#181b1f"
BORDER = "#2c3235"
GRID = "#2a2d33"
TEXT = "#ccccdc"
MUTED = "#8e8e9e"
ANNOTATION = "#5794f2"
COLORS = {
    "green": "#73bf69",
    "yellow": "#fade2a",
    "red": "#f2495c",
    "orange": "#ff9830",
    "blue": "#5794f2",
    "purple": "#b877d9",
    "text": "#ccccdc",
}


def series_colors(panel_json: dict) -> dict[str, str]:
    """The fixed colours of the JSON's overrides, by series name."""
    colors = {}
    for override in panel_json.get("fieldConfig", {}).get("overrides", []):
        for prop in override["properties"]:
            if prop["id"] == "color":
                colors[override["matcher"]["options"]] = COLORS.get(prop["value"]["fixedColor"], TEXT)
    return colors


def format_value(value: float, unit: str) -> str:
    if unit == "%":
        return f"{value * 100:.0f}%"
    if unit == "s":
        if value >= 60:
            return f"{value / 60:.0f} min" if value >= 600 else f"{value:.0f} s"
        return f"{value:g} s" if value < 1 else f"{value:.0f} s"
    if unit == "/s":
        return f"{value:g}/s" if value < 10 else f"{value:.0f}/s"
    return f"{value:g}"


def render(run: ScrapedRun, data: dict[str, PanelData], dashboard: dict, output: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch
    from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator

    plt.rcParams.update({"font.family": "DejaVu Sans", "font.size": 9, "text.color": TEXT})
    columns, header_rows = 24, 1.3
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in dashboard["panels"])
    width, row_height = 18.0, 0.34
    figure = plt.figure(figsize=(width, (rows + header_rows) * row_height + 0.2), facecolor=BACKGROUND)
    total_height = rows + header_rows

    start = datetime.fromtimestamp(run.scrapes[0].at, UTC)
    end = datetime.fromtimestamp(run.scrapes[-1].at, UTC)
    figure.text(0.008, 1 - 0.45 / total_height, dashboard["title"], fontsize=15, weight="bold", va="center")
    figure.text(
        0.072,
        1 - 0.45 / total_height,
        f"{start:%Y-%m-%d %H:%M:%S} to {end:%H:%M:%S} UTC  ·  scrape every {SCRAPE_EVERY:g} s  ·  "
        f"$__rate_interval = {RATE_INTERVAL:g} s  ·  one real run of bench.dashboard (uvicorn + runloops, "
        f"{len(run.scrapes)} scrapes of GET /metrics)",
        fontsize=9,
        color=MUTED,
        va="center",
    )
    marks = "   ".join(f"{i + 1} {label}" for i, (_, label) in enumerate(run.events))
    figure.text(0.008, 1 - 1.0 / total_height, f"Annotations:  {marks}", fontsize=9, color=ANNOTATION, va="center")

    times = [datetime.fromtimestamp(s.at, UTC) for s in run.scrapes]
    events = [(datetime.fromtimestamp(at, UTC), i + 1) for i, (at, _) in enumerate(run.events)]
    gap = 0.12  # grid units between panels
    for panel in dashboard["panels"]:
        pos = panel["gridPos"]
        left, right = (pos["x"] + gap) / columns, (pos["x"] + pos["w"] - gap) / columns
        top = 1 - (header_rows + pos["y"] + gap) / total_height
        bottom = 1 - (header_rows + pos["y"] + pos["h"] - gap) / total_height
        figure.patches.append(
            FancyBboxPatch(
                (left, bottom),
                right - left,
                top - bottom,
                boxstyle="round,pad=0,rounding_size=0.004",
                transform=figure.transFigure,
                facecolor=PANEL,
                edgecolor=BORDER,
                linewidth=0.8,
                zorder=0,
            )
        )
        figure.text(left + 0.006, top - 0.3 / total_height, panel["title"], fontsize=10, weight="bold", va="top")
        panel_data = data[panel["title"]]
        ax = figure.add_axes(
            (
                left + (0.1 if panel_data.states else 0.032),  # room for the alerts' names
                bottom + 1.35 / total_height,
                right - left - (0.108 if panel_data.states else 0.042),
                top - bottom - 2.3 / total_height,
            )
        )
        ax.set_zorder(2)  # above the panel's background
        ax.set_facecolor(PANEL)
        for spine in ax.spines.values():
            spine.set_visible(False)
        ax.tick_params(colors=MUTED, labelsize=8, length=0)
        ax.grid(True, color=GRID, linewidth=0.7)
        ax.set_axisbelow(True)
        ax.xaxis.set_major_locator(mdates.SecondLocator(bysecond=[0, 30]))
        ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S", tz=UTC))
        ax.set_xlim(times[0], times[-1])
        colors = series_colors(panel)
        if panel_data.states:
            draw_states(ax, times, panel_data.states)
        else:
            style = panel["fieldConfig"]["defaults"]["custom"].get("thresholdsStyle", {}).get("mode", "off")
            draw_lines(ax, times, panel_data, colors, area=style.endswith("area"))
            unit = panel_data.unit
            if panel_data.log:
                ax.set_yscale("log")
                ax.yaxis.set_major_locator(LogLocator(base=10))
            else:
                ax.yaxis.set_major_locator(MaxNLocator(nbins=5, integer=unit in ("",)))
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _, unit=unit: format_value(v, unit)))
            handles = dict(zip(*reversed(ax.get_legend_handles_labels()), strict=True))
            order = [line.label for line in panel_data.lines]
            legend = ax.legend(
                [handles[label] for label in order],
                order,
                loc="upper left",
                bbox_to_anchor=(0, -0.13),
                ncol=len(panel_data.lines),
                frameon=False,
                fontsize=8.5,
                handlelength=1.2,
                columnspacing=1.4,
                labelcolor=TEXT,
            )
            legend.set_in_layout(False)
        for when, number in events:
            ax.axvline(when, color=ANNOTATION, linewidth=0.9, linestyle=(0, (3, 3)), alpha=0.75, zorder=1)
            ax.annotate(
                str(number),
                (when, 1),
                xycoords=("data", "axes fraction"),
                xytext=(2, -2),
                textcoords="offset points",
                fontsize=7,
                color=ANNOTATION,
                va="top",
            )
    output.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(output, dpi=110, facecolor=BACKGROUND)
    plt.close(figure)


def draw_lines(ax, times, panel_data: PanelData, colors: dict[str, str], *, area: bool) -> None:
    import numpy as np

    fallback = iter(COLORS.values())
    if panel_data.stacked:
        values = np.nan_to_num(np.array([line.values for line in panel_data.lines], dtype=float))
        palette = [colors.get(line.label) or next(fallback) for line in panel_data.lines]
        ax.stackplot(times, values, colors=[c + "40" for c in palette], linewidth=0)
        tops = np.cumsum(values, axis=0)
        # Top layer first: where a layer is empty, the line of the one beneath it stays visible.
        for line, color, top in reversed(list(zip(panel_data.lines, palette, tops, strict=True))):
            ax.plot(times, top, color=color, linewidth=1.6, label=line.label)
        ax.set_ylim(0, max(tops[-1].max() * 1.15, 1.0))
        return
    for line in panel_data.lines:
        color = colors.get(line.label) or next(fallback)
        values = np.array(line.values, dtype=float)
        ax.plot(times, values, color=color, linewidth=1.6, label=line.label)
        if not panel_data.log:
            ax.fill_between(times, values, color=color, alpha=0.08, linewidth=0)
    if panel_data.log:
        return
    peak = max((v for line in panel_data.lines for v in line.values if not math.isnan(v)), default=0.0)
    top = max(peak * 1.15, 1.0 if panel_data.unit != "%" else 0.25)
    threshold = panel_data.threshold
    if threshold is not None:
        top = max(top, threshold * 1.25)
        red = COLORS["red"]
        ax.axhline(threshold, color=red, linewidth=1, linestyle=(0, (4, 3)), alpha=0.9)
        if area:
            ax.axhspan(*((0, threshold) if panel_data.below else (threshold, top)), color=red, alpha=0.05, linewidth=0)
    ax.set_ylim(0, top)


def draw_states(ax, times, states: dict[str, list[int]]) -> None:
    """Grafana's state timeline: one row per alert, yellow while pending, red while firing; a
    state lasts from its scrape to the next."""
    import matplotlib.dates as mdates
    from matplotlib.patches import Patch

    edges = [mdates.date2num(t) for t in times]
    edges.append(edges[-1] + (edges[-1] - edges[-2] if len(edges) > 1 else 0))
    names = list(states)
    for row, name in enumerate(names):
        y = len(names) - 1 - row
        ax.broken_barh([(edges[0], edges[-2] - edges[0])], (y - 0.38, 0.76), color="#22252b")
        index = 0
        while index < len(times):
            state, end = states[name][index], index
            while end + 1 < len(times) and states[name][end + 1] == state:
                end += 1
            if state:
                color = COLORS["red"] if state == 2 else COLORS["yellow"]
                span = min(edges[end + 1], edges[-2]) - edges[index]
                ax.broken_barh([(edges[index], span)], (y - 0.38, 0.76), color=color, alpha=0.85)
            index = end + 1
    ax.set_yticks(range(len(names)), list(reversed(names)))
    ax.set_ylim(-0.6, len(names) - 0.4)
    ax.grid(False)
    legend = ax.legend(
        [Patch(color=COLORS["yellow"]), Patch(color=COLORS["red"])],
        ["pending", "firing"],
        loc="upper left",
        bbox_to_anchor=(0, -0.13),
        ncol=2,
        frameon=False,
        fontsize=8.5,
        handlelength=1.2,
        labelcolor=TEXT,
    )
    legend.set_in_layout(False)
