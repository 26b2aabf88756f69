"""Format `glog`: glog / c10 lines (PyTorch, NCCL, kubelet): `[rank1]:[E0525 20:17:19.059515605 ProcessGroupNCCL.cpp:632] msg`; no year.

glog pads the month (`E0525`); PyTorch's own c10 logger, which its wheels use (they are built without glog),
prints `(tm_mon + 1) * 100 + tm_mday`: `E525` in May, `E1225` in December (c10/util/Logging.cpp
MessageLogger). Both are read. PyTorch's Python loggers (torch._logging's formatter: `torch.distributed.elastic`,
dynamo) print the same prefix with the module's path, `E0525 20:17:23.402000 48200
site-packages/torch/distributed/elastic/multiprocessing/api.py:869] msg`: the identifier is the file and line
(`api.py:869`), as c10 prints it.
"""

from .base import Continuation, LineFormat, Stamp

FORMAT = LineFormat(
    name='glog',
    description='glog / c10 lines (PyTorch, NCCL, kubelet): `[rank1]:[E0525 20:17:19.059515605 ProcessGroupNCCL.cpp:632] msg`; no year',
    pattern='^(?:\\[rank(?P<rank>\\d+)\\]:)?\\[?(?P<stamp>(?P<level>[IWEF])(?P<mon>\\d{1,2})(?P<day>\\d{2}) (?P<time>\\d{2}:\\d{2}:\\d{2}\\.\\d+))\\s+(?:(?P<pid>\\d+) )?(?:[\\w.\\-]+/)*(?P<ident>[\\w.\\-]+:\\d+)\\] ?(?P<msg>.*)$',
    stamp=Stamp.SYSLOG_NOYEAR,
    priority=11,
    continuation=Continuation.ANY,
    example='[rank1]:[E0525 20:17:19.059515605 ProcessGroupNCCL.cpp:632] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=78, OpType=BROADCAST, NumelIn=80, NumelOut=80, Timeout(ms)=600000) ran for 600096 milliseconds before timing out.',
)
