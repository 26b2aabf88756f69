"""forensics: read logs off a broken GPU host, find the incident, write the postmortem."""

import os
import sys

__version__ = "0.1.0"

# polars allocates with jemalloc, which by default gives each of our threads (readers, parsers, sinks, polars'
# pool) an arena of its own and keeps freed pages for 10 s. One shared arena, freed pages returned after 100 ms
# by jemalloc's own background thread (off our threads' path) and no second "muzzy" stage: on the 1 GiB
# benchmark corpus, with the glibc cap below, peak RSS 410-420 -> 370-385 MiB at the same speed (decay 0
# measured 340 MiB but 75% slower: every free became a syscall). Queries keep freed pages for 5 s (`_decay_ms`).
# Read when polars loads, so only if nothing imported it first; a value the user set is kept.


def _decay_ms(argv: list[str]) -> int:
    """How long jemalloc keeps freed pages: 100 ms, but 5 s for a `forensics` command other than `ingest` and
    `rescan` (those read input of any size, and their peak memory is bounded). A query frees and takes again a
    window's worth of memory at a time: returning it between windows cost a day's timeline (4.2 M records) 0.8 s
    of page faults, a quarter of its time, for the same peak RSS."""
    if not argv or os.path.basename(argv[0]) != "forensics":
        return 100
    args = iter(argv[1:])
    for a in args:
        if a == "--store":
            next(args, None)
        elif not a.startswith("-"):
            return 100 if a in ("ingest", "rescan") else 5000
    return 100


os.environ.setdefault("_RJEM_MALLOC_CONF", f"narenas:1,dirty_decay_ms:{_decay_ms(sys.argv)},muzzy_decay_ms:0,"
                                           "background_thread:true")

def _cap_glibc_arenas(n: int = 2) -> None:
    """Python's own allocations (glibc malloc) get up to 8 arenas per core, one per busy thread, each holding
    its freed memory: cap them (M_ARENA_MAX; the environment variable MALLOC_ARENA_MAX is read too late)."""
    if os.environ.get("MALLOC_ARENA_MAX"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-8, n)  # M_ARENA_MAX
    except (OSError, AttributeError):  # not glibc: nothing to cap
        pass


_cap_glibc_arenas()
