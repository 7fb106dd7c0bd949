"""loop_create under an `Idempotency-Key` (docs/tools-and-api.md): a call whose answer was lost can
be sent again without making a second loop. The key is the caller session's: the same key and
request answer the first call's answer; the same key with another request is
422 invalid_input on the header; a call that made no loop leaves no trace of its key."""

from __future__ import annotations

import threading

import pytest
import time_machine

from loops.models import Loop
from tests.conftest import T0, ApiClient, error_of, every, s
from tests.loops.test_operations_concurrent import concurrently
from tools.models import CreateKey

REQUEST = {"prompt": "Check the deploy", "schedule": every(600)}


def create(api: ApiClient, body: dict, key: str | None, *, session_id: str | None = None):
    headers = api.headers(session_id)
    if key is not None:
        headers["Idempotency-Key"] = key
    return api.client.post("/api/tools/loop_create", data=body, content_type="application/json", headers=headers)


def test_the_same_loop_create_sent_twice_with_one_key_makes_one_loop_and_answers_the_same(api):
    with time_machine.travel(T0, tick=False):
        first = create(api, REQUEST, "call_00_Zx81")
    assert first.status_code == 200, first.content
    # The retry comes later, after the loop has moved on: it still gets the first answer, byte for byte.
    with time_machine.travel(T0 + s(30), tick=False):
        again = create(api, {**REQUEST, "preset": None}, "call_00_Zx81")  # an explicit null is the same request
    assert again.status_code == 200, again.content
    assert again.content == first.content
    assert list(Loop.objects.values_list("loop_id", flat=True)) == [first.json()["loop_id"]]


def test_the_key_is_the_calling_sessions_own(api, host):
    host.put_session("ses_other", status="idle")
    mine = create(api, REQUEST, "call_1")
    theirs = create(api, REQUEST, "call_1", session_id="ses_other")
    assert mine.status_code == theirs.status_code == 200, (mine.content, theirs.content)
    assert mine.json()["loop_id"] != theirs.json()["loop_id"]
    assert Loop.objects.count() == 2


def test_the_same_key_with_another_request_is_refused_and_makes_nothing(api):
    first = create(api, REQUEST, "call_2")
    assert first.status_code == 200, first.content
    other = create(api, {**REQUEST, "prompt": "Check the backups"}, "call_2")
    assert other.status_code == 422, other.content  # the contract's code: it lists no 409 for this
    error = error_of(other)
    assert error["code"] == "invalid_input" and error["field"] == "Idempotency-Key", error
    assert first.json()["loop_id"] in error["message"]
    assert Loop.objects.count() == 1


def test_a_refused_create_leaves_its_key_free_for_a_corrected_request(api):
    # Below the interval floor of `new` loops: refused inside the service, after the key was read.
    too_often = create(api, {**REQUEST, "schedule": every(60), "session_id": "new"}, "call_3")
    assert too_often.status_code == 422 and error_of(too_often)["code"] == "interval_too_short", too_often.content
    assert not CreateKey.objects.exists()
    corrected = create(api, {**REQUEST, "session_id": "new"}, "call_3")
    assert corrected.status_code == 200, corrected.content
    assert Loop.objects.count() == 1


def test_without_a_key_each_call_is_a_new_loop(api):
    assert create(api, REQUEST, None).status_code == create(api, REQUEST, None).status_code == 200
    assert Loop.objects.count() == 2
    assert not CreateKey.objects.exists()


@pytest.mark.parametrize("key", ["", " padded ", "x" * 256, "bell\x07"])
def test_a_key_no_identifier_could_be_is_refused_with_its_header(api, key):
    response = create(api, REQUEST, key)
    assert response.status_code == 422, response.content
    assert error_of(response)["field"] == "Idempotency-Key"
    assert not Loop.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_concurrent_retries_with_one_key_make_one_loop(tools_token, host):
    host.put_session("ses_caller", status="running")
    answers: list[bytes] = []
    lock = threading.Lock()

    def retry(_index: int) -> None:
        response = create(ApiClient(tools_token, "ses_caller"), REQUEST, "call_race")
        assert response.status_code == 200, response.content
        with lock:
            answers.append(response.content)

    concurrently(retry, clients=6)

    assert len(answers) == 6 and len(set(answers)) == 1, answers
    assert Loop.objects.count() == 1
    assert CreateKey.objects.count() == 1


def test_api_docs_describe_the_header(tools_token):
    document = ApiClient(tools_token).get("/api/openapi.json").json()
    [operation] = [ops["post"] for path, ops in document["paths"].items() if path.endswith("/tools/loop_create")]
    [header] = [p for p in operation["parameters"] if p["name"] == "Idempotency-Key"]
    assert header["in"] == "header" and not header["required"]
    assert "invalid_input" in header["description"] and "Idempotency-Key" in operation["description"]
