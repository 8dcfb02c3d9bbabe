"""Log streams stay bounded: lines shown as a terminal would (progress bars), cut when endless, streams
ended at their deadline, and caps on how many one user, one process and the whole site follow at once
(the per-user and site-wide caps counted in PostgreSQL; tests/integration/test_log_stream_burst.py shows
them holding across processes with Redis stopped)."""

from __future__ import annotations

import contextlib
import itertools
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from jobs.models import LogFollowSlot
from jobs.services.logs.container_logs import shown_line, shown_text, split_stream
from jobs.services.logs.follow_slots import HeldStream, TooManyStreams, stream_slot


def test_a_progress_bar_shows_its_last_state():
    assert shown_line("epoch 1:  10%\repoch 1:  50%\repoch 1: 100%") == "epoch 1: 100%"
    assert shown_line("windows line ending\r") == "windows line ending"
    assert shown_text("a\r\nb 1%\rb 2%\nc") == "a\nb 2%\nc"


def test_a_long_line_is_cut_and_says_so(settings):
    settings.LOG_MAX_LINE_CHARS = 100
    line = shown_line("x" * 10_000)
    assert line.startswith("x" * 100)
    assert line.endswith("[line cut at 100 characters]")
    assert len(line) < 200


def test_a_stream_of_progress_updates_without_newline_holds_little():
    updates = (f"\rstep {i:>7}".encode() for i in range(200_000))  # ~2.6 MB, never a newline
    assert list(split_stream(itertools.chain(updates, [b" done\n", b"next\n"]), max_chars=100)) == [
        "step  199999 done",
        "next",
    ]


def test_an_endless_line_is_cut_once_and_the_next_line_still_comes():
    chunks = itertools.chain((b"a" * 65536 for _ in range(64)), [b"aaa\nafter\n"])  # a 4 MB line
    lines = list(split_stream(chunks, max_chars=1000))
    assert len(lines) == 2
    assert lines[0].endswith("[line cut at 1000 characters]")
    assert lines[1] == "after"


def test_a_stream_ends_at_its_deadline_even_while_lines_keep_coming():
    endless = (b"tick\n" for _ in itertools.count())
    started = time.monotonic()
    lines = list(split_stream(endless, max_chars=100, deadline=time.monotonic() + 0.3))
    assert 0.3 <= time.monotonic() - started < 2
    assert lines
    assert set(lines) == {"tick"}


@pytest.fixture
def caps(settings, db):
    settings.LOG_FOLLOW_MAX_PER_USER = 2
    settings.LOG_FOLLOW_MAX_TOTAL = 3
    settings.LOG_FOLLOW_MAX_PER_PROCESS = 10
    return settings


def test_one_user_gets_at_most_their_share_and_others_still_get_theirs(caps):
    with contextlib.ExitStack() as held:
        held.enter_context(stream_slot(user_id=101, seconds=60))
        held.enter_context(stream_slot(user_id=101, seconds=60))
        with pytest.raises(TooManyStreams, match="2 log streams open"):
            held.enter_context(stream_slot(user_id=101, seconds=60))
        held.enter_context(stream_slot(user_id=202, seconds=60))
        with pytest.raises(TooManyStreams, match="as many log streams as it can"):
            held.enter_context(stream_slot(user_id=303, seconds=60))  # the site-wide cap: 3
    # Closed streams give their slots back.
    with stream_slot(user_id=101, seconds=60), stream_slot(user_id=101, seconds=60):
        pass


def test_a_process_keeps_threads_for_pages(caps):
    caps.LOG_FOLLOW_MAX_PER_PROCESS = 1
    with stream_slot(user_id=1, seconds=60), pytest.raises(TooManyStreams), stream_slot(user_id=2, seconds=60):
        pass


def test_a_held_stream_gives_its_slot_back_when_closed_unread(caps):
    caps.LOG_FOLLOW_MAX_PER_USER = 1
    first = HeldStream(iter(["a"]), user_id=7, seconds=60)
    with pytest.raises(TooManyStreams):
        HeldStream(iter(["b"]), user_id=7, seconds=60)
    first.close()  # the client went away before the first line
    second = HeldStream(iter(["b"]), user_id=7, seconds=60)
    assert list(second) == ["b"]  # read to the end: closed by itself
    HeldStream(iter(["c"]), user_id=7, seconds=60).close()


def test_a_slot_left_by_a_dead_process_frees_itself_at_its_deadline(caps):
    caps.LOG_FOLLOW_MAX_PER_USER = 1
    with stream_slot(user_id=9, seconds=60):
        assert LogFollowSlot.objects.filter(user_id=9).count() == 1
        with pytest.raises(TooManyStreams):
            HeldStream(iter(["b"]), user_id=9, seconds=60)
    assert not LogFollowSlot.objects.exists()  # closed: given back at once
    # A process killed while streaming never gives its slot back; it counts until its deadline only.
    LogFollowSlot.objects.create(user_id=9, expires_at=timezone.now() + timedelta(seconds=30))
    with pytest.raises(TooManyStreams):
        HeldStream(iter(["b"]), user_id=9, seconds=60)
    LogFollowSlot.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    assert list(HeldStream(iter(["b"]), user_id=9, seconds=60)) == ["b"]
    assert not LogFollowSlot.objects.exists()


def test_a_container_that_printed_nothing_yet_shows_an_empty_log_not_an_error():
    # The Kubernetes client answers an empty log body with None; the logs panel must show nothing, calmly.
    assert shown_text(None) == ""
    assert shown_text("") == ""
