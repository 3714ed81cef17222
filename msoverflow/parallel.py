"""Where the map runs, and the reduce.

    units (rank, step) --map: walk.scan_unit--> UnitSummary --reduce--> Walked (facts + judged executions) --> analyze

Each rank's steps are scanned in order, one unit at a time, and a rank stops after the step that holds its
first origin (unless --all): the next step of a rank is handed out only when the previous one came back clean,
so no worker scans a step that the answer does not need. Ranks run side by side:
  - in this process (small dumps, --jobs 1);
  - on a local process pool (--jobs N; default: one worker per CPU, on machines of 3+ CPUs and dumps large
    enough to pay for it);
  - on a Dask distributed cluster (--scheduler ADDRESS or MSOVERFLOW_SCHEDULER): each task reads one rank's
    step from a filesystem every worker sees at the same path.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Tuple

from .errors import UserError
from .layout import Plan, Unit
from .model import OpExecution
from .walk import DumpedFacts, UnitSummary, msprobe_graphs, scan_unit

if TYPE_CHECKING:
    from .readers.ir_graph import GraphIndex

POOL_MIN_FILES = 20_000     # below this, starting workers costs more than it saves
POOL_MIN_CPUS = 3           # on 2 CPUs the workers and this process contend: measured slower than one process
SCHEDULER_ENV = "MSOVERFLOW_SCHEDULER"


def _remote_scan(unit: Unit, earlier_bad: bool, flags: bool = False) -> UnitSummary:
    """A worker's task: one rank's step, with the worker's own tensor access; warnings travel back."""
    from .rules.knowledge import knowledge
    return scan_unit(unit, knowledge(), earlier_bad, flags=flags)


@dataclass
class Walked:
    """What the reduce gathers from the units' summaries (facts, never samples)."""
    judged: list = field(default_factory=list)             # [(OpExecution, Verdict)] in rank, step, time order
    after_arrival: set = field(default_factory=set)        # keys of origins that came after a bad arrival
    arrivals: List[OpExecution] = field(default_factory=list)   # every collective that delivered a bad value
    scanned_all: bool = True
    scanned: Dict[int, List[int]] = field(default_factory=dict)     # rank -> steps scanned
    steps: Dict[int, List[int]] = field(default_factory=dict)       # rank -> steps holding op runs (or not scanned)
    spans: Dict[Tuple[int, int], Tuple[int, int]] = field(default_factory=dict)   # (rank, step) -> first, last op
    runs: Dict[int, int] = field(default_factory=dict)     # rank -> op runs scanned
    facts: DumpedFacts = field(default_factory=DumpedFacts)
    records: list = field(default_factory=list)            # every Opdebug record (matched_op set when matched)
    graphs: Dict[Tuple[int, str], GraphIndex] = field(default_factory=dict)   # msprobe: (rank, graph)
    files: int = 0
    unknown: List[str] = field(default_factory=list)
    unreadable: List[str] = field(default_factory=list)
    truncated: List[str] = field(default_factory=list)     # of those, files that stop short of their header
    refused: List[str] = field(default_factory=list)
    undecodable: List[Tuple[str, str]] = field(default_factory=list)
    layouts: List[str] = field(default_factory=list)
    rank_roots: Dict[Tuple[int, str], Optional[str]] = field(default_factory=dict)
    has_statistics: bool = False
    side_reads: int = 0         # tensors read only to tell arrivals (flags mode's collectives)

    def step_start(self, rank: int, step: int) -> int:
        span = self.spans.get((rank, step))
        return span[0] if span else 0


def map_reduce(units: List[Unit], kn, scan_all: bool, access, warn: Callable[[str], None], *,
               jobs: Optional[int] = None, scheduler: Optional[str] = None, files: Optional[int] = None,
               advance: Callable[[int], None] = lambda n: None, flags: bool = False,
               stops: Optional[Callable[[UnitSummary], bool]] = None) -> Walked:
    """Every unit through walk.scan_unit (flags: the dump holds hardware overflow records), reduced. A rank's
    later steps are not read after a step for which `stops(summary)` holds (default: it holds an origin; never
    with scan_all); it is asked in this process, in step order."""
    stops = (lambda summary: False) if scan_all else (stops or (lambda summary: summary.has_origin))
    scheduler = scheduler or os.environ.get(SCHEDULER_ENV) or None
    chains: Dict[int, List[Unit]] = {}
    for unit in units:
        chains.setdefault(unit.rank, []).append(unit)
    if scheduler:
        summaries, scanned_all = _on_dask(chains, stops, scheduler, advance, flags)
    else:
        cpus = os.cpu_count() or 1
        if jobs is None:           # the default: a worker per CPU, where that pays (see POOL_MIN_CPUS)
            jobs = cpus if cpus >= POOL_MIN_CPUS else 1
        jobs = max(1, min(jobs, cpus))     # --jobs 1000 on 2 CPUs: 2 workers (each holds a scan's memory)
        if files is None and jobs > 1 and len(chains) > 1:
            files = Plan(units).files
        if jobs > 1 and len(chains) > 1 and (files or 0) >= POOL_MIN_FILES:
            summaries, scanned_all = _on_pool(chains, stops, min(jobs, len(chains)), advance, flags)
        else:
            summaries, scanned_all = _in_process(chains, kn, stops, access, warn, advance, flags)
            return _reduce(summaries, chains, access, None, scanned_all)
    return _reduce(summaries, chains, access, warn, scanned_all)


def _in_process(chains, kn, stops, access, warn, advance, flags=False):
    summaries, scanned_all = [], True
    for rank in sorted(chains):
        earlier_bad = False
        for position, unit in enumerate(chains[rank]):
            summary = scan_unit(unit, kn, earlier_bad, access, warn, flags=flags)
            advance(summary.files)
            summaries.append(summary)
            earlier_bad = summary.earlier_bad
            if stops(summary):
                scanned_all = scanned_all and position == len(chains[rank]) - 1
                break
    return summaries, scanned_all


def _chained(chains, stops, submit, wait_first, advance):
    """Hand out each rank's first step; when a step comes back, hand out that rank's next one unless it stops
    the rank (it held an origin). Later steps of a finished rank are never submitted."""
    summaries, scanned_all = [], True
    pending = {}
    for rank in sorted(chains):
        pending[submit(chains[rank][0], False)] = (rank, 0)
    while pending:
        for future in wait_first(list(pending)):
            rank, position = pending.pop(future)
            summary = future.result()
            advance(summary.files)
            summaries.append(summary)
            last = position == len(chains[rank]) - 1
            if stops(summary):
                scanned_all = scanned_all and last
            elif not last:
                pending[submit(chains[rank][position + 1], summary.earlier_bad)] = (rank, position + 1)
    return summaries, scanned_all


def _on_pool(chains, stops, jobs, advance, flags=False):
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["msoverflow.walk", "msoverflow.rules"])
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
        return _chained(chains, stops, lambda unit, bad: pool.submit(_remote_scan, unit, bad, flags),
                        lambda futures: wait(futures, return_when=FIRST_COMPLETED).done, advance)


def check_scheduler_address(address: str) -> Tuple[str, int]:
    """tcp://HOST:PORT, HOST:PORT or tcp://[IPv6]:PORT, checked before Dask sees it: a malformed address would
    otherwise fail inside the client (and its teardown print a traceback later). TLS needs certificates that
    msoverflow does not configure."""
    import ipaddress
    usage = f"--scheduler {address}: expected a scheduler address such as tcp://HOST:8786 or tcp://[::1]:8786"
    scheme, sep, location = address.partition("://")
    if not sep:
        scheme, location = "tcp", address
    if scheme.lower() != "tcp":
        raise UserError(f"--scheduler {address}: only tcp:// scheduler addresses are supported"
                        + (" (tls:// needs certificates msoverflow does not set up)" if scheme.lower() == "tls" else ""))
    match = re.fullmatch(r"\[([0-9A-Fa-f:.]+)\]:([0-9]{1,5})|([A-Za-z0-9._-]+):([0-9]{1,5})", location)
    if not match:
        raise UserError(usage)
    host, port = (match.group(1), match.group(2)) if match.group(1) else (match.group(3), match.group(4))
    if match.group(1):
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise UserError(f"{usage} ({host} is not an IPv6 address)") from None
    if not 0 < int(port) < 65536:
        raise UserError(f"{usage} (port {port} is out of range)")
    return host, int(port)


# A Dask scheduler greets every connection with a small handshake message: Dask's TCP framing (distributed
# comm/tcp.py) is an 8-byte little-endian byte count, then the message, whose first 8 bytes count its frames.
HANDSHAKE_WAIT_S = 10.0
MAX_HANDSHAKE_BYTES = 1 << 20
MAX_HANDSHAKE_FRAMES = 64


def _dask_greeting_problem(host: str, port: int, timeout: float = HANDSHAKE_WAIT_S) -> Optional[str]:
    """None when the peer's first message is framed as a Dask scheduler's handshake; else what was wrong. Read
    before a dask Client exists: a Client fed garbage allocates what the garbage says (a MemoryError over
    exbibytes) and its teardown waits 20 s and prints a traceback."""
    import socket
    import struct

    def exactly(sock, count: int) -> bytes:
        data = b""
        while len(data) < count:
            chunk = sock.recv(count - len(data))
            if not chunk:
                raise ConnectionError(f"the peer closed the connection after {len(data)} byte(s)")
            data += chunk
        return data

    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            (size,) = struct.unpack("<Q", exactly(sock, 8))
            if not 8 <= size <= MAX_HANDSHAKE_BYTES:
                return f"its first message claims {size} bytes: not a Dask scheduler's greeting"
            (frames,) = struct.unpack("<Q", exactly(sock, 8))
            if not 1 <= frames <= MAX_HANDSHAKE_FRAMES:
                return f"its first message claims {frames} frames: not a Dask scheduler's greeting"
    except socket.timeout:
        return f"it sent nothing in {timeout:g} s (a Dask scheduler greets at once)"
    except OSError as exc:     # ConnectionError included
        return f"cannot connect ({exc})"
    return None


def _on_dask(chains, stops, address, advance, flags=False):
    try:
        from distributed import Client, as_completed
    except ImportError:
        raise UserError(f"--scheduler {address}: dask.distributed is not installed "
                        "(pip install 'msoverflow[dask]' here and on every worker)") from None
    host, port = check_scheduler_address(address)
    problem = _dask_greeting_problem(host, port)
    if problem is not None:
        raise UserError(f"--scheduler {address}: cannot reach the Dask scheduler: {problem}")
    try:
        client = Client(address, set_as_default=False, timeout="10s")
    except (OSError, TimeoutError, ValueError, MemoryError) as exc:
        raise UserError(f"--scheduler {address}: cannot reach the Dask scheduler ({exc})") from None
    try:
        return _chained(chains, stops,
                        lambda unit, bad: client.submit(_remote_scan, unit, bad, flags, pure=False),
                        lambda futures: [f for f in futures if f.done()]
                        or [next(as_completed(futures, loop=client.loop))], advance)
    finally:
        client.close()


def _reduce(summaries: List[UnitSummary], chains, access, warn, scanned_all: bool) -> Walked:
    """Order the summaries by rank and step and gather what the report needs. `warn` replays the warnings a
    worker collected (None when they were given in this process already)."""
    walked = Walked(scanned_all=scanned_all)
    nodes: Dict[Tuple[int, str], list] = {}
    for s in sorted(summaries, key=lambda s: (s.rank, s.step)):
        walked.scanned.setdefault(s.rank, []).append(s.step)
        if warn is not None:
            for message in s.warnings:
                warn(message)
            access.tensors_read += s.tensors_read
            access.unreadable += s.unreadable_count
            access.learn(s.known)
        walked.files += s.files
        walked.side_reads += s.side_reads
        walked.unknown += s.unknown
        walked.unreadable += s.unreadable
        walked.truncated += s.truncated
        walked.refused += s.refused
        walked.undecodable += s.undecodable
        walked.records += s.records
        walked.facts.add(s.facts)
        for key, found in s.nodes.items():
            nodes.setdefault(key, []).extend(found)
        for layout in s.layouts:
            if layout not in walked.layouts:
                walked.layouts.append(layout)
        for key, root in s.rank_roots.items():
            walked.rank_roots.setdefault(key, root)
        walked.has_statistics |= s.has_statistics
        if s.executions:
            walked.runs[s.rank] = walked.runs.get(s.rank, 0) + s.executions
        if s.executions or s.records:      # a step of hardware records only is a step seen too
            walked.steps.setdefault(s.rank, []).append(s.step)
        if s.span is not None:
            walked.spans[(s.rank, s.step)] = s.span
        for position, (ex, verdict) in enumerate(s.judged):
            walked.judged.append((ex, verdict))
            if position in s.after_arrival:
                walked.after_arrival.add(ex.key)
        walked.arrivals += s.arrivals
    # steps not scanned (the rank's answer came earlier) still count as seen: they hold dump files
    for rank, units in chains.items():
        for unit in units:
            if unit.step not in walked.scanned.get(rank, ()):
                walked.steps.setdefault(rank, []).append(unit.step)
                for d in unit.dirs:
                    walked.rank_roots.setdefault((d.rank, d.graph), d.rank_root)
    for rank in walked.steps:
        walked.steps[rank] = sorted(set(walked.steps[rank]))
    walked.graphs = msprobe_graphs(nodes)
    return walked
