"""GET /api/health (contract §4): no auth, so a load balancer or a panel banner can ask."""

from __future__ import annotations

from datetime import timedelta

from django.db import DatabaseError
from django.db.models import Max
from django.utils import timezone
from ninja import Router

from dshloop.timeutil import to_ms

from .models import SchedulerHeartbeat

router = Router(tags=["health"])

# A scheduler is alive if it ticked in the last 60 s (contract §4).
ALIVE_WINDOW = timedelta(seconds=60)


def scheduler_health(now=None) -> dict:
    now = now or timezone.now()
    alive = SchedulerHeartbeat.objects.filter(last_tick_at__gte=now - ALIVE_WINDOW)
    summary = alive.aggregate(last=Max("last_tick_at"))
    count = alive.count()
    health = {"alive": count > 0, "instances": count}
    if summary["last"]:
        health["last_tick_at"] = to_ms(summary["last"])
    return health


@router.get("/health", auth=None)
def health(request):
    try:
        return {"database": "ok", "scheduler": scheduler_health()}
    except DatabaseError:
        return {"database": "error", "scheduler": {"alive": False, "instances": 0}}


@router.api_operation(["HEAD"], "/health", auth=None, operation_id="health_head", summary="Health (HEAD)")
def health_head(request):
    """The same answer for uptime monitors, which ask with HEAD; the server sends it without the body."""
    return health(request)
