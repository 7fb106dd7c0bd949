"""`manage.py import_v1_loops PATH [--dry-run]`: import a v1 loop export (spec §10, contract §7)."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from core.timeutil import iso
from loops.v1_import import RecordResult, V1ExportError, import_v1_records, load_v1_export
from sessions_app.hosts.base import HostError


def report_line(result: RecordResult, *, dry_run: bool) -> str:
    if result.outcome == "invalid":
        return f"invalid {result.label}: {result.reason}"
    if result.outcome == "already_present":
        where = result.loop_id or "earlier in this file"
        line = f"already present {result.label} ({where})"
        if result.differs:
            line += f"; this record differs in {', '.join(result.differs)} and was not applied"
        return line
    head = f"would import {result.label}" if dry_run else f"imported {result.label} -> {result.loop_id}"
    details = f"every {result.every_seconds} s to {result.session_id}, "
    if result.next_at is None:
        details += "no representable next occurrence"
    else:
        details += f"next at {iso(result.next_at)}"
        if result.due_now:
            details += " (due now: one catch-up delivery)"
    return f"{head}: {details}"


class Command(BaseCommand):
    help = (
        "Import a v1 loop export (a JSON list of {id, prompt, time_in_seconds, session_id, created_at?}) as "
        "`every` loops targeting each record's session. Idempotent: a record whose v1 id was imported before "
        "(or appears earlier in the file) creates nothing. Prints one line per record (imported / already "
        "present / invalid with the reason) and the totals. Invalid records are reported, not fatal: the exit "
        "status is 0 even when some are invalid; it is non-zero only when the file cannot be read as a JSON "
        "list or the host cannot be reached."
    )

    def add_arguments(self, parser):
        parser.add_argument("path", help="the v1 export file (JSON list)")
        parser.add_argument(
            "--dry-run", action="store_true", help="validate and report what would happen, but write nothing"
        )

    def handle(self, *args, path: str, dry_run: bool, **options):
        try:
            records = load_v1_export(path)
        except V1ExportError as exc:
            raise CommandError(str(exc)) from exc
        totals = {"imported": 0, "already_present": 0, "invalid": 0}
        try:
            for result in import_v1_records(records, dry_run=dry_run):
                totals[result.outcome] += 1
                self.stdout.write(report_line(result, dry_run=dry_run))
        except HostError as exc:
            done = sum(totals.values())
            raise CommandError(
                f"The host did not answer while checking record #{done} ({exc}); the {done} record(s) above were "
                "handled. Run the import again: records already imported are skipped."
            ) from exc
        imported, present, invalid = totals["imported"], totals["already_present"], totals["invalid"]
        if dry_run:
            self.stdout.write(
                f"dry run: would import {imported}, already present {present}, invalid {invalid}; nothing was written"
            )
        else:
            self.stdout.write(f"imported {imported}, already present {present}, invalid {invalid}")
