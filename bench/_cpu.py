"""CPU time per call, split between the client and the PostgreSQL server, so that the shared
cores of a small machine do not hide where a call's time goes.

The server's CPU is that of every ``postgres`` process on the machine (the benchmark's
throwaway cluster is the only one while it runs): the user and system time of each process
alive, plus what the postmaster has reaped from backends that ended (``/proc/<pid>/stat``,
fields 14-17). The client's is this process's own (its threads included) or, for pgbench, the
children it waited for.
"""

from __future__ import annotations

import os
import resource
from typing import Dict, Iterator, List, Tuple

_TICK = os.sysconf("SC_CLK_TCK")


def proc_stats() -> Iterator[Tuple[int, str, List[str]]]:
    """Each process's pid, command and ``/proc/<pid>/stat`` fields after it (field 3 first)."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:  # ended meanwhile, or not ours to read
            continue
        name, fields = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :]
        yield int(pid), name, fields.split()


def server_cpu_s() -> float:
    """Seconds of CPU used so far by the machine's ``postgres`` processes (utime, stime, cutime
    and cstime: fields 14-17)."""
    return sum(sum(map(int, f[11:15])) for _, c, f in proc_stats() if c == "postgres") / _TICK


def client_cpu_s(children: bool) -> float:
    """Seconds of CPU used so far by this process, or by the children it has waited for."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN if children else resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class CpuMeter:
    """The server's and the client's CPU from its creation to :meth:`per_call`."""

    def __init__(self, children: bool = False) -> None:
        self.children = children
        self.server = server_cpu_s()
        self.client = client_cpu_s(children)

    def per_call(self, calls: int) -> Dict[str, float]:
        server = server_cpu_s() - self.server
        client = client_cpu_s(self.children) - self.client
        n = max(calls, 1)
        return {"server_cpu_us": server / n * 1e6, "client_cpu_us": client / n * 1e6}
