from django.urls import path

from .views import lists, loop_pages, operate

app_name = "panel"

urlpatterns = [
    path("", lists.index, name="index"),
    path("new", loop_pages.create, name="create"),
    path("loops/<str:loop_id>/", loop_pages.detail, name="detail"),
    path("loops/<str:loop_id>/delete", operate.delete, name="delete"),
    # contract §9 as forms: pause/resume are POST only; run now, retry and edit ask or show first.
    path("loops/<str:loop_id>/edit", loop_pages.edit, name="edit"),
    path("loops/<str:loop_id>/pause", operate.pause, name="pause"),
    path("loops/<str:loop_id>/resume", operate.resume, name="resume"),
    path("loops/<str:loop_id>/run", operate.run_now, name="run_now"),
    path("loops/<str:loop_id>/retry", operate.retry, name="retry"),
    # contract §8; `path:` because a session ID may hold a slash (spec §9 only forbids empty ones).
    path("sessions/<path:session_id>/status", lists.session_status, name="session_status"),
]
