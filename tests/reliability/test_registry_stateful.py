"""A hypothesis state machine over the loop registry, through the HTTP tools (spec §2, §4, §9).

Random sequences of loop_create (every / after / cron, v1 alias; targets: the caller, another
session, "self", "new", the caller by ID; several callers), loop_list in its three forms and
loop_delete (live, already deleted, never existing; v2 and deprecated v1 form) must keep the
spec §2 invariants against a model of what the registry holds:

- loop_list {} / {"session_id": X} return exactly the active loops targeting the caller / X,
  including "self" loops when that session is the global interface (contract §3);
- loop_list {"session_id": "global"} returns exactly every active loop, in the contract's order;
- loop IDs are unique, never reused after a delete;
- a deleted loop stays deleted: gone from every list, and a second delete is 404 unknown_loop.

No scheduler runs, so every created loop stays active (nothing completes).
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    multiple,
    rule,
    run_state_machine_as_test,
)

from loops.models import Loop
from tests.conftest import ApiClient, error_of

CALLERS = ["ses_caller", "ses_other", "ses_global"]
GLOBAL_SESSION = "ses_global"
MAX_SAFE_INTEGER = 2**53 - 1
MIN_NEW_INTERVAL = 300  # DSHLOOP_MIN_NEW_INTERVAL_SECONDS's default

seconds = st.one_of(st.integers(1, 10**6), st.integers(10**6, MAX_SAFE_INTEGER))  # huge: no next_at
schedules = st.one_of(
    st.builds(lambda n: {"kind": "every", "every_seconds": n}, seconds),
    st.builds(lambda n: {"kind": "after", "after_seconds": n}, seconds),
    st.builds(
        lambda expr, tz: {"kind": "cron", "expr": expr, **({"tz": tz} if tz else {})},
        st.sampled_from(["*/5 * * * *", "0 9 * * 1-5", "30 2 * * *", "@daily", "0 0 29 2 *"]),
        st.sampled_from([None, "UTC", "Asia/Shanghai", "America/New_York", "Europe/Berlin"]),
    ),
)
# (what loop_create gets as session_id, or None to omit it) — resolved against the caller below.
targets = st.sampled_from([None, "self", "new", "ses_caller", "ses_other", "ses_global", "caller-by-id"])
# Prompts loop_create accepts: not blank, and only characters the delivered XML can carry (tab and
# line breaks, no other C0 control, no U+FFFE/U+FFFF); the refusals are tested elsewhere.
XML_UNFIT = set(map(chr, [*range(0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0xFFFE, 0xFFFF]))
prompts = st.text(min_size=1, max_size=40).filter(lambda p: p.strip() and not XML_UNFIT & set(p))


class RegistryMachine(RuleBasedStateMachine):
    """The model: loop_id -> stored target for the active loops, and the IDs ever deleted."""

    api: ApiClient  # set by the test, which owns the fixtures

    live = Bundle("live")
    deleted = Bundle("deleted")

    def __init__(self):
        super().__init__()
        Loop.objects.all().delete()  # examples share the test's transaction: start empty
        self.active: dict[str, str] = {}
        self.ever_deleted: set[str] = set()
        self.ever_created: set[str] = set()

    def call(self, tool: str, body: dict, caller: str | None):
        return self.api.tool(tool, body, session_id=caller)  # None: no X-DSH-Session-Id

    def expected_for(self, session_id: str) -> set[str]:
        """contract §3: a session's list includes `self` loops when it is the global interface."""
        targets = {session_id} | ({"self"} if session_id == GLOBAL_SESSION else set())
        return {loop_id for loop_id, target in self.active.items() if target in targets}

    @initialize()
    def empty_registry(self):
        response = self.call("loop_list", {"session_id": "global"}, "ses_caller")
        assert response.status_code == 200 and response.json() == {"loops": []}

    @rule(
        target=live,
        caller=st.sampled_from(CALLERS),
        target_choice=targets,
        schedule=schedules,
        prompt=prompts,
        v1_alias=st.booleans(),
        with_preset=st.booleans(),
    )
    def create(self, caller, target_choice, schedule, prompt, v1_alias, with_preset):
        body = {"prompt": prompt}
        if v1_alias and schedule["kind"] == "every":
            body["time_in_seconds"] = schedule["every_seconds"]  # spec §10 alias
        else:
            body["schedule"] = schedule
        if target_choice == "caller-by-id":
            body["session_id"] = caller
        elif target_choice is not None:
            body["session_id"] = target_choice
        if target_choice == "new" and with_preset:
            body["preset"] = "coder"
        response = self.call("loop_create", body, caller)
        if target_choice == "new" and schedule["kind"] == "every" and schedule["every_seconds"] < MIN_NEW_INTERVAL:
            # contract §14: a fresh agent at most every DSHLOOP_MIN_NEW_INTERVAL_SECONDS (the crons
            # sampled here are all at least 5 minutes apart); nothing is made.
            assert response.status_code == 422 and error_of(response)["code"] == "interval_too_short", response.content
            return multiple()
        assert response.status_code == 200, response.content
        view = response.json()
        loop_id = view["loop_id"]
        assert loop_id.startswith("loop_")
        assert loop_id not in self.ever_created, "a loop ID was handed out twice"
        stored = body.get("session_id", caller)
        assert view["session_id"] == stored and view["created_by_session_id"] == caller, view
        assert view["prompt"] == prompt.strip() and view["state"] == "scheduled", view
        assert None not in view.values(), view  # optional fields are omitted, never null
        self.active[loop_id] = stored
        self.ever_created.add(loop_id)
        return loop_id

    @rule(
        target=live, caller=st.sampled_from(CALLERS), target_choice=st.sampled_from(["self", None]), schedule=schedules
    )
    def create_for_self_or_caller(self, caller, target_choice, schedule):
        """The targets whose list membership is subtle: `self` shows in the global interface's list."""
        return self.create(caller, target_choice, schedule, "ping", v1_alias=False, with_preset=False)

    @rule(
        caller=st.sampled_from(CALLERS + [None]),
        selector=st.sampled_from(["mine", "exact"]),
        session_id=st.sampled_from(CALLERS + ["ses_nobody"]),
    )
    def list_for_a_session(self, caller, selector, session_id):
        """{} lists the caller's loops, {"session_id": X} those of X (spec §2.2)."""
        if selector == "mine":
            if caller is None:
                response = self.call("loop_list", {}, None)
                assert response.status_code == 422 and error_of(response)["code"] == "no_current_session"
                return
            body, session_id = {}, caller
        else:
            body = {"session_id": session_id}
        response = self.call("loop_list", body, caller)
        assert response.status_code == 200, response.content
        assert {loop["loop_id"] for loop in response.json()["loops"]} == self.expected_for(session_id)

    @rule(
        caller=st.sampled_from(CALLERS),
        case=st.sampled_from(
            [
                # (tool, body, code): inputs that change nothing (spec §2.2, §2.3, §9).
                ("loop_create", {"session_id": "global"}, "invalid_input"),  # a list selector, not a target
                ("loop_create", {"session_id": "Self"}, "unknown_session"),  # reserved values are case-sensitive
                (
                    "loop_create",
                    {"session_id": "ses_caller", "preset": "coder"},
                    "invalid_input",
                ),  # preset only with new
                ("loop_list", {"session_id": "self"}, "invalid_input"),  # a target, not a list scope
                ("loop_list", {"session_id": "new"}, "invalid_input"),
                ("loop_delete", {"loop_id": "loop_never_created"}, "unknown_loop"),
            ]
        ),
    )
    def refused_input_changes_nothing(self, caller, case):
        tool, body, code = case
        if tool == "loop_create":
            body = {"prompt": "x", "schedule": {"kind": "after", "after_seconds": 5}, **body}
        response = self.call(tool, body, caller)
        assert response.status_code in {404, 422} and error_of(response)["code"] == code, response.content

    @rule(target=deleted, loop_id=consumes(live), caller=st.sampled_from(CALLERS + [None]), v1_form=st.booleans())
    def delete(self, loop_id, caller, v1_form):
        """Any caller may delete any loop by ID (spec §2.3)."""
        body = {"id": loop_id} if v1_form else {"loop_id": loop_id}
        response = self.call("loop_delete", body, caller)
        assert response.status_code == 200, response.content
        assert response.json() == {"deleted": True, "loop_id": loop_id}
        del self.active[loop_id]
        self.ever_deleted.add(loop_id)
        return loop_id

    @rule(loop_id=deleted, caller=st.sampled_from(CALLERS + [None]))
    def delete_again(self, loop_id, caller):
        """Deletion is not idempotent at the API: the second call is unknown_loop (spec §2.3)."""
        response = self.call("loop_delete", {"loop_id": loop_id}, caller)
        assert response.status_code == 404 and error_of(response)["code"] == "unknown_loop", response.content

    @invariant()
    def global_list_is_every_active_loop_in_order(self):
        response = self.call("loop_list", {"session_id": "global"}, None)
        assert response.status_code == 200, response.content
        loops = response.json()["loops"]
        ids = [loop["loop_id"] for loop in loops]
        assert len(ids) == len(set(ids)), "a loop is listed twice"
        assert set(ids) == set(self.active)
        assert not set(ids) & self.ever_deleted, "a deleted loop came back"
        # contract §3: next_at ascending (absent last), then created_at, then loop_id.
        keys = [
            (loop.get("next_at") is None, loop.get("next_at") or 0, loop["created_at"], loop["loop_id"])
            for loop in loops
        ]
        assert keys == sorted(keys), keys


def test_registry_keeps_spec_2_invariants_under_random_create_list_delete(tools_token, make_session, make_preset):
    make_session("ses_caller", status="running", preset="coder", model="m1")
    make_session("ses_other", status="cold", preset="writer", model="m2")
    make_session(GLOBAL_SESSION, global_interface=True, preset="interface", model="m-global")
    make_preset("coder")
    RegistryMachine.api = ApiClient(tools_token)
    run_state_machine_as_test(
        RegistryMachine,
        settings=settings(
            max_examples=50,
            stateful_step_count=30,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )
