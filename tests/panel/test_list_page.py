"""The list page at 100,000 loops: it counts only as far as a page needs, and
builds each row's addresses and cut texts in Python once, showing exactly what it showed before."""

from __future__ import annotations

import pytest
from django.template.defaultfilters import truncatechars
from django.urls import NoReverseMatch, clear_script_prefix, reverse, set_script_prefix
from django.utils import timezone

from loops.models import Loop, LoopState
from panel.queries import CappedPaginator, session_titles, target_session_choices
from panel.rows import loop_urls, loop_urls_maker, truncated
from tests.panel.test_pages import bulk_loops

pytestmark = pytest.mark.django_db


# --- the count stops where the page needs it to ---------------------------------------------------


def ordered_loops():
    return Loop.objects.order_by("next_at", "loop_id")


@pytest.mark.parametrize(
    "page, count, exact, pages",
    [
        ("1", 51, False, 6),  # 50 counted + 1: more than 50, a next page, no last one known
        ("5", 51, False, 6),
        ("6", 120, True, 12),  # rows 51-60 are past the first 50: the count goes to 500
        ("99", 120, True, 12),
        ("abc", 51, False, 6),  # the first page, as Paginator.get_page shows it
        (None, 51, False, 6),
        ("0", 120, True, 12),  # the last page, as Paginator.get_page shows it: counted exactly
        ("-3", 120, True, 12),
    ],
)
def test_the_count_stops_a_power_of_ten_past_the_page_asked_for(world, page, count, exact, pages):
    bulk_loops(120)
    paginator = CappedPaginator(ordered_loops(), 10, page=page, at_least=50)
    assert (paginator.count, paginator.exact, paginator.num_pages) == (count, exact, pages)
    shown = paginator.get_page(page)
    if not exact:
        assert paginator.floor == "50"
        assert shown.has_next()  # a capped count means more loops than the page asked for
    assert list(shown.object_list) == list(ordered_loops()[(shown.number - 1) * 10 :][:10])


def test_a_page_too_deep_for_the_steps_is_counted_exactly(world):
    bulk_loops(120)
    paginator = CappedPaginator(ordered_loops(), 10, page="1000", at_least=50, exact_beyond=1000)
    assert paginator.limit is None and (paginator.count, paginator.exact) == (120, True)
    assert paginator.get_page("1000").number == 12
    assert CappedPaginator(ordered_loops(), 10, page=str(10**30)).get_page(str(10**30)).number == 12


def test_a_long_list_says_more_than_and_numbers_pages_without_a_last_one(staff_client, world):
    bulk_loops(1_001)
    html = staff_client.get("/panel/").content.decode()
    assert "More than 1,000 loops" in html and "Page 1</span>" in html
    assert 'href="?page=2" rel="next"' in html
    assert "More than 1,000 loops match" in staff_client.get("/panel/?q=Prompt").content.decode()
    html = staff_client.get("/panel/?page=21").content.decode()  # past 1,000: counted to 10,000
    assert "1001 loops" in html and "Page 21 of 21" in html and "loop_001000" in html
    Loop.objects.filter(loop_id="loop_001000").update(state=LoopState.COMPLETED)
    html = staff_client.get("/panel/").content.decode()
    assert "1000 loops" in html and "Page 1 of 20" in html


# --- row values computed once, as the template tags and filters would ---------------------------

ODD_IDS = [
    "loop_abc123",
    "lööp ✓ 漢字",
    "a b%20c",
    "a?b#c&d=e",
    'it\'s "quoted" <b>',
    "!$&'()*+,;=~:@",
    "back\\slash",
    "x" * 255,
]
NAMES = {"page": "detail", "delete": "delete", "edit": "edit", "pause": "pause", "resume": "resume"}
NAMES |= {"run_now": "run_now", "retry": "retry"}


@pytest.mark.parametrize("prefix", ["/", "/behind a proxy/"])
def test_row_addresses_are_what_reverse_makes(prefix):
    set_script_prefix(prefix)
    try:
        make = loop_urls_maker()
        for loop_id in ODD_IDS:
            for attribute, name in NAMES.items():
                expected = reverse(f"panel:{name}", args=[loop_id])
                assert getattr(make(loop_id), attribute) == getattr(loop_urls(loop_id), attribute) == expected
        for impossible in ["a/b", ""]:
            with pytest.raises(NoReverseMatch):
                make(impossible)
    finally:
        clear_script_prefix()


@pytest.mark.parametrize(
    "text",
    ["", "short", "x" * 89, "x" * 90, "x" * 91, "x" * 600, "y" * 601, "é" * 95, "e\u0301" * 120, "ﬁ" * 700, "a\nb\tc"],
)
@pytest.mark.parametrize("length", [90, 600])
def test_cut_texts_are_what_truncatechars_shows(text, length):
    assert truncated(text, length) == truncatechars(text, length)


def test_the_target_filter_reads_titles_with_the_targets(world):
    for session_id in ["ses_a", "ses_b", "ses_untitled", "ses_unknown", "self", "new"]:
        Loop.objects.create(
            loop_id=f"loop_{session_id}",
            prompt="p",
            kind="every",
            every_seconds=60,
            session_id=session_id,
            created_by_session_id="ses_global",
            created_at=timezone.now(),
            state=LoopState.SCHEDULED,
        )
    choices = target_session_choices()
    assert [session_id for session_id, _ in choices] == ["ses_a", "ses_b", "ses_unknown", "ses_untitled"]
    titles = session_titles([session_id for session_id, _ in choices])
    assert choices == [(session_id, titles.get(session_id)) for session_id, _ in choices]
    assert dict(choices) == {
        "ses_a": "Release review",
        "ses_b": "Nightly data sync",
        "ses_unknown": None,
        "ses_untitled": None,
    }
