"""The operator API's list, create and delete (scope manage), which DSH Web's Loops panel reads and
writes through the plugin: filters as dshloop's panel's, LoopDetail rows with their targets' titles,
a create that records the token (and the client it acts through) rather than a session."""

from __future__ import annotations

import json

from tests.conftest import error_of, every

VIA = {"X-Dshloop-Via": "DSH Web"}


def request(manage_api, method: str, path: str, body=None, headers=None):
    client = manage_api.client
    sent = {**manage_api.headers(), **(headers or {})}
    if method == "GET":
        return client.get(path, body or {}, headers=sent)
    data = json.dumps(body) if body is not None else ""
    return client.generic(method, path, data=data, content_type="application/json", headers=sent)


def test_list_filters_as_the_panel_and_names_each_target(manage_api, api, make_session):
    make_session("ses_target", user_title="Deploy watch")
    make_session("ses_other")
    first = api.tool("loop_create", {"prompt": "Check the deploy", "schedule": every(60), "session_id": "ses_target"})
    api.tool("loop_create", {"prompt": "Water the plants", "schedule": every(120), "session_id": "ses_other"})
    assert first.status_code == 200, first.content

    page = request(manage_api, "GET", "/api/loops").json()
    assert [loop["prompt"] for loop in page["loops"]] == ["Check the deploy", "Water the plants"]
    assert page["loops"][0]["schedule_text"] == "every minute" and page["loops"][0]["revision"] == 1
    assert page["titles"] == {"ses_target": "Deploy watch"} and page["more"] is False

    assert [loop["prompt"] for loop in request(manage_api, "GET", "/api/loops", {"q": "PLANTS"}).json()["loops"]] == [
        "Water the plants"
    ]
    assert [
        loop["prompt"] for loop in request(manage_api, "GET", "/api/loops", {"session": "ses_target"}).json()["loops"]
    ] == ["Check the deploy"]
    one = request(manage_api, "GET", "/api/loops", {"limit": 1}).json()
    assert len(one["loops"]) == 1 and one["more"] is True
    assert request(manage_api, "GET", "/api/loops", {"state": "paused"}).json()["loops"] == []
    bad = request(manage_api, "GET", "/api/loops", {"state": "sleeping"})
    assert bad.status_code == 422 and error_of(bad)["code"] == "invalid_input"


def test_create_and_delete_record_the_token_and_its_client(manage_api, make_session, global_session):
    make_session("ses_target")
    created = request(
        manage_api,
        "POST",
        "/api/loops",
        {"prompt": "Check the deploy", "schedule": every(600), "session_id": "ses_target"},
        VIA,
    )
    assert created.status_code == 201, created.content
    loop = created.json()
    assert loop["session_id"] == "ses_target" and loop["created_by_session_id"] == "ses_global"

    deleted = request(manage_api, "DELETE", f"/api/loops/{loop['loop_id']}", headers=VIA)
    assert deleted.json() == {"deleted": True, "loop_id": loop["loop_id"]}
    trail = request(manage_api, "GET", f"/api/loops/{loop['loop_id']}/events").json()["events"]
    assert [(e["kind"], e["actor"]) for e in trail] == [
        ("deleted", {"kind": "token", "id": "ops via DSH Web"}),
        ("created", {"kind": "token", "id": "ops via DSH Web"}),
    ]
    gone = request(manage_api, "DELETE", f"/api/loops/{loop['loop_id']}")
    assert gone.status_code == 404 and error_of(gone)["code"] == "unknown_loop"


def test_create_needs_a_target_and_checks_as_loop_create(manage_api, make_session):
    untargeted = request(manage_api, "POST", "/api/loops", {"prompt": "x", "schedule": every(60)})
    assert untargeted.status_code == 422 and error_of(untargeted)["field"] == "session_id"
    unknown = request(
        manage_api, "POST", "/api/loops", {"prompt": "x", "schedule": every(60), "session_id": "ses_nope"}
    )
    assert unknown.status_code == 422 and error_of(unknown)["code"] == "unknown_session"
    bad_cron = request(
        manage_api,
        "POST",
        "/api/loops",
        {"prompt": "x", "schedule": {"kind": "cron", "expr": "61 * * * *"}, "session_id": "new"},
    )
    assert bad_cron.status_code == 422 and error_of(bad_cron)["code"] == "invalid_cron"


def test_an_odd_via_label_is_left_out_of_the_actor(manage_api, make_session):
    make_session("ses_target")
    loop = request(
        manage_api,
        "POST",
        "/api/loops",
        {"prompt": "x", "schedule": every(600), "session_id": "ses_target"},
        {"X-Dshloop-Via": "<b>me</b>"},
    ).json()
    [event] = request(manage_api, "GET", f"/api/loops/{loop['loop_id']}/events").json()["events"]
    assert event["actor"] == {"kind": "token", "id": "ops"}


def test_a_sessions_runs_are_those_delivered_into_it_newest_first(manage_api, make_session, global_session):
    from datetime import timedelta

    from django.utils import timezone

    from loops.models import LoopRun
    from tests.conftest import create_loop, fire_due

    make_session("ses_target")
    make_session("ses_other")
    mine = create_loop(every(60), target="ses_target")
    theirs = create_loop(every(60), target="ses_other")
    selfish = create_loop(every(60), target="self")
    now = timezone.now()
    fire_due(mine.loop_id, now + timedelta(seconds=61))  # each loop's first run
    fire_due(mine.loop_id, now + timedelta(seconds=121))  # and its second
    assert LoopRun.objects.count() == 6

    def newest_first(loop_id):
        return list(LoopRun.objects.filter(loop_id=loop_id).order_by("-scheduled_at").values_list("run_id", flat=True))

    runs = request(manage_api, "GET", "/api/runs", {"session": "ses_target"}).json()["runs"]
    assert [run["run_id"] for run in runs] == newest_first(mine.loop_id)
    assert newest_first(theirs.loop_id)[0] not in {run["run_id"] for run in runs}
    # The global interface's runs include its `self` loops'.
    runs = request(manage_api, "GET", "/api/runs", {"session": "ses_global"}).json()["runs"]
    assert [run["run_id"] for run in runs] == newest_first(selfish.loop_id)
    assert request(manage_api, "GET", "/api/runs", {"session": "ses_nobody"}).json() == {"runs": []}
    missing = request(manage_api, "GET", "/api/runs")
    assert missing.status_code == 422 and error_of(missing)["code"] == "invalid_input"


def test_a_deleted_loops_runs_are_still_listed_as_delivered_into_its_session_and_marked(
    manage_api, api, make_session, global_session
):
    """spec §4: runs outlive their loop. A session's runs still include those of a loop deleted since
    (a `self` one too), each marked loop_deleted with the name the loop had; a live loop's are not
    marked. The contract's own runs path keeps RunView's shape."""
    from datetime import timedelta

    from django.utils import timezone

    from loops.models import LoopRun
    from tests.conftest import create_loop, fire_due

    make_session("ses_target")
    named = create_loop(every(60), target="ses_target")
    request(manage_api, "PATCH", f"/api/loops/{named.loop_id}", {"name": "Deploy watch"})
    live = create_loop(every(60), target="ses_target")
    selfish = create_loop(every(60), target="self")
    later = timezone.now() + timedelta(seconds=61)
    fire_due(named.loop_id, later)  # each loop's first run
    fired = dict(LoopRun.objects.values_list("loop_id", "run_id"))
    for loop in (named, selfish):
        assert api.tool("loop_delete", {"loop_id": loop.loop_id}).status_code == 200

    runs = {
        run["run_id"]: run for run in request(manage_api, "GET", "/api/runs", {"session": "ses_target"}).json()["runs"]
    }
    assert set(runs) == {fired[named.loop_id], fired[live.loop_id]}
    gone, kept = runs[fired[named.loop_id]], runs[fired[live.loop_id]]
    assert (gone["loop_deleted"], gone["loop_name"], gone["status"]) == (True, "Deploy watch", "delivered")
    assert kept["loop_deleted"] is False and "loop_name" not in kept
    [mine] = request(manage_api, "GET", "/api/runs", {"session": "ses_global"}).json()["runs"]
    assert (mine["run_id"], mine["loop_deleted"]) == (fired[selfish.loop_id], True)
    # contract §4: the loop's own history answers after its deletion, in RunView's shape.
    [own] = api.get(f"/api/loops/{named.loop_id}/runs").json()["runs"]
    assert own["run_id"] == fired[named.loop_id] and "loop_deleted" not in own and "loop_name" not in own


def test_a_nul_in_a_filter_is_refused_on_its_field_never_a_500(manage_api):
    """PostgreSQL's text cannot hold NUL: the query refuses it (422) before it reaches a filter."""
    for path, params, field in (
        ("/api/loops", {"q": "a\x00b"}, "q"),
        ("/api/loops", {"session": "ses\x00"}, "session"),
        ("/api/runs", {"session": "ses\x00"}, "session"),
    ):
        answer = request(manage_api, "GET", path, params)
        assert answer.status_code == 422, (path, params, answer.content)
        assert error_of(answer)["code"] == "invalid_input" and field in error_of(answer)["field"], answer.content
