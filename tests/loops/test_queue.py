"""The delivery queue (loops.queue) names its task through the project's settings."""

from django.conf import settings
from django.utils.module_loading import import_string

from scheduler.tasks import deliver_runs


def test_the_queued_task_is_the_schedulers_delivery():
    # loops sits below the scheduler: the dotted path is the one link, so it must resolve to it.
    assert import_string(settings.DSHLOOP_DELIVER_TASK) is deliver_runs
