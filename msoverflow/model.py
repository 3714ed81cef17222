"""The data model shared by every stage of the pipeline. Plain dataclasses, no I/O; the ground floor: it imports
nothing above it (values.py says what a bad value is, report_dict.py gives the Report as the JSON dict).

discover layout -> parse names -> TensorEvent (one per tensor file, statistic row or binary slot)
-> OpExecution (the tensors of one op run) -> rules -> Finding -> Report -> renderers.

Every public type speaks of the training step as `step`; `iteration` (the dump's word for its step directories)
is a read-only alias kept for one release.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Protocol, Tuple


class IterationAlias:
    """`.iteration`: the old name of `.step`, read-only, kept for one release."""
    __slots__ = ()

    @property
    def iteration(self):
        return self.step  # type: ignore[attr-defined]


# How a Report or a Comparison shows itself in a REPL or a notebook: formatters the renderers provide
# (render/notebook.py), registered by the package (msoverflow/__init__.py), so the model imports no renderer.
_FORMATTERS: Dict[Tuple[str, str], Callable[[Any], str]] = {}


def register_formatter(type_name: str, kind: str, function: Callable[[Any], str]) -> None:
    """kind: "repr" (one line) or "html" (a notebook's card) of the class named type_name."""
    _FORMATTERS[(type_name, kind)] = function


def formatted(obj: Any, kind: str) -> Optional[str]:
    """What the registered formatter shows of obj (None when none is registered)."""
    function = _FORMATTERS.get((type(obj).__name__, kind))
    return function(obj) if function is not None else None


# The conclusion of a Report that no analysis judged (one made by hand): msoverflow/judgement's, registered by the
# package like the formatters, so neither the model nor report_dict imports the judge.
_JUDGE: List[Callable[[Any], Any]] = []


def register_judge(function: Callable[[Any], Any]) -> None:
    _JUDGE[:] = [function]


INPUT = "input"
OUTPUT = "output"
# OpExecution.key: (rank, step, graph, op_type, op_name, task_id, stream_id, time)
RunKey = Tuple[int, int, str, str, str, int, int, int]

# Fault kinds (Finding.kind)
OVERFLOW = "overflow"          # finite inputs, output inf or beyond the declared dtype's range
INVALID = "invalid"            # NaN from finite inputs: 0/0, inf-inf, sqrt/log of a negative ...
SATURATION = "saturation"      # values pinned at the dtype max (Ascend saturation mode)
NONFINITE_INPUT = "nonfinite-input"  # a graph input / parameter was already non-finite when the dump started
CROSS_RANK = "cross-rank"      # a collective received a non-finite value from another rank
FLAGGED = "flagged"            # the hardware overflow flag (Opdebug) fired but the tensors look finite

# Verdicts (Report.verdict): exit codes 0, 1, 3
VERDICT_CLEAN = "clean"                # what could hold an origin was understood and read: nothing bad
VERDICT_ANOMALY = "anomaly"            # a bad value was found (Report.first names where it was created)
VERDICT_INCONCLUSIVE = "inconclusive"  # nothing bad seen, but not everything was understood/read (reasons given)

# Per-rank statuses (RankStatus.status)
RANK_ORIGIN = "origin"            # a bad value was created on this rank
RANK_RECEIVED = "received"        # this rank's first bad value arrived through a collective (`via`)
RANK_FLAGGED = "flagged"          # only the hardware flag says so: the inputs that would decide were not dumped
RANK_CLEAN = "clean"
RANK_NOT_DUMPED = "not dumped"    # an expected rank has no files
RANK_INCOMPLETE = "incomplete"    # the rank's files stop short (job killed, dump still being written): never clean

# Roles of an op execution
ORIGIN = "origin"
PROPAGATOR = "propagator"
CLEAN = "clean"
SUSPECT = "flagged"     # the hardware flagged it, but its inputs were not dumped/readable: origin or propagator?
# inputs finite, consumers got bad values, but its own output file is truncated: named, never proven (inconclusive)
LIKELY_ORIGIN = "likely-origin"


class Status(enum.Enum):
    """What could be made of a tensor's bytes (TensorEvent.status); `note` says why in words."""
    OK = "ok"
    UNREADABLE = "unreadable"     # the file (or its part) could not be read: corrupt, not what its name says
    TRUNCATED = "truncated"       # the file stops short of what its header says: a killed or running writer
    UNDECODABLE = "undecodable"   # a dtype whose bytes msoverflow cannot decode: never read

    @property
    def unread(self) -> bool:
        """The tensor's values are not known: they could hold the origin."""
        return self in (Status.UNREADABLE, Status.TRUNCATED)


@dataclass(slots=True)
class TensorStats:
    """Numbers about one tensor. Counts are exact; min/max/max_abs cover finite values only."""
    count: int
    nan: int = 0
    posinf: int = 0
    neginf: int = 0
    min: Optional[float] = None
    max: Optional[float] = None
    max_abs: Optional[float] = None
    over_range: int = 0     # finite values whose |x| exceeds the declared dtype's max
    at_max: int = 0         # values exactly at +-dtype max (saturated)
    zero: Optional[int] = None
    negative: Optional[int] = None
    # False when nan/posinf/neginf/over_range were inferred from statistics (Max = inf says "at least one"): they
    # are then lower bounds, and reports must say so ("≥1 +inf"; JSON `*_at_least`, exact count null).
    counts_exact: bool = True
    mean_abs: Optional[float] = None     # mean |x| over finite values, when the source gives it (the watch's capture)

    @property
    def nonfinite(self) -> int:
        return self.nan + self.posinf + self.neginf

    def count_text(self, name: str) -> str:
        """A count (nan, posinf, neginf, over_range) as a report may state it: "≥1" when it is a lower bound
        inferred from statistics, the plain number when it was counted."""
        value = getattr(self, name)
        return str(value) if self.counts_exact else f"≥{value}"

    @property
    def bad(self) -> bool:
        """Holds a value that cannot be represented in the declared dtype (msoverflow/values.py)."""
        from .values import bad_counts
        return bad_counts(self.nonfinite, self.over_range)


@dataclass(slots=True)
class TensorEvent(IterationAlias):
    """One tensor as the dump saw it: a file, a statistic.csv row or a slot of a binary dump file."""
    source: str                     # file the tensor (or its statistics) came from
    rank: int
    graph: str                      # graph id (O0/O1) or model id (ACL/GE)
    step: int
    op_type: str
    op_name: str                    # as written in the file name (mapping.csv restored)
    task_id: int
    stream_id: int
    timestamp: int                  # microseconds, per file
    io: str                         # INPUT | OUTPUT
    slot: int
    fmt: str = ""
    dtype: Optional[str] = None     # declared dtype, canonical numpy-style name ("float16", "bfloat16", ...)
    shape: Optional[Tuple[int, ...]] = None
    stats: Optional[TensorStats] = None          # known without reading data (statistic.csv)
    loader: Optional[Callable[[], Any]] = field(default=None, repr=False)  # -> TensorData (lazy)
    payload_dtype: Optional[str] = None          # dtype of the bytes on disk when it differs from `dtype`
    note: str = ""                  # what is wrong with it, in words (status says what kind of wrong)
    context_id: Optional[int] = None   # FFTS+ sub-task ids from the file name (match Opdebug records)
    thread_id: Optional[int] = None
    status: Status = Status.OK

    @property
    def is_float(self) -> bool:
        """A float or complex tensor: the values a scan judges (a complex value is bad like a float, values.py)."""
        return self.dtype is not None and ("float" in self.dtype or self.dtype.startswith("complex"))

    @property
    def is_parameter(self) -> bool:
        return self.op_type == "Parameter"


@dataclass
class OverflowRecord(IterationAlias):
    """A hardware overflow report (Ascend Opdebug), matched to an op where possible."""
    source: str
    rank: int
    graph: str
    step: int
    timestamp: int
    unit: str                       # "AI Core", "AIV", "DHA Atomic Add", ...
    task_id: int
    stream_id: int
    status: int
    status_words: List[str] = field(default_factory=list)
    context_id: Optional[int] = None
    thread_id: Optional[int] = None
    matched_op: Optional[str] = None   # op_name it was matched to, if any


@dataclass
class GraphNode:
    """What the saved graph (.ir) knows of one kernel."""
    full_name: str                  # Default/network-.../Sqrt-op0
    op_type: str
    ir_id: str = ""                 # %113
    inputs: List[str] = field(default_factory=list)  # producers' full names or "param:NAME"
    forward_name: Optional[str] = None   # full name of the forward op of a gradient node
    source_file: Optional[str] = None
    source_line: Optional[int] = None
    source_code: Optional[str] = None
    is_backend_cast: bool = False
    inferred_out: Optional[str] = None   # output dtype the front end inferred
    kernel_out: Optional[str] = None     # output dtype of the selected kernel
    ir_line: Optional[int] = None        # 1-based line of the node in its .ir file
    # A framework dump's Cell/Module entry (msprobe) is not one op but the whole Cell: the scope it covers. A bad
    # value first made by an op inside that scope is not a second origin when the Cell's own output shows it.
    wraps_scope: Optional[str] = None
    # A framework dump's Cell entry whose outputs include its parameters' gradients (msprobe parameters_grad):
    # output slot -> the parameter's name ("lm_head.weight").
    parameter_grads: Optional[Dict[int, str]] = None
    # The node's literal arguments (slot -> text as the .ir writes it: `Bool(1)`, `I64(-1)`, `(I64(0), I64(1))`)
    # and its primitive attributes (the text inside `primitive_attrs: {...}`), parsed only when an op is
    # recomputed (msoverflow/readers/ir_graph.py literal(), attributes()).
    literals: Dict[int, str] = field(default_factory=dict)
    attrs_text: str = ""
    types_text: str = ""      # the node's inferred types line: `(<Tensor[Float32], (2, 4)>, ...) -> (...)`
    # The Cell the call trace enters (`self.head(x)` then `def construct`), for a node whose scope names none
    # (readers/ir_graph.py _trace_cell), and (file, line) of that Cell's construct.
    trace_cell: Optional[str] = None
    trace_cell_at: Optional[Tuple[str, int]] = None


class NamedRun(Protocol):
    """What matching the op runs of two dumps reads of a run (comparison.match, graphs.SavedGraphs.node): an
    OpExecution or a walk.OpRun."""
    @property
    def rank(self) -> int: ...
    @property
    def graph(self) -> str: ...
    @property
    def op_type(self) -> str: ...
    @property
    def op_name(self) -> str: ...
    @property
    def time(self) -> int: ...
    @property
    def order(self) -> Optional[int]: ...
    @property
    def key(self) -> tuple: ...       # what names the run within one dump (never id())


@dataclass(slots=True)
class OpExecution(IterationAlias):
    """One run of one op: its input and output tensors (files of one op carry different timestamps)."""
    rank: int
    graph: str
    step: int
    op_type: str
    op_name: str
    task_id: int
    stream_id: int
    inputs: List[TensorEvent] = field(default_factory=list)
    outputs: List[TensorEvent] = field(default_factory=list)
    flags: List[OverflowRecord] = field(default_factory=list)
    order: Optional[int] = None       # position in the graph's execution order, when known
    node: Optional[GraphNode] = None

    @property
    def time(self) -> int:
        stamps = [t.timestamp for t in self.inputs + self.outputs] or [r.timestamp for r in self.flags]
        return min(stamps) if stamps else 0

    @property
    def key(self) -> "RunKey":
        """What names this op run in the dump, stable across processes and copies (never an object's id()): two
        runs of one op in one step (a graph run twice in one iteration folder) differ by their time."""
        return (self.rank, self.step, self.graph, self.op_type, self.op_name, self.task_id, self.stream_id,
                self.time)

    @property
    def context_id(self) -> Optional[int]:
        return next((t.context_id for t in self.inputs + self.outputs if t.context_id is not None), None)

    @property
    def thread_id(self) -> Optional[int]:
        return next((t.thread_id for t in self.inputs + self.outputs if t.thread_id is not None), None)

    @property
    def is_parameter(self) -> bool:
        return self.op_type == "Parameter"


@dataclass
class TensorSummary:
    slot: int
    io: str
    dtype: Optional[str]
    shape: Optional[Tuple[int, ...]]
    stats: Optional[TensorStats]
    payload_dtype: Optional[str] = None
    producer: Optional[str] = None    # the op that produced this input, from the graph
    note: str = ""
    file: Optional[str] = None        # the tensor file (or statistic.csv / binary dump file) it came from

    @property
    def range_used(self) -> Optional[float]:
        """Largest finite |x| as a share of the declared dtype's max (1.0 = at the limit). Finite values only:
        a tensor holding inf is past any range, which renderers show as "inf"."""
        from .dtypes import dtype_max
        limit = dtype_max(self.dtype)
        if self.stats is None or self.stats.max_abs is None or not limit:
            return None
        return self.stats.max_abs / limit

    headroom = range_used   # the old name, kept for callers


@dataclass
class Source:
    file: str
    line: int
    code: str


# Causes of an origin (Finding.cause): what recomputing the op from its dumped inputs says made its bad value.
CAUSE_PRECISION = "precision"   # bad in the low-precision dtype, finite in float32: a precision patch is the fix
CAUSE_DOMAIN = "domain"         # bad in every training dtype from finite inputs: sqrt/log of a negative, 0/0, x/0,
                                # inf - inf, or a value beyond float32's range
CAUSE_DATA = "data"             # a zero token/mask count as a denominator, or the data batch itself holds the value
CAUSE_DEVICE = "device"         # the inputs recompute finite where the dump is not: a kernel bug or a hardware fault
CAUSE_UNKNOWN = "unknown"       # it could not be recomputed (the reason says why)
CAUSES = (CAUSE_PRECISION, CAUSE_DOMAIN, CAUSE_DATA, CAUSE_DEVICE, CAUSE_UNKNOWN)


@dataclass
class Recomputed:
    """The origin op recomputed from its dumped inputs in one precision."""
    dtype: str                       # float16 | bfloat16 | float32 | float64
    finite: bool                     # every value of the recomputed output is finite
    max_abs: Optional[float]         # largest finite |x|
    nonfinite: int = 0
    agrees: Optional[bool] = None    # the dump holds what this gives, seen in the coarser dtype (None: not comparable)
    mismatches: int = 0              # elements where they differ


@dataclass
class Sample:
    """One bad element: its dumped value beside the recomputed ones (repro prints these)."""
    index: Tuple[int, ...]
    dumped: float
    recomputed: Dict[str, float] = field(default_factory=dict)   # precision -> value


@dataclass
class Cause:
    """Why an origin made its bad value (msoverflow/cause/cause.py)."""
    cause: str                       # CAUSE_*
    reason: str                      # one sentence: what the recompute showed
    advice: str = ""
    by: str = ""                     # what recomputed it: "numpy" | "mindspore" | "" (not recomputed)
    output_slot: Optional[int] = None
    recompute: List[Recomputed] = field(default_factory=list)
    where: str = ""                  # "all 8 values", "all 30 in batch row 1", "spread across the tensor: ..."
    axes: Dict[str, List[int]] = field(default_factory=dict)
    pattern: str = ""                # "bit flip" | "memory stomp" | "overflow" | ""
    pattern_text: str = ""
    evidence: List[str] = field(default_factory=list)
    samples: List[Sample] = field(default_factory=list)
    # what the cause rests on beyond the op's own recompute (a rule of msoverflow/judgement reads it): "upstream" (a
    # low-precision producer made its input's exact 0 or inf), "masked_row" (a row -inf everywhere), "weight_sum"
    # (a 0/0 whose denominator sums a weight), "" (the op's recompute alone)
    basis: str = ""


# Cause.basis of a value that no op made: a weight changed in memory between two steps, read as it was found
# (cause/between.py: a non-finite value; cause/entered.py: finite values absurd for the weight)
BASIS_BETWEEN_STEPS = "between_steps"
BASIS_ENTERED = "entered"
MADE_BY_NO_OP = frozenset({BASIS_BETWEEN_STEPS, BASIS_ENTERED})


@dataclass
class Finding(IterationAlias):
    """One op execution that produced a bad value, with what the rules concluded about it."""
    rank: int
    graph: str
    step: int
    op_type: str
    op_name: str
    role: str                         # ORIGIN | PROPAGATOR
    kind: str                         # OVERFLOW, INVALID, ...
    detail: str                       # one line: "fp16 overflow: max |out| 1.3e5 > 65504", "0/0: ..."
    timestamp: int
    full_name: Optional[str] = None
    forward_op: Optional[str] = None
    # a gradient op the graph feeds into a differentiated node (an inner GradOperation, as a physics-informed loss
    # takes): it runs in the forward pass, whatever its scope's Gradients/ name says
    inner_gradient: bool = False
    cell: Optional[str] = None
    cell_type: Optional[str] = None
    source: Optional[Source] = None
    inputs: List[TensorSummary] = field(default_factory=list)
    outputs: List[TensorSummary] = field(default_factory=list)
    flags: List[OverflowRecord] = field(default_factory=list)
    recommendation: str = ""
    evidence: List[str] = field(default_factory=list)
    producers: List[str] = field(default_factory=list)   # the graph's inputs of this op (full names), for edges
    ir_file: Optional[str] = None     # the saved graph (.ir) holding this op
    ir_line: Optional[int] = None
    cause: Optional[Cause] = None     # what made the bad value (origins; diagnosis)
    advice: str = ""                  # the recommendation's key in op_knowledge.yaml (the cause may replace it)
    history: Optional["History"] = None   # since when: its inputs and parameters over the dumped steps


@dataclass
class RankStatus(IterationAlias):
    """One row of the per-rank table: where each rank first went bad, and how."""
    rank: int
    status: str                        # RANK_*
    step: Optional[int] = None         # first bad step
    op_name: Optional[str] = None      # first bad op on that rank
    op_type: Optional[str] = None
    via: Optional[str] = None          # the collective that delivered the bad value ("AllReduce <op_name>")
    note: str = ""
    time: Optional[int] = None         # timestamp (us, this rank's clock) of that first bad op, when known
    coords: Optional[Dict[str, int]] = None   # parallel coordinates {"dp":..,"tp":..,"pp":..} when the layout is known
    present: Optional[int] = None      # incomplete: files/kernels found for the step ...
    expected: Optional[int] = None     # ... of this many that should be there
    last_rank: Optional[int] = None    # not dumped: this row stands for ranks rank..last_rank (same reason)

    @property
    def rank_label(self) -> str:
        return f"{self.rank}-{self.last_rank}" if self.last_rank is not None else str(self.rank)


@dataclass
class Arrival(IterationAlias):
    """A collective delivered a bad value to a rank in a step (every one is shown: text, JSON, HTML timeline)."""
    rank: int
    step: int
    op_type: str
    op_name: str
    offset_us: Optional[int] = None    # time since this rank's own step began (clock offsets cancel)


@dataclass
class StepCompleteness(IterationAlias):
    """What one (rank, step) holds against what it should hold (execution order, other steps, other ranks)."""
    rank: int
    step: int
    complete: bool
    present: int                       # kernels (or files) found
    expected: Optional[int]            # kernels (or files) that should be there, when known
    reasons: List[str] = field(default_factory=list)   # "417 of 556 kernels' files", "3 files are truncated", ...
    truncated: List[str] = field(default_factory=list)   # files shorter than their header says, 0-byte files
    unreadable: List[str] = field(default_factory=list)  # files that could not be read for another reason
    recent: bool = False               # files modified in the last seconds: the dump may still be being written
    earlier: bool = False              # a step before its rank's last one: the job went past it (files were lost)


@dataclass
class ParameterHit(IterationAlias):
    """A parameter whose gradient or value first became non-finite on a rank."""
    name: str
    rank: int
    step: int
    shape: Optional[Tuple[int, ...]] = None
    how: str = ""                      # "computed" | "received via AllReduce <op>" | ...
    op_name: Optional[str] = None
    coords: Optional[Dict[str, int]] = None


@dataclass
class Contained:
    """A non-finite value that is no fault (msoverflow/harmless/contained.py): every op it reached in the saved
    graph either passed it on or absorbed it with finite outputs (a -inf fill consumed by Softmax), and it reached no
    loss, gradient, parameter or optimizer state."""
    rank: int
    steps: List[int]
    graph: str
    op_type: str                    # the site: the op whose output holds the value first
    op_name: str
    value: str                      # what it holds: "-inf", "+inf", "NaN", "values beyond float16's range"
    absorbed_by: List[str]          # op types of the consumers that absorbed it ("Softmax")
    full_name: Optional[str] = None
    cell: Optional[str] = None
    cell_type: Optional[str] = None
    source: Optional[Source] = None
    spread: List[str] = field(default_factory=list)      # ops it passed through before it was absorbed
    absorbers: List[str] = field(default_factory=list)   # the absorbing ops' names
    evidence: List[str] = field(default_factory=list)


@dataclass
class Handled:
    """Overflows a dynamic loss scale handled by design (msoverflow/harmless/loss_scale.py): in the backward only,
    the steps' updates skipped, and a later step trained again."""
    ranks: List[int]
    steps: List[int]
    scale_from: Optional[float] = None     # the loss scale the first of these steps ran with
    scale_to: Optional[float] = None       # the loss scale the step after the run ran with (where it left it)
    scale_how: str = ""                    # "read" | "inferred" | "" (the dump does not hold it)
    scale_evidence: str = ""               # where it was read, or what it was inferred from
    skipped_how: str = ""                  # how the skipped updates are known
    recovered_at: Optional[int] = None     # the first later step without an overflow
    ops: List[str] = field(default_factory=list)          # op types that overflowed first in these steps
    evidence: List[str] = field(default_factory=list)
    # rank -> the steps whose overflow it only received through a collective (data parallel: the gradient
    # AllReduce) from a rank where it is handled
    received: Dict[int, List[int]] = field(default_factory=dict)


@dataclass
class Series:
    """One quantity over the dumped steps: max |x| of an input of the origin, or of a parameter feeding it."""
    name: str                       # "input 0 of SqrtGrad", "lm_head.weight"
    kind: str                       # "input" | "parameter"
    steps: List[int]
    max_abs: List[Optional[float]]  # None: not in that step's files
    trend: str = ""                 # "growing" | "jump" | "steady" | "" (too few steps to say)
    since: Optional[int] = None     # growing from / jumped at this step


@dataclass
class History:
    """Since when (msoverflow/cause/history.py): the origin's inputs and the parameters feeding it, across the
    dumped steps up to the origin's, and what that says about the cause."""
    rank: int
    step: int
    series: List[Series]
    summary: str
    earlier_cause: bool = False     # a cause earlier than the step (training dynamics), not this op's precision


# The cause words a Conclusion may carry beyond the recompute's (CAUSE_*): the history shows the cause is earlier
CAUSE_DYNAMICS = "dynamics"     # weights or activations grew over the steps before: learning rate, warm-up, growth

# What `msoverflow patch` may do with a conclusion
PATCH_PRECISION = "precision"   # a wider dtype for the region (the cause is precision, or unknown: said so)
PATCH_GUARD = "guard"           # the zero-token guard (a zero count as a denominator)
PATCH_NONE = ""                 # no patch: the fix is elsewhere (the conclusion's fix says where)


@dataclass
class Conclusion:
    """The one judgement of a report (msoverflow/judgement/): kind, harmful or not, cause, fix, the next command and
    what patch may do, decided by the first rule of the ordered table that applies. Renderers, `patch` and the
    next-command hint read it; none decides again."""
    rule: str                        # the rule that decided ("cause_precision", "update_applied", ...)
    verdict: str                     # VERDICT_*
    harmful: Optional[bool]          # None: not known (inconclusive)
    kind: str = ""                   # "NaN" | "inf" | "overflow" | "saturation" | "flagged" | ... ("" when clean)
    cause: str = ""                  # CAUSE_* or CAUSE_DYNAMICS ("" when no cause applies)
    reason: str = ""                 # one sentence: why this cause
    fix: List[str] = field(default_factory=list)     # what to change, most important first
    next_command: str = ""           # the command to run next ("" when none)
    patch: str = PATCH_NONE          # PATCH_*: what `msoverflow patch` may do
    used: List[str] = field(default_factory=list)    # the evidence fields the rule read (Evidence's names)

    @property
    def patch_may_act(self) -> bool:
        return self.patch != PATCH_NONE


@dataclass
class Report:
    dump_dir: str
    first: Optional[Finding]
    anomalies: List[Finding]           # origins in time order (per rank by step), first included
    propagation: List[Finding]         # how the first origin spread in its step
    warnings: List[str]
    ranks: List[int]
    steps: Dict[int, List[int]]        # rank -> steps seen
    files: int = 0
    tensors_read: int = 0
    outputs_checked: int = 0           # op runs whose dumped outputs were checked (values or statistics)
    inputs_checked: int = 0            # op runs with dumped inputs (what an inputs-only dump's verdict rests on)
    layout: str = ""
    tail_clean: bool = True            # False when later steps were not scanned (early exit)
    extra: Dict[str, Any] = field(default_factory=dict)
    rank_status: List[RankStatus] = field(default_factory=list)   # every dumped or expected rank
    coverage: List[str] = field(default_factory=list)      # what the dump config could not show (caveats on clean)
    inconclusive: List[str] = field(default_factory=list)  # why a verdict without findings is not "clean"
    flagged: List[Finding] = field(default_factory=list)   # flagged ops whose inputs could not decide (role SUSPECT)
    # rank -> step -> (first, last) op timestamp in us on that rank's clock: timelines measure from a rank's
    # own step start, so clock offsets between ranks cancel.
    step_times: Dict[int, Dict[int, Tuple[int, int]]] = field(default_factory=dict)
    overflow_records: List[OverflowRecord] = field(default_factory=list)  # every hardware flag, matched or not
    # Facts the renderers show and never compute (one truth for text, markdown, JSON and HTML):
    arrivals: List[Arrival] = field(default_factory=list)         # every bad value a collective delivered
    scanned_steps: Dict[int, List[int]] = field(default_factory=dict)   # rank -> steps actually scanned
    edges: List[Tuple[str, str]] = field(default_factory=list)    # propagation edges (producer op, consumer op)
    completeness: List[StepCompleteness] = field(default_factory=list)  # only the (rank, step)s found incomplete
    # role LIKELY_ORIGIN: the op that most likely created the bad value when its own output file is cut short (the
    # verdict stays inconclusive: an unread file proves nothing)
    likely_origin: Optional[Finding] = None
    parameters: List[ParameterHit] = field(default_factory=list)
    parallel: Optional[Dict[str, object]] = None   # the parallel layout used ({"dp":4,"tp":1,"pp":2,"source":...})
    provenance: Dict[str, object] = field(default_factory=dict)   # msoverflow version, command, time, host, ...
    # Reads the scanned steps' tensor events again (set by the analysis; not in the JSON report).
    event_reader: Optional[Callable[[], object]] = field(default=None, repr=False, compare=False)
    # Non-finite values that are no fault (msoverflow/harmless/): a verdict is clean when these are all there is
    contained: List[Contained] = field(default_factory=list)
    handled: List[Handled] = field(default_factory=list)
    strict: bool = False               # contained and handled values were findings too (--strict)
    # the report's one judgement (msoverflow/judgement/), set by the analysis after assembling
    conclusion: Optional[Conclusion] = None

    @property
    def iterations(self) -> Dict[int, List[int]]:
        """The old name of `steps`, read-only, kept for one release."""
        return self.steps

    def events(self):
        """Every tensor event of the scanned steps as a pandas DataFrame, one row per tensor (msoverflow.events()):
        rank, step, op_type, op_name, io, slot, dtype, shape, max_abs, nan, posinf, neginf, over_range,
        counts_exact (False: the counts are lower bounds inferred from statistics' Max/Min), bad (msoverflow's one
        definition: non-finite, or beyond the declared dtype's range), file."""
        if self.event_reader is None:
            raise ValueError("this Report was not made from a dump by msoverflow.analyze(): it has no events to read")
        return self.event_reader()

    def __repr__(self) -> str:
        """One line: the verdict, where, the dump (the formatter render/notebook.py registers); the fields are in
        to_dict()."""
        return formatted(self, "repr") or f"<Report {self.verdict.upper()}; {self.dump_dir}>"

    def _repr_html_(self) -> str:
        """A notebook shows the verdict card, not the object's fields."""
        return formatted(self, "html") or ""

    def judged(self) -> "Conclusion":
        """The report's one conclusion: the one the analysis set, else the registered judge's for this Report."""
        if self.conclusion is not None:
            return self.conclusion
        if not _JUDGE:
            raise RuntimeError("no judge is registered: import msoverflow")
        return _JUDGE[0](self)

    def fix_shown(self, finding: "Finding") -> str:
        """The fix a view shows for a finding: the conclusion's for the first origin, the finding's own for others."""
        if finding is self.first:
            return " ".join(self.judged().fix)
        return finding.recommendation

    def to_dict(self) -> dict:
        """The JSON report (schema msoverflow/schema/report.schema.json) as a dict."""
        from .report_dict import report_dict
        return report_dict(self)

    @property
    def bad_values_seen(self) -> bool:
        """Bad values were read although no origin is named (a rank received one, a likely origin was found)."""
        return self.first is not None or self.likely_origin is not None or self.bad_value_received or any(
            row.status in (RANK_ORIGIN, RANK_FLAGGED) for row in self.rank_status)

    @property
    def bad_value_received(self) -> bool:
        """A collective delivered a bad value to a rank (an arrival is kept when that rank's own step is cut short
        and its row says `incomplete`)."""
        return bool(self.arrivals) or any(row.status == RANK_RECEIVED for row in self.rank_status)

    @property
    def cause(self) -> Optional[Cause]:
        """What made the first origin's bad value (precision, domain, data, device or unknown), or None."""
        return self.first.cause if self.first is not None else None

    @property
    def verdict(self) -> str:
        if self.first is not None:
            return VERDICT_ANOMALY
        return VERDICT_INCONCLUSIVE if self.inconclusive else VERDICT_CLEAN

    @property
    def exit_code(self) -> int:
        """The process exit code of this verdict: 0 clean, 1 anomaly, 3 inconclusive (msoverflow/errors.py)."""
        from .errors import EXIT_ANOMALY, EXIT_CLEAN, EXIT_INCONCLUSIVE  # errors imports nothing of ours
        return {VERDICT_ANOMALY: EXIT_ANOMALY, VERDICT_INCONCLUSIVE: EXIT_INCONCLUSIVE}.get(self.verdict, EXIT_CLEAN)
