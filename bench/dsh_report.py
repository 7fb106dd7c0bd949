"""B5's section of docs/BENCHMARKS.md, from its results (bench/dsh_delivery.py)."""

from __future__ import annotations


def _s(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def render_b5(results: dict) -> str:
    machine, rounds = results["machine"], results["rounds"]
    lines = [
        "## B5 delivery into a real DSH: N due at one instant, beside DSH's own prompts",
        "",
        f"`python -m bench.run --dsh{' --quick' if results.get('quick') else ''}` (`bench/dsh_delivery.py`), "
        f"{machine['date']}, {results['elapsed_s'] / 60:.1f} min. DSH {machine['dsh']} with dshloop's plugin "
        "delivering, the stub model (tests/stub_model.py) as the only stand-in; one `runloops` and dshloop's web "
        "process (the plugin reads each message from it). The profile's sessions are cold, as a long-lived "
        "profile's are (one made by DSH, the others its log written under their own IDs, then DSH restarted: "
        "`seed_cold_sessions`); each round adds 2·N fresh idle sessions to it, made by DSH. DSH's own = one "
        "client sending `session.prompt` (queue) to N fresh idle sessions one after another, in the same run just "
        "before dshloop's round. Makespan = the instant to the last turn's end in DSH's logs; lateness = the "
        "instant to the message in the session's log; DSH calls counted by a pass-through dshloop talks to DSH "
        "through (`bench/dsh_proxy.py`). "
        f"Machine: {machine['cpu']}, {machine['cores']} cores (load average "
        f"{', '.join(f'{x:.1f}' for x in machine['load_average_start'])} at the start, "
        f"{', '.join(f'{x:.1f}' for x in machine.get('load_average_end', ()))} at the end), {machine['ram_gib']} GiB; "
        f"PostgreSQL {machine['postgresql']}, Python {machine['python']}, Django {machine['django']}, "
        f"django-q2 {machine['django-q2']}.",
        "",
        "| profile (cold + fresh) | N | DSH's own makespan | dshloop makespan | ratio (target ≤ 1.2) "
        "| lateness p50 / p99 (target p99 ≤ 1 s at N=200) | DSH's own lateness p50 / p99 | delivered / answered "
        "| dshloop CPU / occurrence | DSH calls / occurrence | `session.list` calls | duplicates |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rounds:
        lines.append(
            f"| {r['cold_profile']:,} + {r['profile'] - r['cold_profile']:,} | {r['n']} | {_s(r['own_makespan_s'])} s "
            f"| {_s(r['makespan_s'])} s | {_s(r['ratio'], 2)} | {_s(r['lateness_p50_s'], 2)} / "
            f"{_s(r['lateness_p99_s'], 2)} s | {_s(r['own_lateness_p50_s'], 2)} / {_s(r['own_lateness_p99_s'], 2)} s "
            f"| {r['delivered']} / {r['answered']} | {_s(r['cpu_per_occurrence_ms'])} ms "
            f"| {_s(r['dsh_calls_per_occurrence'])} | {r['session_list_calls']} | {r['duplicates']} |"
        )
    lines += ["", "DSH calls per occurrence, by method:", ""]
    for r in rounds:
        calls = ", ".join(f"`{method}` {count:g}" for method, count in r["dsh_calls_by_method"].items())
        lines.append(f"- N={r['n']}, profile {r['profile']:,}: {calls}")
    poll = results.get("poll")
    if poll:
        calls = ", ".join(f"`{method}` {count:g}" for method, count in poll["dsh_calls_by_method"].items())
        lines += [
            "",
            f"**The composer's poll at {poll['profile']:,} sessions** (`POST /dshloop/status`, what DSH Web asks "
            f"for an open conversation every few seconds; through DSH's channel to dshloop's `loop_list` and its "
            f"caller check): p50 {_s(poll['p50_ms'])} ms, p99 {_s(poll['p99_ms'])} ms, "
            f"{_s(poll['dsh_calls_per_poll'])} DSH calls a poll ({calls}). One `session.list` of that profile, "
            f"what each poll's caller check cost before: {_s(poll['session_list_ms'], 0)} ms.",
        ]
    return "\n".join(lines) + "\n\n"
