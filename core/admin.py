"""Admin building blocks shared by the apps."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.contrib import admin
from django.db import models
from django.http import HttpRequest

if TYPE_CHECKING:
    # django-stubs make ModelAdmin generic in its model; Django's own class cannot be subscripted.
    _ModelAdmin = admin.ModelAdmin[models.Model]
else:
    _ModelAdmin = admin.ModelAdmin


class ReadOnlyAdmin(_ModelAdmin):
    """Viewable by staff, never edited here: the records are written by dshloop itself."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: models.Model | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: models.Model | None = None) -> bool:
        return False
