"""The panel and bytes that are not UTF-8, and HEAD.

Django decodes query strings and form bodies leniently (U+FFFD for `%FF`, Latin-1 for raw bytes);
the panel must refuse such input, not store it as a prompt or read it as a session ID.
"""

from __future__ import annotations

import re
from urllib.parse import urlencode

import pytest

from loops.models import Loop

from .test_create import field_errors, form

pytestmark = pytest.mark.django_db

URLENCODED = "application/x-www-form-urlencoded"
NOT_UTF8 = "was not sent as valid UTF-8 text"


def post_raw(client, body: bytes, path: str = "/panel/new", content_type: str = URLENCODED):
    return client.post(path, body, content_type=content_type)


def valid_fields(**fields) -> bytes:
    return urlencode(form(target="new", **fields)).encode()


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (b"prompt=%FF", "prompt"),  # a percent-escape that is no UTF-8
        (b"prompt=caf\xe9", "prompt"),  # raw Latin-1 bytes (Django would read them as Latin-1)
        (b"prompt=%C3", "prompt"),  # a truncated sequence
        (b"session=%FE&target=session", "session"),  # would be the session ID U+FFFD
        (b"every_amount=%FF", "every_amount"),  # the cause, not "Enter a whole number."
    ],
)
def test_a_field_that_is_not_utf8_is_refused_on_that_field(staff_client, world, raw, field):
    fields = valid_fields().replace(f"{field}=".encode(), b"unused_" + field.encode() + b"=")
    response = post_raw(staff_client, fields + b"&" + raw)
    assert response.status_code == 422
    assert field_errors(response, field) == [f"This field {NOT_UTF8}; retype it and submit again."]
    assert not Loop.objects.exists()


def test_a_field_name_that_is_not_utf8_is_a_form_error(staff_client, world):
    response = post_raw(staff_client, valid_fields() + b"&%FF=1")
    assert response.status_code == 422
    assert f"The form field &#x27;\ufffd&#x27; {NOT_UTF8}" in response.content.decode()
    assert not Loop.objects.exists()


def test_a_real_replacement_character_sent_as_utf8_is_kept(staff_client, world):
    # U+FFFD is a character like any other when it was sent as UTF-8 (EF BF BD): only bad bytes are refused.
    response = post_raw(staff_client, valid_fields(prompt="broken \ufffd glyph"))
    assert response.status_code == 302
    assert Loop.objects.get().prompt == "broken \ufffd glyph"


def test_a_multipart_field_that_is_not_utf8_is_refused(staff_client, world):
    boundary = "XyZ"
    parts = [(name, value.encode()) for name, value in form(target="new").items() if name != "prompt"]
    parts.append(("prompt", b"ping \xff\xfe"))
    body = (
        b"".join(
            f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'.encode() + value + b"\r\n"
            for name, value in parts
        )
        + f"--{boundary}--\r\n".encode()
    )
    response = post_raw(staff_client, body, content_type=f"multipart/form-data; boundary={boundary}")
    assert response.status_code == 422
    assert field_errors(response, "prompt") == [f"This field {NOT_UTF8}; retype it and submit again."]
    assert not Loop.objects.exists()


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("/panel/?session=%FF", "session"),
        ("/panel/?state=scheduled&q=caf%E9", "q"),
        ("/panel/new?session=%FE", "session"),
        ("/panel/loops/loop_x/?x=%FF", "x"),
        ("/panel/sessions/ses_a/status?fragment=%FF", "fragment"),
    ],
)
def test_a_query_parameter_that_is_not_utf8_is_a_400(staff_client, world, path, name):
    response = staff_client.get(path)
    assert response.status_code == 400
    html = response.content.decode()
    assert re.search(rf"is not valid UTF-8 text:\s*<code>{name}</code>\.", html), html


def test_the_asgi_server_reads_the_query_as_sent(staff_user, world):
    # Production runs under uvicorn (ASGI), where Django's META holds an already decoded string.
    from asgiref.sync import async_to_sync
    from django.test import AsyncClient

    client = AsyncClient()
    client.force_login(staff_user)
    get = async_to_sync(client.get)  # the sync views then run on this thread, in the test's transaction
    assert get("/panel/?session=%FF").status_code == 400
    assert get("/panel/?q=caf%C3%A9").status_code == 200
    assert get("/panel/?q=café").status_code == 200  # raw UTF-8 is UTF-8 too


def test_a_form_post_with_a_query_that_is_not_utf8_creates_nothing(staff_client, world):
    assert staff_client.post("/panel/new?session=%FF", form(target="new")).status_code == 400
    assert not Loop.objects.exists()


def test_a_delete_whose_form_is_not_utf8_deletes_nothing(staff_client, make_loop):
    loop = make_loop()
    response = post_raw(staff_client, b"next=/panel/%FF", path=f"/panel/loops/{loop.loop_id}/delete")
    assert response.status_code == 400
    assert Loop.objects.filter(loop_id=loop.loop_id).exists()


def test_valid_utf8_in_the_query_still_works(staff_client, world):
    assert staff_client.get("/panel/?session=ses_%C3%A9&q=caf%C3%A9").status_code == 200


# --- HEAD, for uptime monitors -------------------------------------------------------------------


def test_head_answers_wherever_get_does(staff_client, make_loop):
    loop = make_loop()
    for path in (
        "/panel/",
        "/panel/new",
        f"/panel/loops/{loop.loop_id}/",
        f"/panel/loops/{loop.loop_id}/delete",
        "/panel/sessions/ses_a/status",
    ):
        head, get = staff_client.head(path), staff_client.get(path)
        assert (head.status_code, get.status_code) == (200, 200), path
        assert head.content == b"", path
        assert head["Content-Type"] == get["Content-Type"], path
    assert Loop.objects.filter(loop_id=loop.loop_id).exists()  # HEAD of the delete page only asks


def test_head_needs_a_sign_in_like_get(client, world):
    response = client.head("/panel/")
    assert response.status_code == 302 and response["Location"].startswith("/admin/login/")


def test_other_methods_are_still_refused(staff_client, world):
    assert staff_client.put("/panel/").status_code == 405
    assert staff_client.post("/panel/").status_code == 405
