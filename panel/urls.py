from django.urls import path

from . import views

app_name = "panel"

urlpatterns = [
    path("", views.index, name="index"),
    path("new", views.create, name="create"),
    path("loops/<str:loop_id>/", views.detail, name="detail"),
    path("loops/<str:loop_id>/delete", views.delete, name="delete"),
    # contract §8; `path:` because a session ID may hold a slash (spec §9 only forbids empty ones).
    path("sessions/<path:session_id>/status", views.session_status, name="session_status"),
]
