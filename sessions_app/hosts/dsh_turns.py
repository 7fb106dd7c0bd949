"""How a DSH turn ended, read from a session's log: the `turn/end` after an occurrence's message,
its reason mapped to a run outcome (contract §10)."""

from __future__ import annotations

import re
from dataclasses import replace

from .base import TurnEnd, clip
from .dsh_wire import json_array, json_object, json_string

# What DSH's turn/end reason kinds mean for a run (TurnEndReasonMap, @deepseek-ai/dsh-session
# lib/types/types.d.ts in 0.1.0-rc.8; packages/core/session/src/types.ts upstream). The map is
# merge-extensible: a kind not listed here is a failure naming the kind.
_ABORT_CAUSES = {
    "user": "a user cancelled it",
    "parent": "its parent session cancelled it",
    "disposed": "its agent was disposed",
    "legacy": "cancelled; the cause was not recorded",
}


def _text(message: dict) -> str:
    content = json_array(message.get("content"))
    parts = [part.get("text") for part in content if isinstance(part, dict) and part.get("type") == "text"]
    return "".join(part for part in parts if isinstance(part, str)).strip()


def _final_text(turn: list[dict]) -> str:
    """The turn's last assistant text (its `assistant/message` events), or ""."""
    for event in reversed(turn):
        data = json_object(event.get("data"))
        if event.get("type") == "assistant/message" and isinstance(data.get("message"), dict):
            if text := _text(data["message"]):
                return clip(text)
    return ""


# The tool error dshloop's plugin answers a call outside a fresh run's tools with (dsh-plugin/src/
# boundary.ts `refusal`; DSH prefixes a guard's reason with "Error: "): the tool and the rule.
REFUSED = re.compile(r"Error: dshloop refused (\S+) \(rule ([a-z-]+)\)")


def refusals(turn: list[dict]) -> list[str]:
    """The calls the fresh-run boundary refused in a turn, as "tool (rule …)", in order."""
    refused = []
    for event in turn:
        if event.get("type") != "tool/result":
            continue
        message = json_object(json_object(event.get("data")).get("message"))
        for block in json_array(message.get("content")):
            if isinstance(block, dict) and block.get("isError") is True:
                if match := REFUSED.match(_text(block)):
                    refused.append(f"{match[1]} (rule {match[2]})")
    return refused


def map_turn_end(reason: object, turn: list[dict]) -> TurnEnd:
    """A `turn/end` reason as a run outcome; `turn` holds the turn's events from the run's message on.
    Calls the fresh-run boundary refused are said in its error, whatever the outcome: the run is
    where an operator looks for what an unattended agent tried and could not do."""
    ended = _map_reason(reason, turn)
    refused = refusals(turn)
    if not refused:
        return ended
    note = f"dshloop's fresh-run boundary refused: {', '.join(refused)}."
    return replace(ended, error=clip(f"{ended.error.rstrip('.')}. {note}" if ended.error else note))


def _map_reason(reason: object, turn: list[dict]) -> TurnEnd:
    reason = reason if isinstance(reason, dict) else {}
    kind = json_string(reason.get("kind"))
    if kind == "completed":
        return TurnEnd("succeeded", summary=_final_text(turn))
    if kind == "error":
        failure = json_object(reason.get("error"))
        code, message = str(failure.get("code") or "UNKNOWN"), str(failure.get("message") or "no message")
        return TurnEnd("failed", error=clip(f"DSH ended the turn with an error ({code}): {message}"))
    if kind == "aborted":  # session.cancel, a parent's or a hook's cancellation, a disposed agent
        cause = json_object(reason.get("reason"))
        cause_kind = str(cause.get("kind") or "")
        if cause_kind == "hook":
            why = f"a hook cancelled it: {cause.get('reason') or 'no reason given'}"
        else:
            why = _ABORT_CAUSES.get(cause_kind, f"cause {cause_kind or 'unknown'}")
        return TurnEnd("cancelled", summary=_final_text(turn), error=clip(f"DSH aborted the turn ({why})."))
    if kind == "interrupted":  # DSH stopped mid-turn; closed when the log was next loaded
        return TurnEnd(
            "cancelled",
            summary=_final_text(turn),
            error="DSH stopped during the turn (interrupted): the turn did not finish.",
        )
    if kind == "max-tokens":  # a step hit the output-token ceiling: a truncated, not a clean, stop
        return TurnEnd(
            "failed",
            summary=_final_text(turn),
            error="DSH ended the turn with max-tokens: a model answer reached its output-token limit and was cut short.",
        )
    if kind == "blocked":  # a pre-step decision (a hook) rejected the turn's step
        return TurnEnd("failed", error="DSH blocked the turn: a hook rejected its step, so it did not run.")
    return TurnEnd("failed", error=clip(f"DSH ended the turn with a reason dshloop does not know: {kind or 'none'!r}."))


def carries(source: object, occurrence_key: str) -> bool:
    """Whether a message's `source` names the occurrence: as the plugin's `deliveryKey` (a delivery
    through dshloop's plugin, contract §15) or as the `rpcId` of a `session.prompt` (without it)."""
    origin = json_object(source)
    return origin.get("deliveryKey") == occurrence_key or origin.get("rpcId") == occurrence_key


def turn_end_of(events: list[dict], occurrence_key: str) -> TurnEnd | None:
    """The outcome of the turn that handled the occurrence's message, from a session's log (oldest
    first), or None: the message is not in the log, or its turn has not ended yet.

    DSH writes a `user/message` inside the turn that handles it (a steered one at the running turn's
    next step, a queued one at the start of a later turn), so that turn's end is the first `turn/end`
    after it by seq. DSH does not deduplicate an rpcId: a repeated message counts from the first."""
    start = None
    for index, event in enumerate(events):
        data = json_object(event.get("data"))
        if start is None:
            if event.get("type") == "user/message" and carries(data.get("source"), occurrence_key):
                start = index
        elif event.get("type") == "turn/end":
            return map_turn_end(data.get("reason"), events[start:index])
    return None


def stall_of(events: list[dict], occurrence_key: str) -> TurnEnd | None:
    """For an unwatched turn that has not ended: the failure it is stuck on, when it waits for a
    person — an `approval/asked` with no `approval/decided`, or an `ask_user_question` call with no
    result (DSH waits for those forever; docs/dsh-unattended.md §2). None: not stuck on one."""
    started, asked, questions = False, {}, 0
    for event in events:
        data = json_object(event.get("data"))
        kind = event.get("type")
        if not started:
            started = kind == "user/message" and carries(data.get("source"), occurrence_key)
        elif kind == "turn/end":
            return None
        elif kind == "approval/asked":
            asked[json_string(data.get("id"))] = data
        elif kind == "approval/decided" and data.get("id"):
            asked.pop(json_string(data.get("id")), None)
        elif kind == "approval/decided":  # no id: it answers whatever was asked
            asked.clear()
        elif kind == "tool/call" and data.get("name") == "ask_user_question":
            questions += 1
        elif kind == "tool/result" and questions:
            questions -= 1
    if asked:
        request = next(iter(asked.values()))
        what = json_string(request.get("toolName")) or "a tool"
        why = json_string(request.get("reason"))
        waits = f"an approval for {what}" + (f" ({why})" if why else "")
    elif questions:
        waits = "an answer to a question (ask_user_question)"
    else:
        return None
    return TurnEnd(
        "failed",
        error=clip(
            f"Unattended run stopped: its turn waited for {waits}, which nobody watching a fresh session "
            "can give; dshloop cancelled the turn (it fails closed)."
        ),
        stalled=True,
    )
