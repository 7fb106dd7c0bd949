from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView

from .api import api

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/", api.urls),
    path("panel/", include("panel.urls")),  # contract §8
    path("", RedirectView.as_view(pattern_name="panel:index", permanent=False)),
]
