from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView

from loops.metrics import metrics_view

from .api import api

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/", api.urls),
    path("panel/", include("panel.urls")),  # contract §8
    path("metrics", metrics_view, name="metrics"),  # issue 18: Prometheus, scope manage
    path("", RedirectView.as_view(pattern_name="panel:index", permanent=False)),
]
