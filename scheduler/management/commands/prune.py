"""`manage.py prune [--dry-run]`: apply the retention rules of contract §10 now (scheduler.retention)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser
from django.utils import timezone

from core.timeutil import iso
from scheduler.retention import LoopPruned, prune


class Command(BaseCommand):
    help = (
        "Apply the retention rules now: each loop (deleted loops too) keeps its newest "
        "DSHLOOP_RUN_HISTORY_LIMIT finished runs (the sessions the embedded host made for pruned `new` runs go "
        "with them), and embedded inbox messages older than "
        "DSHLOOP_INBOX_RETENTION_DAYS days are deleted; open runs and loop events are kept. Prints each "
        "loop that loses runs (how many, and the oldest run it keeps), the sessions, the inbox messages (with "
        "those sessions, and by age before the cutoff) and the stored prompts removed, and the totals. "
        "`runloops` applies the same rules by itself at start and every DSHLOOP_PRUNE_INTERVAL_SECONDS."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--dry-run", action="store_true", help="report what would be removed, remove nothing")

    def handle(self, *args: Any, dry_run: bool, **options: Any) -> None:
        verb = "would remove" if dry_run else "removed"
        self.stdout.write(
            f"Keeping the newest {settings.DSHLOOP_RUN_HISTORY_LIMIT} finished runs per loop and "
            f"{settings.DSHLOOP_INBOX_RETENTION_DAYS} days of inbox messages"
            + (" (dry run: nothing is deleted)." if dry_run else ".")
        )

        def report(loop: LoopPruned) -> None:
            if loop.loop_deleted:
                self.stdout.write(
                    f"loop {loop.loop_id} (deleted before the inbox cutoff): {verb} all its {loop.runs} run(s)"
                )
                return
            self.stdout.write(
                f"loop {loop.loop_id}: {verb} {loop.runs} run(s); the oldest kept was scheduled at {iso(loop.oldest_kept)}"
            )

        pruned = prune(now=timezone.now(), dry_run=dry_run, on_loop=report)
        self.stdout.write(f"sessions the embedded host made for `new` runs: {verb} {pruned.sessions} with their runs")
        self.stdout.write(
            f"inbox: {verb} {pruned.messages} message(s): {pruned.session_messages} of those sessions, "
            f"{pruned.inbox_messages} others created before {iso(pruned.inbox_cutoff)}"
        )
        self.stdout.write(f"prompts no run refers to any more: {verb} {pruned.prompts}")
        self.stdout.write(f"deleted loops whose last runs went: {verb} what was kept of {pruned.deleted_loops}")
        self.stdout.write(
            f"total: {verb} {pruned.runs} run(s) of {pruned.loops} loop(s), {pruned.sessions} session(s), "
            f"{pruned.messages} inbox message(s) and {pruned.prompts} prompt(s)"
        )
