"""The embedded host stores a `new` run's prompt once: in the fresh session's inbox, not also as its
first prompt. What shows the first prompt (the session's title, spec §7) shows what it showed.
On both engines (the suite's two passes)."""

from __future__ import annotations

import random
import string
import xml.etree.ElementTree as ET

import pytest
from django.contrib.admin.utils import quote
from django.urls import reverse
from hypothesis import given
from hypothesis import strategies as st

from sessions_app.models import InboxMessage, SessionHeader
from sessions_app.titles import first_prompt_kept, first_prompt_title, fold_title
from tests.loops.new_runs import new_loop_with_runs

pytestmark = pytest.mark.django_db

PROMPT_CHARS = 100_000


def long_prompt(first_line: str = "") -> str:
    """100,000 characters of letters and spaces (bench.storage's prompt), after `first_line`."""
    rest = "".join(random.Random(7).choices(string.ascii_letters + " ", k=PROMPT_CHARS))
    return (first_line + "\n" + rest)[:PROMPT_CHARS] if first_line else rest


def stored_text(session_id: str) -> dict[str, int]:
    """The characters the host's tables hold for one session: its header's text and its inbox's."""
    header = SessionHeader.objects.filter(session_id=session_id).values_list(
        "user_title", "generated_title", "first_prompt", "preset", "model"
    )
    [fields] = header
    messages = InboxMessage.objects.filter(session_id=session_id).values_list("text", flat=True)
    return {"header": sum(len(value) for value in fields), "inbox": sum(len(text) for text in messages)}


@pytest.mark.parametrize("first_line", ["", "Check the overnight deploys and page the on-call engineer"])
def test_a_new_run_of_a_100000_character_prompt_stores_it_once_in_the_hosts_tables(
    global_session, host_api, api, admin_client, first_line
):
    prompt = long_prompt(first_line)
    _, [run] = new_loop_with_runs(1, prompt=prompt)
    session_id = run.target_session_id

    stored = stored_text(session_id)
    assert stored["inbox"] < PROMPT_CHARS + 200  # the prompt, in the message's XML
    assert stored["header"] < 200  # the title the prompt gives, the preset and the model
    [message] = InboxMessage.objects.filter(session_id=session_id)
    assert ET.fromstring(message.text).findtext("prompt") == prompt  # the whole prompt, byte for byte

    # Everything that shows the first prompt shows the title the whole prompt gives.
    title = first_prompt_title(prompt)
    assert title == first_line if first_line else title.endswith("…")
    assert host_api.get(f"/api/host/sessions/{session_id}").json()["title"] == title
    listed = api.tool("list_sessions", {"limit": 100}).json()["sessions"]
    assert [session["title"] for session in listed if session["session_id"] == session_id] == [title]
    header = SessionHeader.objects.get(session_id=session_id)
    # The admin quotes "_" in its URLs: a ses_22… by hand would name ses" (no such session).
    change = reverse("admin:sessions_app_sessionheader_change", args=[quote(session_id)])
    page = admin_client.get(change).content.decode()
    assert title in page
    assert title in admin_client.get("/admin/sessions_app/sessionheader/").content.decode()
    assert fold_title(first_prompt=header.first_prompt) == title


@pytest.mark.parametrize(
    "prompt",
    [
        "Check the deploy",
        "\n\n  Check   the\tdeploy  \nthen the logs",
        "x" * 61,
        "word " * 30,
        "a" + " " * 99_998 + "b",
        "🚀" * 70,
        "   \n \t ",
        "",
        "First\u2028Second",
    ],
)
def test_what_the_host_keeps_of_a_first_prompt_gives_the_same_title(prompt):
    kept = first_prompt_kept(prompt)
    assert len(kept) <= 60
    assert fold_title(first_prompt=kept) == fold_title(first_prompt=prompt)


@given(st.text())
def test_what_the_host_keeps_of_any_first_prompt_folds_to_its_title(prompt):
    assert fold_title(first_prompt=first_prompt_kept(prompt)) == fold_title(first_prompt=prompt)
