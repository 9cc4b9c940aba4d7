"""--batch auto: claim sizes follow the measured handler times."""

from __future__ import annotations

from subscriptions.delivery.batching import BATCH_SECONDS, MAX_AUTO, BatchSize


def test_a_fixed_size_stays_fixed():
    batch = BatchSize(7)
    batch.observe("t", 10.0)
    assert batch.size(["t"]) == 7


def test_auto_starts_at_one_then_fits_about_batch_seconds_of_work():
    batch = BatchSize(None)
    assert batch.size(["t"]) == 1
    batch.observe("t", BATCH_SECONDS / 10)
    assert batch.size(["t"]) == 10


def test_auto_is_bounded_on_both_sides():
    batch = BatchSize(None)
    batch.observe("quick", 0.0)
    batch.observe("slow", BATCH_SECONDS * 20)
    assert batch.size(["quick"]) == MAX_AUTO
    assert batch.size(["slow"]) == 1


def test_auto_sizes_for_the_slowest_known_tag_of_a_claim():
    batch = BatchSize(None)
    batch.observe("quick", BATCH_SECONDS / 50)
    batch.observe("slow", BATCH_SECONDS / 2)
    assert batch.size(["quick", "slow", "never-seen"]) == 2
    assert batch.size(["never-seen"]) == 1


def test_auto_follows_a_handler_that_slows_down():
    batch = BatchSize(None)
    batch.observe("t", BATCH_SECONDS / 100)
    sizes = []
    for _ in range(30):
        batch.observe("t", BATCH_SECONDS / 2)
        sizes.append(batch.size(["t"]))
    assert sizes == sorted(sizes, reverse=True) and sizes[-1] == 2
