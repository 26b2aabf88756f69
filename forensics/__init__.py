"""forensics: read logs off a broken GPU host, find the incident, write the postmortem."""

import os

__version__ = "0.1.0"

# polars allocates with jemalloc, which by default gives each of our threads (readers, parsers, sinks, polars'
# pool) an arena of its own that keeps freed pages for a while: one shared arena measured ~8% less peak RSS
# and no loss of speed on the benchmark corpus. Read when polars loads, so only if nothing imported it first;
# a value the user set is kept.
os.environ.setdefault("_RJEM_MALLOC_CONF", "narenas:1")
