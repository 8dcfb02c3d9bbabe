"""Presentation helpers shared by every page: the one map from workload state to badge colour lives here."""

from __future__ import annotations

from django import template
from django.utils.html import format_html

from jobs import policy
from jobs.forms import join_args
from jobs.models import State
from jobs.services import opening

register = template.Library()

# The single place a state gets its colour (portal.css defines the `tone-*` classes) and a symbol, so a
# state never reads by colour alone.
STATE_TONES: dict[str, tuple[str, str]] = {
    State.QUEUED: ("waiting", "◷"),
    State.SUBMITTING: ("starting", "↑"),
    State.PENDING: ("starting", "…"),
    State.RUNNING: ("running", "▶"),
    State.SUCCEEDED: ("good", "✓"),
    State.FAILED: ("bad", "✕"),
    State.CANCELLED: ("neutral", "■"),
    State.PREEMPTED: ("bad", "⇣"),
}


# How an ended workload's state reads in a sentence ("This service failed"), not as a badge's label.
ENDED_WORDS: dict[str, str] = {
    State.SUCCEEDED: "finished on its own",
    State.FAILED: "failed",
    State.CANCELLED: "was cancelled",
    State.PREEMPTED: "was stopped so that the team that lent its GPUs could have them back",
}
_STATE_BY_LABEL = {label: value for value, label in State.choices}


@register.filter
def ended_words(state: str) -> str:
    """An ended state (its value or its label) as the end of "This service …"."""
    value = _STATE_BY_LABEL.get(state, state)
    return ENDED_WORDS.get(value, f"has ended ({str(state).lower()})")


SHORT_UID = 8  # hex digits: enough to tell a team's workloads of one name apart at a glance


@register.filter
def short_uid(uid: str) -> str:
    """The start of a workload's uid, shown beside its name: names may repeat (a re-run, a sweep), uids do
    not. The full uid is in the workload's address and its page."""
    return str(uid)[:SHORT_UID]


def state_tone(state: str) -> str:
    return STATE_TONES.get(state, ("neutral", ""))[0]


@register.simple_tag
def state_badge(state: str, position: int | None = None) -> str:
    tone, symbol = STATE_TONES.get(state, ("neutral", "•"))
    label = State(state).label if state in State.values else state
    if state == State.QUEUED and position:
        label = f"{label} #{position}"
    return format_html(
        '<span class="badge tone-{}" data-state="{}"><span aria-hidden="true">{}</span> {}</span>',
        tone,
        state,
        symbol,
        label,
    )


@register.filter
def eta(when) -> str:
    """A queued workload's estimated start for people: "about 40 min"."""
    from django.utils import timezone

    from jobs.services.queue.forecast import about

    if when is None:
        return "not within a week"
    return about(max(0.0, (when - timezone.now()).total_seconds()))


@register.filter
def percent(value: float | int | None, total: float | int | None) -> float:
    """value as a percentage of total, clamped to 0..100 (for bar widths)."""
    if not total or not value:
        return 0.0
    return round(max(0.0, min(100.0, 100.0 * float(value) / float(total))), 2)


@register.filter
def hours(value: float | None) -> str:
    """GPU-hours for people: short jobs keep enough digits not to read as zero."""
    value = value or 0.0
    if value == 0:
        return "0.00"
    if value < 0.1:
        return f"{value:.4f}"
    return f"{value:.2f}" if value < 1000 else f"{value:,.0f}"


@register.filter
def gpu_hours(seconds: float | None) -> str:
    return hours((seconds or 0.0) / 3600)


@register.filter
def duration(seconds: int | float | None) -> str:
    """A short human duration: 45 s, 12 min, 3 h 20 min, 2 d 4 h."""
    if seconds is None:
        return "—"
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds} s"
    minutes, _ = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


@register.filter
def shell_join(words: list[str] | None) -> str:
    """A list of arguments as the launch form shows it: split again the same way (shlex)."""
    return join_args(words)


@register.filter
def openable(workload, user) -> bool:
    """An Open button for this row: a live service the viewer may enter (rows are of the viewer's team)."""
    return not workload.is_final and policy.may_open_as_member(user, workload)


@register.filter
def open_path(workload) -> str:
    return opening.open_path(workload)


@register.filter
def open_link(workload) -> str:
    """Where an Open button goes (the portal's handoff when services have an origin of their own)."""
    return opening.open_link(workload)


@register.filter
def binary_size(value: int | None) -> str:
    """Bytes in binary units, as sizes are set (GiB): 0 B, 900 B, 4.0 KiB, 1.2 GiB; a dash for none."""
    if value is None:
        return "–"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return ""  # not reached
