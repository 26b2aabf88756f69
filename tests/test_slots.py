"""WorkSlots: the weighted, first-come-first-served gate the ingest threads share (how much heavy work runs at
once). Never more weight at once than there are slots; a heavy caller is not starved by light ones that came
after it; a caller interrupted while waiting leaves the line; nesting is refused rather than deadlocking."""

from __future__ import annotations

import random
import threading
import time

import pytest

from forensics.slots import WorkSlots


def _wait_for(cond, timeout: float = 5.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.001)


def test_weight_in_use_never_exceeds_the_slots() -> None:
    slots = WorkSlots(3)
    lock = threading.Lock()
    used, most, done = [0], [0], []
    rnd = random.Random(7)
    plan = [[rnd.choice([1, 1, 2, 3, 5]) for _ in range(30)] for _ in range(6)]

    def work(weights: list[int]) -> None:
        for w in weights:
            with slots.hold(w):
                n = min(w, 3)
                with lock:
                    used[0] += n
                    most[0] = max(most[0], used[0])
                time.sleep(0.0005)
                with lock:
                    used[0] -= n
        done.append(1)

    threads = [threading.Thread(target=work, args=(p,), daemon=True) for p in plan]
    for t in threads:
        t.start()
    end = time.monotonic() + 20
    for t in threads:
        t.join(max(0.0, end - time.monotonic()))
    assert len(done) == 6, "a worker never finished (deadlock)"
    assert most[0] == 3  # full use happened, and never more
    assert slots.free == 3


def test_a_heavy_caller_is_not_overtaken_by_later_light_ones() -> None:
    slots = WorkSlots(2)
    order: list[str] = []
    first_in = threading.Event()
    release_first = threading.Event()

    def first() -> None:
        with slots.hold(1):
            first_in.set()
            release_first.wait(5)

    def heavy() -> None:
        with slots.hold(2):
            order.append("heavy")

    def light() -> None:
        with slots.hold(1):
            order.append("light")

    a = threading.Thread(target=first)
    a.start()
    first_in.wait(5)
    b = threading.Thread(target=heavy)
    b.start()
    _wait_for(lambda: len(slots._queue) == 1)  # the heavy one waits for both slots
    c = threading.Thread(target=light)
    c.start()
    _wait_for(lambda: len(slots._queue) == 2)
    time.sleep(0.05)
    assert order == [], "the light caller took the free slot ahead of the heavy one"
    release_first.set()
    for t in (a, b, c):
        t.join(5)
    assert order == ["heavy", "light"]


def test_weight_is_capped_at_the_slots() -> None:
    slots = WorkSlots(2)
    seen = []

    def big() -> None:
        with slots.hold(5):
            seen.append(slots.free)

    t = threading.Thread(target=big, daemon=True)
    t.start()
    t.join(5)
    assert seen == [0], "a weight above the slots waited forever"
    assert slots.free == 2
    assert WorkSlots(0).slots == 1


def test_nesting_is_refused() -> None:
    slots = WorkSlots(2)
    with slots.hold(1):
        with pytest.raises(RuntimeError, match="nested"):
            with slots.hold(1):
                pass
    with slots.hold(2):  # the refused call took nothing
        assert slots.free == 0


def test_an_interrupted_waiter_leaves_the_line() -> None:
    slots = WorkSlots(1)
    holding, release = threading.Event(), threading.Event()

    def holder() -> None:
        with slots.hold():
            holding.set()
            release.wait(5)

    h = threading.Thread(target=holder)
    h.start()
    holding.wait(5)
    real_wait = slots._cond.wait
    calls = [0]

    def interrupted(timeout: float | None = None) -> bool:
        calls[0] += 1
        raise KeyboardInterrupt

    slots._cond.wait = interrupted  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        with slots.hold():
            pass
    slots._cond.wait = real_wait  # type: ignore[method-assign]
    assert calls[0] == 1 and len(slots._queue) == 0
    release.set()
    h.join(5)
    got = []

    def after() -> None:
        with slots.hold():
            got.append(1)

    t = threading.Thread(target=after)
    t.start()
    t.join(5)
    assert got == [1], "a caller after the interrupted one still waits"
