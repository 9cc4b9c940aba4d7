"""Small server-rendered SVG charts of a subscription's last hour: events
handled and failed per minute (stacked bars) and the backlog (a line).
Only numbers reach the SVG; the template draws them (templates/chart.html)."""

from __future__ import annotations

from dataclasses import dataclass

from subscriptions.ops.console import MinuteStats

WIDTH = 240
HEIGHT = 40


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    height: float
    kind: str  # handled | failed
    title: str


@dataclass(frozen=True)
class Chart:
    bars: list[Bar]
    backlog: str  # polyline points, "" when no listener sampled it
    bar_width: float
    peak: int
    peak_backlog: int
    width: int = WIDTH
    height: int = HEIGHT


def chart(minutes: list[MinuteStats]) -> Chart:
    if not minutes:
        return Chart([], "", 0, 0, 0)
    slot = WIDTH / len(minutes)
    peak = max(m.handled + m.failed + m.dead for m in minutes)
    scale = HEIGHT / max(peak, 1)
    bars = []
    for index, minute in enumerate(minutes):
        x = index * slot
        label = minute.minute.strftime("%H:%M")
        handled = minute.handled * scale
        failed = (minute.failed + minute.dead) * scale
        if handled:
            bars.append(Bar(x, HEIGHT - handled, handled, "handled", f"{label}: {minute.handled:,} handled"))
        if failed:
            bars.append(
                Bar(x, HEIGHT - handled - failed, failed, "failed", f"{label}: {minute.failed + minute.dead:,} failed")
            )
    sampled = [(index, m.backlog) for index, m in enumerate(minutes) if m.backlog is not None]
    peak_backlog = max((backlog for _, backlog in sampled), default=0)
    backlog_scale = HEIGHT / max(peak_backlog, 1)
    backlog = " ".join(f"{(index + 0.5) * slot:.1f},{HEIGHT - value * backlog_scale:.1f}" for index, value in sampled)
    return Chart(bars, backlog, max(slot - 0.5, 0.5), peak, peak_backlog)
