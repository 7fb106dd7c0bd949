"""`manage.py` with a fault injected into the scheduler's claim path, for process tests.

The first DSHLOOP_TEST_CLAIM_FAULTS (default 3) claims of the clock raise a RuntimeError, as an
unexpected bug would; later ones run normally. Used by tests/loops/test_scheduler_survives.py.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dshloop.settings")
    import django

    django.setup()
    from django.core.management import execute_from_command_line

    from loops import clock

    real_claim_due = clock.claim_due
    faults_left = [int(os.environ.get("DSHLOOP_TEST_CLAIM_FAULTS", "3"))]

    def faulty_claim_due(**kwargs):
        if faults_left[0] > 0:
            faults_left[0] -= 1
            raise RuntimeError("injected fault in the claim path")
        return real_claim_due(**kwargs)

    clock.claim_due = faulty_claim_due
    execute_from_command_line(["manage.py", *sys.argv[1:]])


if __name__ == "__main__":
    main()
