"""How much heavy work runs at once, across every ingest thread.

Two sources stream at once, each on a parse thread with a sink thread one batch behind it, so four phases could
hold their transient buffers together on two cores: the peak of an ingest is where the biggest meet (a source's
streaming write of its records with the other's parse and matching flush), and a longer input meets more such
moments. Each phase holds slots for
its weight while it runs; the others wait, in the order they came (a heavy phase is not starved by light ones).
No phase may wait for anything else while it holds slots, and a thread holds one grant at a time: no deadlock.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager


class WorkSlots:
    """A counting semaphore with weights, granted first come, first served."""

    def __init__(self, slots: int) -> None:
        self.slots = max(1, slots)
        self._free = self.slots
        self._queue: deque[object] = deque()
        self._cond = threading.Condition()
        self._held = threading.local()

    @contextmanager
    def hold(self, weight: int = 1) -> Iterator[None]:
        """Run the block once `weight` slots (at most all of them) are free and every earlier caller has had its
        turn. Nesting would wait on itself, so it is refused."""
        if self.holding:
            raise RuntimeError("WorkSlots.hold nested in one thread: it would wait on itself")
        n = min(max(1, weight), self.slots)
        me = object()
        with self._cond:
            self._queue.append(me)
            try:
                while self._queue[0] is not me or self._free < n:
                    self._cond.wait()
            except BaseException:  # interrupted while waiting: leave the line, or all behind would wait forever
                self._queue.remove(me)
                self._cond.notify_all()
                raise
            self._queue.popleft()
            self._free -= n
            self._cond.notify_all()  # the next in line may fit in what is left
        self._held.on = True
        try:
            yield
        finally:
            self._held.on = False
            with self._cond:
                self._free += n
                self._cond.notify_all()

    @property
    def holding(self) -> bool:
        """Whether the calling thread holds slots now."""
        return getattr(self._held, "on", False)

    @property
    def free(self) -> int:
        with self._cond:
            return self._free
