"""The soak's end checks, as plain functions over what the run left behind:

- the journal (SOAK_CHANGES): the changes that really committed;
- the producers' side files: what each transaction was, how it ended, and when
  a commit returned;
- the delivery records of the handler plugin (start / done / fail lines);
- the faults injected (kills with pids and times, server restarts);
- what is left in EVENT_LOG.

A redelivery is justified only by a fault: an earlier attempt of the event
that failed (the handler raised), or that was cut off by a kill of its worker
or by a server restart between its start and the next attempt's start.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

# (table, actions, tag, --when condition, the same condition on the change number)
SUBSCRIPTIONS: tuple[tuple[str, str, str, str | None, Callable[[int], bool]], ...] = (
    ("SOAK_A", "IUD", "soak", None, lambda no: True),
    ("SOAK_A", "I", "soak2", None, lambda no: True),
    ("SOAK_B", "ID", "soak2", None, lambda no: True),
    ("SOAK_B", "U", "soak2", "MOD(NEW.CHANGE_NO, 3) <> 0", lambda no: no % 3 != 0),
)
KILL_SLACK = 0.05  # a start line may be written just after we read the clock for a kill
EXAMPLES = 5

Key = tuple[str, str, str, int]  # tag, table, action, change number the event carries


@dataclass(frozen=True)
class Change:
    no: int
    table: str
    action: str
    row: int
    prev: int | None
    producer: int = 0
    txn: int = 0

    @property
    def match(self) -> int:
        """The CHANGE_NO its events carry: the new one, or for a delete the deleted row's."""
        return self.prev if self.action == "D" else self.no  # type: ignore[return-value]


def expected_tags(change: Change) -> list[str]:
    return [
        tag
        for table, actions, tag, _, when in SUBSCRIPTIONS
        if table == change.table and change.action in actions and when(change.no)
    ]


@dataclass
class Delivery:
    event: int
    attempt: int
    pid: int
    sub: int
    key: Key
    old: int | None
    start: float
    row: int = 0
    end: str | None = None  # "d" done, "f" failed, None cut off
    end_at: float | None = None


@dataclass
class Fault:
    at: float
    until: float
    pid: int | None  # None: the server restart (every attachment)
    kind: str  # "kill" or "restart"


@dataclass
class Report:
    failures: list[str] = field(default_factory=list)
    figures: dict[str, object] = field(default_factory=dict)
    causes: Counter = field(default_factory=Counter)

    def fail(self, what: str, examples: Iterable[object] = ()) -> None:
        shown = list(examples)[:EXAMPLES]
        self.failures.append(what + (f"; e.g. {shown}" if shown else ""))


def deliveries_from(lines: Iterable[dict]) -> list[Delivery]:
    """Pair each attempt's start line with its done/fail line (same event, pid, attempt)."""
    found: dict[tuple[int, int, int], Delivery] = {}
    for line in lines:
        ident = (line["e"], line["p"], line["a"])
        if line["ph"] == "s":
            found[ident] = Delivery(
                line["e"],
                line["a"],
                line["p"],
                line["s"],
                (line["g"], line["tb"], line["x"], line["k"]),
                line["o"],
                line["t"],
                line["i"],
            )
        elif ident in found:
            found[ident].end, found[ident].end_at = line["ph"], line["t"]
    return sorted(found.values(), key=lambda d: d.start)


# -- the checks ---------------------------------------------------------------------------


def check_journal(report: Report, journal: list[Change], txns: list[dict]) -> dict[int, float | None]:
    """Producers and journal agree; returns change number -> commit time (None if unknown)."""
    committed = {c.no for c in journal}
    commit_time: dict[int, float | None] = {}
    claimed: set[int] = set()
    rolled_back = Counter()
    missing, resurrected = [], []
    for txn in txns:
        numbers = [change[0] for change in txn["ch"]]
        if txn["o"] == "c":
            claimed.update(numbers)
            missing += [n for n in numbers if n not in committed]
            for n in numbers:
                commit_time[n] = txn["t"]
        else:
            rolled_back[txn["why"].split(":")[0]] += len(numbers)
            resurrected += [n for n in numbers if n in committed]
    if missing:
        report.fail(f"{len(missing)} change(s) reported committed are not in the journal", missing)
    if resurrected:
        report.fail(f"{len(resurrected)} rolled-back change(s) are in the journal", resurrected)
    extra = committed - claimed
    if extra:
        report.fail(f"{len(extra)} journal change(s) no producer committed", sorted(extra))
    report.figures["changes"] = len(committed)
    report.figures["rolled_back"] = sum(rolled_back.values())
    report.figures["rolled_back_why"] = dict(rolled_back)
    report.figures["unknown_commits"] = sum(1 for t in txns if t["why"].startswith("unknown"))
    return commit_time


def check_events(
    report: Report, journal: list[Change], txns: list[dict], deliveries: list[Delivery]
) -> dict[int, Change]:
    """Every committed change produced exactly its subscribed events, each handled;
    rolled-back changes produced none. Returns event id -> its change."""
    expected: dict[Key, Change] = {}
    for change in journal:
        for tag in expected_tags(change):
            expected[(tag, change.table, change.action, change.match)] = change
    rolled_back = {(c[1], c[2], c[4] if c[2] == "D" else c[0]) for txn in txns if txn["o"] != "c" for c in txn["ch"]}

    events_of_key: dict[Key, set[int]] = defaultdict(set)
    key_of_event: dict[int, Key] = {}
    handled: set[int] = set()
    identity, wrong_old = [], []
    for d in deliveries:
        if key_of_event.setdefault(d.event, d.key) != d.key:
            identity.append(d.event)
        events_of_key[d.key].add(d.event)
        if d.end == "d":
            handled.add(d.event)
        change = expected.get(d.key)
        if change is not None and d.key[2] != "I" and d.old != change.prev:
            wrong_old.append((d.event, d.old, change.prev))
    if identity:
        report.fail(f"{len(identity)} event(s) delivered with different contents", identity)
    if wrong_old:
        report.fail(f"{len(wrong_old)} event(s) with wrong old values (event, got, expected)", wrong_old)

    doubled = {key: ids for key, ids in events_of_key.items() if len(ids) > 1}
    unexpected = [key for key in events_of_key if key not in expected]
    from_rollback = [k for k in [*unexpected, *doubled] if (k[1], k[2], k[3]) in rolled_back]
    if from_rollback:
        report.fail(f"{len(from_rollback)} event(s) from rolled-back changes", from_rollback)
    stray = [k for k in unexpected if (k[1], k[2], k[3]) not in rolled_back]
    if stray:
        report.fail(f"{len(stray)} event(s) match no committed change", stray)
    doubled_committed = [k for k in doubled if k in expected and (k[1], k[2], k[3]) not in rolled_back]
    if doubled_committed:
        report.fail(
            f"{len(doubled_committed)} change(s) produced two events for one subscription",
            [(k, sorted(doubled[k])) for k in doubled_committed],
        )

    never = [key for key in expected if key not in events_of_key]
    if never:
        report.fail(f"{len(never)} subscribed event(s) of committed changes never delivered", never)
    unhandled = sorted(set(key_of_event) - handled)
    if unhandled:
        report.fail(f"{len(unhandled)} delivered event(s) never handled to completion", unhandled)
    report.figures["events"] = len(expected)
    report.figures["handled"] = len(handled)
    return {event: expected[key] for event, key in key_of_event.items() if key in expected}


def _cause(d: Delivery, until: float, faults: list[Fault]) -> str | None:
    """The first fault that can have cut ``d`` off before the next attempt started."""
    for fault in faults:
        if fault.pid is None:
            if fault.at <= until and fault.until >= d.start:
                return fault.kind
        elif fault.pid == d.pid and d.start - KILL_SLACK <= fault.at <= until:
            return fault.kind
    return None


def check_redeliveries(report: Report, deliveries: list[Delivery], faults: list[Fault]) -> None:
    """An event is handled more than once only when an attempt was cut off by a fault."""
    faults = sorted(faults, key=lambda f: f.at)
    by_event: dict[int, list[Delivery]] = defaultdict(list)
    for d in deliveries:
        by_event[d.event].append(d)
    unexplained, attempts, lost = [], [], []
    duplicates = cut_off = retried = 0
    for event, ds in by_event.items():
        if any(a.attempt >= b.attempt for a, b in zip(ds, ds[1:])):
            attempts.append((event, [d.attempt for d in ds]))
        done = [d for d in ds if d.end == "d"]
        duplicates += len(done) > 1
        for d, following in zip(ds, ds[1:]):
            if d.end == "f":
                retried += 1
                continue
            cut_off += d.end is None
            cause = _cause(d, following.start, faults)
            if cause is None:
                unexplained.append((event, d.attempt, d.pid, d.end))
            elif d.end == "d":
                report.causes[cause] += 1
        if ds[-1].end is None and done:
            lost.append((event, [(d.attempt, d.pid, d.end) for d in ds]))
    if unexplained:
        report.fail(
            f"{len(unexplained)} redelivery(ies) without a kill or restart to explain them "
            "(event, attempt, pid, outcome)",
            unexplained,
        )
    if attempts:
        report.fail(f"{len(attempts)} event(s) whose attempt numbers did not increase", attempts)
    if lost:
        report.fail(f"{len(lost)} event(s) acknowledged although their last attempt was cut off", lost)
    report.figures["duplicates"] = duplicates
    report.figures["cut_off"] = cut_off
    report.figures["retried_failures"] = retried


class _MinCount:
    """Segment tree over event ranks: minimum commit time and count of the
    events not handled yet, over a prefix of event ids."""

    def __init__(self, values: list[float]) -> None:
        self.size = 1 << max(len(values) - 1, 0).bit_length()
        self.min = [math.inf] * (2 * self.size)
        self.count = [0] * (2 * self.size)
        for i, value in enumerate(values):
            self.min[self.size + i], self.count[self.size + i] = value, 1
        for i in range(self.size - 1, 0, -1):
            self._pull(i)

    def _pull(self, i: int) -> None:
        self.min[i] = min(self.min[2 * i], self.min[2 * i + 1])
        self.count[i] = self.count[2 * i] + self.count[2 * i + 1]

    def remove(self, i: int) -> None:
        i += self.size
        self.min[i], self.count[i] = math.inf, 0
        while i > 1:
            i //= 2
            self._pull(i)

    def prefix(self, end: int) -> tuple[float, int]:
        """(min, count) over ranks [0, end)."""
        low, high, best, count = self.size, self.size + end, math.inf, 0
        while low < high:
            if low & 1:
                best, count, low = min(best, self.min[low]), count + self.count[low], low + 1
            if high & 1:
                high -= 1
                best, count = min(best, self.min[high]), count + self.count[high]
            low //= 2
            high //= 2
        return best, count


def check_order(
    report: Report, deliveries: list[Delivery], change_of_event: dict[int, Change], commit_time: dict[int, float | None]
) -> None:
    """Ordered mode: each subscription handles its events in EVENT_ID order.

    Event ids are given out when a change is made, not when it commits, so an
    event may legitimately be handled before a lower id that was not committed
    yet. It is a violation when the lower id had committed (its producer's
    commit had returned) before the higher one was claimed. A claim of the
    subscription's next event comes after the previous attempt's start (the
    head is held until acknowledged), which bounds the claim time from below.
    """
    reordered, violations = 0, []
    by_sub: dict[int, list[Delivery]] = defaultdict(list)
    for d in deliveries:
        by_sub[d.sub].append(d)
    for sub, ds in by_sub.items():
        first_done: dict[int, int] = {}
        for index, d in enumerate(ds):
            if d.end == "d":
                first_done.setdefault(d.event, index)
        ids = sorted(first_done)
        rank = {event: i for i, event in enumerate(ids)}

        def committed_at(event: int) -> float:
            change = change_of_event.get(event)
            time_ = commit_time.get(change.no) if change else None
            return math.inf if time_ is None else time_

        tree = _MinCount([committed_at(event) for event in ids])
        for event in sorted(first_done, key=lambda e: ds[first_done[e]].end_at):
            index = first_done[event]
            claimed_after = ds[index - 1].start if index else -math.inf
            earliest, waiting = tree.prefix(rank[event])
            reordered += waiting > 0
            if earliest < claimed_after:
                violations.append((sub, event, round(claimed_after - earliest, 3)))
            tree.remove(rank[event])
    if violations:
        report.fail(
            f"{len(violations)} event(s) handled before an earlier event of their subscription "
            "that had already committed (sub, event, seconds)",
            violations,
        )
    report.figures["reordered_by_commit"] = reordered


def check_key_order(report: Report, deliveries: list[Delivery]) -> None:
    """--key-order: the events of one row (table, tag, key) are handled one at a
    time in EVENT_ID order. Changes of one row commit in order (the row lock),
    so every attempt of an event ends before any attempt of the next one starts."""
    spans: dict[tuple, dict[int, list[float]]] = defaultdict(dict)
    for d in deliveries:
        span = spans[(d.key[1], d.key[0], d.row)].setdefault(d.event, [d.start, d.start])
        span[0] = min(span[0], d.start)
        span[1] = max(span[1], d.end_at or d.start)
    overlaps = []
    for group, events in spans.items():
        ordered = sorted(events.items())
        for (first, (_, first_end)), (second, (second_start, _)) in zip(ordered, ordered[1:]):
            if second_start < first_end:
                overlaps.append((group, first, second, round(first_end - second_start, 3)))
    if overlaps:
        report.fail(
            f"{len(overlaps)} event(s) of a row started before the row's previous event was done "
            "((table, tag, key), earlier, later, seconds)",
            overlaps,
        )


def check_leftovers(report: Report, rows: list[tuple]) -> None:
    """rows: (EVENT_ID, holder of its span, DEAD_AT) still in EVENT_LOG."""
    claimed = sum(1 for _, owner, dead in rows if owner and not dead)
    dead = sum(1 for _, _, dead in rows if dead)
    pending = len(rows) - claimed - dead
    report.figures.update(pending=pending, claimed=claimed, dead=dead)
    if rows:
        report.fail(f"{len(rows)} event(s) left in EVENT_LOG (pending {pending}, claimed {claimed}, dead {dead})", rows)


def run_checks(
    journal: list[Change],
    txns: list[dict],
    lines: Iterable[dict],
    faults: list[Fault],
    leftovers: list[tuple],
    ordered: bool,
    key_order: bool = False,
) -> Report:
    report = Report()
    deliveries = deliveries_from(lines)
    commit_time = check_journal(report, journal, txns)
    change_of_event = check_events(report, journal, txns, deliveries)
    check_redeliveries(report, deliveries, faults)
    if ordered:
        check_order(report, deliveries, change_of_event, commit_time)
    if key_order:
        check_key_order(report, deliveries)
    check_leftovers(report, leftovers)
    report.figures["deliveries"] = len(deliveries)
    return report
