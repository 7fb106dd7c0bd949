from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView

from dshloop.api import api
from dshloop.middleware import server_error
from monitoring.metrics import metrics_view

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/", api.urls),
    path("panel/", include("panel.urls")),  # contract §8
    path("metrics", metrics_view, name="metrics"),  # Prometheus, scope manage
    path("", RedirectView.as_view(pattern_name="panel:index", permanent=False)),
]

# An exception outside any view (a middleware's): 503 when the database is away, else a counted 500,
# in JSON under /api/ and at /metrics (dshloop.middleware).
handler500 = server_error
