"""spec §7 title fold: user-renamed -> generated -> deterministic first-prompt fallback.

The last rung (the session ID) is a display rule for consumers, so the fold can yield None.
"""

from __future__ import annotations

import pytest

from sessions_app.titles import FIRST_PROMPT_TITLE_CHARS, first_prompt_title, fold_title

ELLIPSIS = "…"


# --- the fold ---------------------------------------------------------------------------------


def test_user_title_wins_over_generated_and_first_prompt():
    assert fold_title(user_title="Mine", generated_title="Generated", first_prompt="Prompt") == "Mine"


def test_generated_title_wins_over_first_prompt():
    assert fold_title(generated_title="Generated", first_prompt="Prompt") == "Generated"


def test_first_prompt_is_the_last_durable_rung():
    assert fold_title(first_prompt="Prompt") == "Prompt"


@pytest.mark.parametrize("blank", ["", " ", "\t\n", "\u3000"])
def test_blank_titles_fall_through_to_the_next_rung(blank):
    assert fold_title(user_title=blank, generated_title="Generated") == "Generated"
    assert fold_title(user_title=blank, generated_title=blank, first_prompt="Prompt") == "Prompt"


def test_fold_trims_the_title_it_picks():
    assert fold_title(user_title="  Mine \n") == "Mine"
    assert fold_title(generated_title="\tGenerated ") == "Generated"


def test_fold_of_nothing_is_none_not_the_session_id():
    assert fold_title() is None
    assert fold_title(user_title="", generated_title="", first_prompt="") is None
    assert fold_title(user_title=" ", generated_title="\n", first_prompt=" \n \n") is None


def test_a_long_user_title_is_kept_whole():
    # Only the first-prompt fallback is cut; a name the user chose is theirs.
    title = "x" * 300
    assert fold_title(user_title=title) == title


# --- the deterministic first-prompt fallback --------------------------------------------------


def test_fallback_is_the_first_non_blank_line():
    assert first_prompt_title("\n\n   \nCheck the deploy\nthen the logs") == "Check the deploy"


def test_fallback_collapses_whitespace():
    assert first_prompt_title("  Check\t\tthe    deploy \u00a0 now  ") == "Check the deploy now"


@pytest.mark.parametrize("length", [1, 59, 60])
def test_fallback_up_to_60_characters_is_kept_whole(length):
    line = ("abcdefghij" * 7)[:length]
    assert first_prompt_title(line) == line


@pytest.mark.parametrize("length", [61, 62, 100, 10_000])
def test_fallback_over_60_characters_is_cut_to_60_with_an_ellipsis(length):
    line = ("abcdefghij" * 1001)[:length]
    title = first_prompt_title(line)
    assert len(title) == FIRST_PROMPT_TITLE_CHARS == 60
    assert title == line[:59] + ELLIPSIS


def test_fallback_cut_does_not_leave_a_space_before_the_ellipsis():
    line = "x" * 58 + " " + "y" * 10  # the 59th character, the last one kept, is a space
    assert first_prompt_title(line) == "x" * 58 + ELLIPSIS


def test_fallback_counts_characters_not_bytes():
    line = "🚀" * 80
    assert first_prompt_title(line) == "🚀" * 59 + ELLIPSIS


def test_fallback_ignores_everything_after_the_first_line():
    assert first_prompt_title("Short\n" + "x" * 500) == "Short"


@pytest.mark.parametrize("separator", ["\r\n", "\r", "\u2028", "\x0b"])
def test_fallback_recognises_every_line_break(separator):
    assert first_prompt_title(f"First{separator}Second") == "First"


@pytest.mark.parametrize("blank", ["", " ", "\n\n", "\t \r\n \u2028"])
def test_fallback_of_a_blank_prompt_is_none(blank):
    assert first_prompt_title(blank) is None


def test_fallback_is_deterministic():
    prompt = "  Summarise the incident report\tfor the on-call channel and ping whoever is next in the rota "
    assert len({first_prompt_title(prompt) for _ in range(5)}) == 1
    assert first_prompt_title(prompt) == "Summarise the incident report for the on-call channel and p" + ELLIPSIS
