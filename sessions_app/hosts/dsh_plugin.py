"""dshloop's plugin in DSH as the `dsh` host calls it: its loopback channel `POST /dshloop/<endpoint>`
(dsh-plugin/src/channel.ts), one call each, answered from DSH's memory:
- `hello`: whether the plugin is mounted and what it can do (asked once a minute: DSH may be
  restarted with or without it, or with an older one);
- `deliver {key}`: one occurrence into a loaded session. The channel carries only the key: the
  plugin reads the message from dshloop with its token while this call lasts
  (`GET /api/dsh/deliveries/{key}`), looks for the occurrence in the live agent's log and inbox,
  sends it only if it is in neither, and (`confirm`) answers once DSH has logged the `user/message`,
  with its ID: what counts as delivered (docs/dsh.md, exactly once);
- `sessions {ids}`: which of a batch's sessions DSH has loaded, with their status, title, cwd and
  preset: no `subagent.list` (every persisted header, rc.8) nor log read for a live session.
"""

from __future__ import annotations

import time
from contextlib import AbstractContextManager
from dataclasses import dataclass

from django.conf import settings

from sessions_app.services import plugin_deliveries_offered

from .base import Message
from .dsh_history import CLOCK_MARGIN_MS
from .dsh_wire import DshClient, DshError, json_array, json_object

PLUGIN_CHANNEL = "/dshloop"
PLUGIN_RECHECK_SECONDS = 60.0
# How long a delivery waits for its message to show in the session's log: an idle session starts its
# turn at once (well under a second); a steered one at the running turn's next step.
CONFIRM_SECONDS = 8.0


def fresh_run_extra_tools() -> list[str]:
    """The tools a fresh run may call beyond the plugin's built-in set: the operator's
    DSHLOOP_FRESH_RUN_TOOLS, and the loop-making tools when DSHLOOP_FRESH_RUNS_MAY_CREATE_LOOPS is on."""
    making = ["loop_create", "loop_delete"] if settings.DSHLOOP_FRESH_RUNS_MAY_CREATE_LOOPS else []
    return [*settings.DSHLOOP_FRESH_RUN_TOOLS, *making]


@dataclass(frozen=True)
class Rung:
    """The plugin's answer to a delivery: how it went in (next_turn, or next_step into a running
    turn) and, once DSH has logged it, the message's ID (None: not logged yet, or an older plugin)."""

    delivery: str
    message_id: str | None


@dataclass
class Abilities:
    deliver: bool = False
    confirm: bool = False
    sessions: bool = False


class PluginChannel:
    def __init__(self, wire: DshClient):
        self.wire = wire
        self._abilities = Abilities()
        self._checked_at: float | None = None

    def abilities(self) -> Abilities:
        """What the mounted plugin can do (nothing: no plugin). DSH unreachable: a transient DshError."""
        now = time.monotonic()
        if self._checked_at is None or now - self._checked_at > PLUGIN_RECHECK_SECONDS:
            try:
                value = json_object(self.wire.call("hello", {}, path=PLUGIN_CHANNEL + "/hello"))
                deliver = value.get("deliver") is True
                self._abilities = Abilities(
                    deliver, deliver and value.get("confirm") is True, deliver and value.get("sessions") is True
                )
            except DshError as exc:
                if exc.transient:
                    raise
                self._abilities = Abilities()  # no such channel (405), or a plugin without the endpoint
            self._checked_at = now
        return self._abilities

    def recheck(self) -> None:
        """Ask `hello` again at the next call: an answer unlike what the plugin said it does (DSH
        restarted onto an older plugin within the minute) must not be taken for its word until then."""
        self._checked_at = None

    def loaded(self, session_ids: list[str]) -> dict[str, dict]:
        """Each session as the plugin sees it: `{attached: false}` when DSH has not loaded it, else
        its `running`, `projections`, `cwd`, `agentPreset` and `createdAt` (dsh-plugin/src/sessions.ts)."""
        value = self.wire.call("sessions", {"ids": session_ids}, path=PLUGIN_CHANNEL + "/sessions")
        answers = {}
        for item in json_array(json_object(value).get("sessions")):
            item = json_object(item)
            if item.get("sessionId") in session_ids:
                answers[item["sessionId"]] = item
        return answers

    def request_of(self, message: Message) -> dict:
        """What dshloop offers the plugin to deliver under the message's key (GET
        /api/dsh/deliveries/{key}): dsh-plugin/src/deliver.ts's DeliverRequest."""
        source = message.source
        confirm = min(CONFIRM_SECONDS, max(0.0, self.wire.timeout - 2.0))
        return {
            "sessionId": message.session_id,
            "text": message.text,
            "key": message.occurrence_key,
            "summary": message.summary,
            "loop": {"loop_id": source.get("loop_id", ""), "run_id": source.get("run_id", "")},
            # A fresh run's tools are bounded by the plugin (contract §14, dsh-plugin/src/boundary.ts):
            # its built-in set, plus what the operator allows here.
            "unattended": message.fresh,
            "extraTools": fresh_run_extra_tools() if message.fresh else [],
            "notice": message.notice,
            # Where the plugin looks for the occurrence from (no message predates its scheduled time),
            # and how long it waits for DSH to log the message before it answers.
            "since": max(0, int(source.get("scheduled_at") or 0) - CLOCK_MARGIN_MS),
            "confirmMs": int(confirm * 1000),
        }

    def offered(self, messages: list[Message]) -> AbstractContextManager[None]:
        """The messages offered to the plugin while the body rings it (one write each way)."""
        return plugin_deliveries_offered([(m.occurrence_key, m.session_id, self.request_of(m)) for m in messages])

    def deliver(self, message: Message) -> Rung:
        """One message offered and rung (ring)."""
        with self.offered([message]):
            return self.ring(message)

    def ring(self, message: Message) -> Rung:
        """`POST /dshloop/deliver` of a message on offer: the plugin sends it with its own source
        (contract §15) to the session's live agent; a cold session is `session-not-loaded` (a
        DshError: nothing sent). Any local process can call DSH's channel, so it carries only the key:
        the plugin reads the message from dshloop with its token while it is offered."""
        value = json_object(
            self.wire.call("deliver", {"key": message.occurrence_key}, path=PLUGIN_CHANNEL + "/deliver")
        )
        delivery = value.get("delivery")
        message_id = value.get("messageId")
        return Rung(
            delivery if delivery in ("next_turn", "next_step") else "next_turn",
            message_id if isinstance(message_id, str) and message_id else None,
        )
