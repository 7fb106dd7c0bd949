"""A DSH session's model, for the `dsh` host: read from the session a `new` loop inherits it from, and
given to the fresh session it makes (spec §2.1: "Model configuration is always inherited").

Where DSH keeps it (rc.8, dsh-host-apiproxy `selectionFor`): a live session runs on the selection
made in this DSH process (`session.selectModel`), else on the config of the newest `request/header`
in its log, else on DSH's default model (the `agent-default-model` setting). A cold session has no
selection in memory: it resumes with its log's. `session.list` carries none of it.

A selection is `{provider, model, reasoningEffort?}`. dshloop passes it around as one string
(SessionInfo.model, create_session's `model`): its compact JSON, so that any provider or model ID
(with `/` or `:` in it) survives; the loop record never stores it (spec §2.1).
"""

from __future__ import annotations

import json
import logging

from django.db import transaction

from core.locks import lock_until_commit

from .dsh_wire import DshClient, DshError, json_array, json_object, json_string

logger = logging.getLogger("dshloop.hosts")

# DSH's setting that holds its default model (dsh-agent-default-model).
DEFAULT_MODEL_SETTINGS = "agent-default-model"
HISTORY_PAGE = 200  # messages per history page when looking for a session's newest request header


def model_of(config: object) -> str:
    """A DSH model selection (as `session.models` and a `request/header`'s config carry it) as
    dshloop's string; "" when it names no provider and model."""
    config = json_object(config)
    provider, model = json_string(config.get("provider")), json_string(config.get("model"))
    if not provider or not model:
        return ""
    selection = {"provider": provider, "model": model}
    if effort := json_string(config.get("reasoningEffort")):
        selection["reasoningEffort"] = effort
    return json.dumps(selection, sort_keys=True, separators=(",", ":"))


def selection_of(model: str) -> dict[str, str] | None:
    """The DSH selection a model string of model_of names; None for any other string (the profile
    default, DSHLOOP_DEFAULT_MODEL): DSH's own default model then."""
    try:
        value = json.loads(model)
    except ValueError:
        return None
    canonical = model_of(value)
    return json.loads(canonical) if canonical else None


def read_session_model(wire: DshClient, session_id: str, *, attached: bool) -> str:
    """The model DSH runs the session on; "" when it has none of its own or DSH does not know it.

    A live session is asked (`session.models`: its selection, which may not be in its log yet); a
    cold one is not woken for it (`session.models` would resume it): its log says what DSH resumes
    it with. A session that never sent a request follows DSH's default model: none of its own.
    """
    try:
        if attached:
            value = wire.call("session.models", {"sessionId": session_id})
            return model_of(json_object(value).get("current"))
        return _logged_model(wire, session_id)
    except DshError as exc:
        if exc.code == "session-not-found":  # gone since it was looked up: no source to inherit from
            return ""
        raise


def _logged_model(wire: DshClient, session_id: str) -> str:
    """The config of the newest `request/header` in the session's log (read from the tail back, as
    far as it takes; `session.history` never resumes a session)."""
    before = None
    while True:
        payload: dict[str, object] = {"sessionId": session_id, "maxMessages": HISTORY_PAGE}
        if before is not None:
            payload["beforeSeq"] = before
        value = json_object(wire.call("session.history", payload))
        page = [json_object(json_object(entry).get("event")) for entry in json_array(value.get("events"))]
        page = [event for event in page if isinstance(event.get("seq"), int)]
        headers = [event for event in page if event.get("type") == "request/header"]
        if headers:
            newest = max(headers, key=lambda event: event["seq"])
            return model_of(json_object(json_object(json_object(newest.get("data")).get("header")).get("config")))
        if not value.get("hasMore") or not page:
            return ""
        before = min(event["seq"] for event in page)


def select_model(wire: DshClient, session_id: str, selection: dict[str, str]) -> None:
    """Run a session that has not prompted yet on `selection`.

    DSH takes no model at `session.create`; `session.selectModel` is the way, and it also saves the
    selection as DSH's default model, for every session made after (dsh-host-apiproxy). dshloop must
    not change the user's default, so it is read first and written back after, on the condition
    that nothing else wrote it meanwhile (`expectedRevision`). dshloop's own selections take turns
    under one lock (held to the end of a short transaction): two fresh sessions with different
    models never restore each other's selection. When DSH's default is the selection already there
    is nothing to do: a session with no request of its own runs on the default.
    """
    with transaction.atomic():
        lock_until_commit("dshloop-dsh-default-model")
        default = _default_model(wire)
        if default is not None and model_of(default.get("value")) == model_of(selection):
            return
        try:
            wire.call("session.selectModel", {"sessionId": session_id, **selection})
        except DshError as exc:
            if exc.code == "model-unavailable":  # no adapter serves it: retrying the run cannot help
                raise DshError(
                    f"DSH cannot run session {session_id} on its source's model {model_of(selection)}: {exc.said}",
                    code=exc.code,
                    said=exc.said,
                    transient=False,
                ) from exc
            raise
        if default is not None:
            _restore_default(wire, default)


def _default_model(wire: DshClient) -> dict | None:
    """DSH's default-model setting as `settings.describe` shows it ({value, user?, revision}), or
    None when this DSH has no settings to read (then selectModel saves nothing either)."""
    try:
        value = wire.call("settings.describe", {})
    except DshError as exc:
        if not exc.code:  # DSH did not answer: the run is retried
            raise
        return None
    namespaces = [json_object(item) for item in json_array(json_object(value).get("namespaces"))]
    return next((ns for ns in namespaces if ns.get("ns") == DEFAULT_MODEL_SETTINGS), None)


def _restore_default(wire: DshClient, default: dict) -> None:
    """Put back DSH's default model as it was before selectModel saved the session's over it: the
    user's own section (none: DSH's built-in default), if selectModel's save is still the last write."""
    revision = default.get("revision")
    payload: dict[str, object] = {"ns": DEFAULT_MODEL_SETTINGS, "section": json_object(default.get("user"))}
    if isinstance(revision, int) and not isinstance(revision, bool):
        payload["expectedRevision"] = revision + 1  # selectModel's save, and nobody's after it
    try:
        wire.call("settings.replace", payload)
    except DshError as exc:
        # The fresh session has its model either way; only DSH's default may be left changed.
        logger.warning("DSH's default model was not put back after a fresh session's selection: %s", exc)
