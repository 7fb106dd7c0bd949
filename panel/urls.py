from django.urls import path

from . import views

app_name = "panel"

urlpatterns = [
    path("", views.index, name="index"),
    path("new", views.create, name="create"),
    path("loops/<str:loop_id>/", views.detail, name="detail"),
    path("loops/<str:loop_id>/delete", views.delete, name="delete"),
    # contract §9 as forms: pause/resume are POST only; run now, retry and edit ask or show first.
    path("loops/<str:loop_id>/edit", views.edit, name="edit"),
    path("loops/<str:loop_id>/pause", views.pause, name="pause"),
    path("loops/<str:loop_id>/resume", views.resume, name="resume"),
    path("loops/<str:loop_id>/run", views.run_now, name="run_now"),
    path("loops/<str:loop_id>/retry", views.retry, name="retry"),
    # contract §8; `path:` because a session ID may hold a slash (spec §9 only forbids empty ones).
    path("sessions/<path:session_id>/status", views.session_status, name="session_status"),
]
