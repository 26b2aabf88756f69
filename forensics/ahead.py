"""An iterator run one item ahead on its own thread: the producer (file reads, hashing, polars: all release the
GIL) works on the next item while the caller works on this one. At most one item waits, so memory stays
bounded; an exception in the producer is raised in the caller's thread; closing the iterator early stops it."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")


def ahead(make: Callable[[], Iterable[T]], name: str = "ahead") -> Iterator[T]:
    q: queue.Queue = queue.Queue(maxsize=1)
    stop = threading.Event()

    def put(item: tuple) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for x in make():
                if not put(("item", x)):
                    return
            put(("end", None))
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
            put(("error", e))

    worker = threading.Thread(target=produce, name=name, daemon=True)
    worker.start()
    try:
        while True:
            kind, x = q.get()
            if kind == "end":
                return
            if kind == "error":
                raise x
            yield x
    finally:
        stop.set()
        worker.join()
