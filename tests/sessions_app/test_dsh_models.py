"""sessions_app/hosts/dsh_models.py: a DSH session's model, read without waking the session, and
given to a fresh one without changing DSH's default model. Against a real DSH (no model key: no
turn runs, and none is needed to read or select a model)."""

from __future__ import annotations

import json
import logging

import pytest

from sessions_app.hosts import dsh_models
from sessions_app.hosts.dsh import DshHost
from sessions_app.hosts.dsh_models import model_of, select_model, selection_of
from tests.dsh import DshHost as RealDsh

PRO_LOW = {"provider": "deepseek-official", "model": "deepseek-v4-pro", "reasoningEffort": "low"}
FLASH_MAX = {"provider": "deepseek-official", "model": "deepseek-v4-flash", "reasoningEffort": "max"}


def default_model(real: RealDsh) -> dict:
    """DSH's default-model setting: {value, user?, revision, …}."""
    return next(ns for ns in real.call("settings.describe")["namespaces"] if ns["ns"] == "agent-default-model")


def on_real_dsh(test):
    """A test against a real DSH (the `dsh` fixture), whose selection takes a lock in the database."""
    for mark in (pytest.mark.process, pytest.mark.dsh, pytest.mark.django_db):
        test = mark(test)
    return test


# -- the string dshloop passes around ---------------------------------------------------------------


def test_a_selection_is_one_string_and_back_whatever_its_ids_hold():
    odd = {"provider": "local/ollama", "model": "llama3:8b", "reasoningEffort": "high"}
    for selection in (PRO_LOW, odd, {"provider": "p", "model": "m"}):
        assert selection_of(model_of(selection)) == selection
    assert model_of({**PRO_LOW, "maxTokens": 256000}) == model_of(PRO_LOW)  # only what selectModel takes


@pytest.mark.parametrize("model", ["", "default", "deepseek-v4-pro", "[1]", '{"provider": "p"}', "null"])
def test_anything_else_is_dsh_s_default_model(model):
    assert selection_of(model) is None


def test_no_provider_or_model_is_no_selection():
    assert model_of(None) == model_of({"model": "m"}) == model_of({"provider": "p", "model": ""}) == ""


# -- reading a session's model ----------------------------------------------------------------------


@on_real_dsh
def test_a_live_session_s_model_is_its_selection_and_an_unknown_one_has_none(dsh):
    adapter = DshHost(dsh.url)
    dsh.call("session.create", {"sessionId": "picked"})
    dsh.call("session.create", {"sessionId": "untouched"})
    dsh.call("session.selectModel", {"sessionId": "picked", **PRO_LOW})  # in memory: no request logged yet
    dsh.call("settings.replace", {"ns": "agent-default-model", "section": {}})

    assert json.loads(adapter.session_model("picked")) == PRO_LOW
    assert json.loads(adapter.session_model("untouched"))["model"] == "deepseek-v4-flash"  # DSH's default
    assert adapter.session_model("nobody") == ""


@on_real_dsh
def test_a_cold_session_that_never_asked_the_model_has_none_of_its_own_and_stays_cold(dsh):
    adapter = DshHost(dsh.url)
    dsh.call("session.create", {"sessionId": "blank"})
    dsh.restart()

    assert adapter.session_model("blank") == ""
    assert not dsh.attached("blank")


# -- giving a fresh session its model ---------------------------------------------------------------


@on_real_dsh
def test_selecting_a_fresh_session_s_model_puts_the_user_s_default_back_exactly(dsh):
    dsh.call("session.create", {"sessionId": "user-choice"})
    dsh.call("session.selectModel", {"sessionId": "user-choice", **FLASH_MAX})  # the user's default now
    before = default_model(dsh)
    dsh.call("session.create", {"sessionId": "fresh"})

    select_model(DshHost(dsh.url).wire, "fresh", PRO_LOW)

    assert dsh.call("session.models", {"sessionId": "fresh"})["current"] == PRO_LOW
    after = default_model(dsh)
    assert (after["value"], after.get("user")) == (before["value"], before["user"]) == (FLASH_MAX, FLASH_MAX)


@on_real_dsh
def test_with_no_default_of_the_user_s_dsh_s_built_in_one_comes_back(dsh):
    assert "user" not in default_model(dsh)
    dsh.call("session.create", {"sessionId": "fresh"})

    select_model(DshHost(dsh.url).wire, "fresh", PRO_LOW)

    assert dsh.call("session.models", {"sessionId": "fresh"})["current"] == PRO_LOW
    after = default_model(dsh)
    assert not after.get("user") and after["value"] == after["base"]  # an empty section: all DSH's own
    assert dsh.call("host.describe")["model"] == "deepseek-v4-flash"


@on_real_dsh
def test_the_default_already_being_the_model_changes_no_setting(dsh):
    dsh.call("session.create", {"sessionId": "fresh"})
    current = dsh.call("session.models", {"sessionId": "fresh"})["current"]
    revision = default_model(dsh)["revision"]

    select_model(DshHost(dsh.url).wire, "fresh", current)

    assert default_model(dsh)["revision"] == revision  # not written, not even back


@on_real_dsh
def test_a_default_someone_changed_meanwhile_is_left_as_they_set_it(dsh, caplog):
    dsh.call("session.create", {"sessionId": "fresh"})
    before = default_model(dsh)
    dsh.call("session.selectModel", {"sessionId": "fresh", **PRO_LOW})  # as select_model does
    dsh.call("session.create", {"sessionId": "elsewhere"})
    dsh.call("session.selectModel", {"sessionId": "elsewhere", **FLASH_MAX})  # a person, meanwhile

    with caplog.at_level(logging.WARNING, logger="dshloop.hosts"):
        dsh_models._restore_default(DshHost(dsh.url).wire, before)

    assert default_model(dsh)["value"] == FLASH_MAX  # theirs, not overwritten with the older one
    assert "settings-conflict" in caplog.text


@on_real_dsh
def test_a_model_dsh_cannot_run_fails_the_run_at_once_naming_it(dsh):
    dsh.call("session.create", {"sessionId": "fresh"})
    gone = {"provider": "no-such-provider", "model": "m"}

    with pytest.raises(dsh_models.DshError) as raised:
        select_model(DshHost(dsh.url).wire, "fresh", gone)

    assert raised.value.transient is False and raised.value.code == "model-unavailable"
    assert "no-such-provider" in str(raised.value)
    assert "user" not in default_model(dsh)
