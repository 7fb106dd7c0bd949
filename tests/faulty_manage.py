"""`manage.py` with a fault injected into the scheduler, for process tests.

- DSHLOOP_TEST_CLAIM_FAULTS=N: the first N claims of the clock raise a RuntimeError, as an
  unexpected bug would; later ones run normally (tests/scheduler/test_scheduler_survives.py).
- DSHLOOP_TEST_KILL_AFTER_DELIVER=<marker file>: the first delivery that reaches the host kills the
  whole scheduler (its process group, as kill -9 would) before the run is recorded, and creates
  the marker file so that a restarted scheduler runs normally (tests/sessions_app/test_dsh_e2e.py).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dshloop.settings")
    import django

    django.setup()
    from django.core.management import execute_from_command_line

    from scheduler import clock, delivery

    real_claim_due = clock.claim_due
    faults_left = [int(os.environ.get("DSHLOOP_TEST_CLAIM_FAULTS", "0"))]

    def faulty_claim_due(**kwargs):
        if faults_left[0] > 0:
            faults_left[0] -= 1
            raise RuntimeError("injected fault in the claim path")
        return real_claim_due(**kwargs)

    clock.claim_due = faulty_claim_due
    marker = os.environ.get("DSHLOOP_TEST_KILL_AFTER_DELIVER")
    if marker:
        real_record = delivery._record

        def record_or_die(outcomes, *args, **kwargs):
            if any(outcome.delivered for outcome in outcomes) and not Path(marker).exists():
                Path(marker).touch()
                os.killpg(os.getpgid(0), signal.SIGKILL)  # sent, not recorded: the whole scheduler dies
            return real_record(outcomes, *args, **kwargs)

        delivery._record = record_or_die
    execute_from_command_line(["manage.py", *sys.argv[1:]])


if __name__ == "__main__":
    main()
