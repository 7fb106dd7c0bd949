"""spec §7 title fold over durable fields: user-renamed -> generated -> first-prompt fallback.

The last rung of the spec's fold (the session ID) is a display rule for consumers, so it is
not applied here: a session without any of the three has no title.
"""

from __future__ import annotations

FIRST_PROMPT_TITLE_CHARS = 60


def first_prompt_title(first_prompt: str) -> str | None:
    """Deterministic: the first non-blank line, whitespace collapsed, cut to 60 characters."""
    for line in first_prompt.splitlines():
        words = " ".join(line.split())
        if words:
            if len(words) <= FIRST_PROMPT_TITLE_CHARS:
                return words
            return words[: FIRST_PROMPT_TITLE_CHARS - 1].rstrip() + "…"
    return None


def first_prompt_kept(prompt: str) -> str:
    """What the embedded host stores as the first prompt of a session it makes for a `new` run: the
    title the prompt gives, the only thing read from it (spec §7's last rung). It folds to itself,
    so every title shown is the one the whole prompt gives; the whole prompt is the session's first
    inbox message (and its run's revision prompt), not stored a second time per occurrence."""
    return first_prompt_title(prompt) or ""


def fold_title(*, user_title: str = "", generated_title: str = "", first_prompt: str = "") -> str | None:
    for title in (user_title, generated_title):
        if title and title.strip():
            return title.strip()
    return first_prompt_title(first_prompt or "")
