"""forensics: read logs off a broken GPU host, find the incident, write the postmortem."""

import os

__version__ = "0.1.0"

# polars allocates with jemalloc, which by default gives each of our threads (readers, parsers, sinks, polars'
# pool) an arena of its own and keeps freed pages for 10 s. One shared arena, freed pages returned after 100 ms
# by jemalloc's own background thread (off our threads' path) and no second "muzzy" stage: on the 1 GiB
# benchmark corpus, with the glibc cap below, peak RSS 410-420 -> 370-385 MiB at the same speed (decay 0
# measured 340 MiB but 75% slower: every free became a syscall). Read when polars loads, so only if nothing imported it first; a value the user
# set is kept.
os.environ.setdefault("_RJEM_MALLOC_CONF", "narenas:1,dirty_decay_ms:100,muzzy_decay_ms:0,background_thread:true")


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
