"""Diff of two runs: where the experiment spends more or less time per step.

A *side* is one trace or the traces of a run's ranks.  Every figure is taken
per step first (a trace's sum divided by its number of steps) and then
averaged over the side's traces, so runs that profiled different numbers of
steps or ranks compare, and an op that only one rank runs counts as the
fraction of the mean rank it is.  Only work inside the steps counts (ops and
kernels that ``kinetolens.model`` gave a step); a trace without
``ProfilerStep`` ranges is one step.

Levels (one table each, see :data:`LEVELS`):

* ``step``: the step-time breakdown (kernel, memcpy, ..., other, total) of
  :mod:`kinetolens.analysis.gputime.overview`; its ``total`` row is the mean step time.
* ``module``: time of the top-level ops of each ``nn.Module`` path (backward
  ops carry their forward op's module), so modules do not count nested ops
  twice.
* ``op`` / ``op_shape``: ops (every thread, backward included) by name, and by
  name and input shapes.  Their time is *self* time, so the rows add up and
  the op deltas can explain the step delta; inclusive time is beside it.
* ``kernel``: GPU kernels, memcpys and memsets by name.

Time basis: device time when both sides ran GPU work (a GPU step is what its
kernels make it), else host time (a CPU run's steps are its ops' CPU time).

Environment: the summary's ``environment`` compares what each side's traces
say about the machine and software that ran them (:data:`ENVIRONMENT`: GPU,
compute capability, torch, CUDA, world size).  Where they differ, every delta
mixes the code change with the hardware or software one; the views say so
before any number.

Names are matched after removing what identifies an instance rather than
what ran (:data:`NAME_RULES`): step numbers, addresses, compiled-graph
hashes, Triton kernel indices, and ``nn.Module`` instance numbers
(``Linear_1`` and ``Linear_2`` are both ``Linear``: torch numbers instances
per class in the order they first run, so one inserted layer renumbers every
later one, and matching raw names would pair different layers).  Pass
``exact_names=True`` to match raw names.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from kinetolens.analysis.diff_levels import LEVEL_KEYS, LEVELS
from kinetolens.analysis.gputime.overview import COLUMNS, step_breakdown
from kinetolens.analysis.hardware.gpu_spec import trace_device
from kinetolens.analysis.session import per_trace, whole_steps
from kinetolens.analysis.workload.op_times import op_instances
from kinetolens.analysis.workload.ops import without_step_ranges
from kinetolens.formats import RUN_METADATA_KEY
from kinetolens.model.trace import Trace

#: A row is ``same`` when its calls per step match and its time moved by at
#: most this percentage of the baseline; run-to-run noise is rarely below it.
SAME_PCT = 1.0
#: Ops listed as explaining the step-time change, at most.
EXPLAIN_TOP = 10
#: Ops that moved less than this percentage of the step delta explain nothing
#: worth listing.
EXPLAIN_MIN_PCT = 1.0
#: Row statuses: only in the experiment, only in the baseline, moved, within :data:`SAME_PCT`.
STATUSES: tuple[str, ...] = ("new", "gone", "changed", "same")
#: Label of rows whose key is missing (ops outside any module, ops without shapes).
NO_KEY = "-"
#: Op-level row for GPU work no op launched (NCCL kernels of a communication
#: thread, kernels whose launch the profiler missed), so that with device time
#: the op rows add up to all the steps' GPU time.
NO_OP = "(no op)"

#: (pattern, replacement): parts of names that number an instance of
#: something rather than say what ran.  Applied in order to op and kernel names.
NAME_RULES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"^(ProfilerStep)#\d+$"), r"\1#*"),
    (re.compile(r"0x[0-9a-fA-F]+"), "0x*"),
    # Inductor graph / cache hashes: a standalone lowercase token of 20+
    # letters and digits with at least one digit.
    (re.compile(r"\b(?=[a-z0-9]*\d)[a-z0-9]{20,}\b"), "<hash>"),
    (re.compile(r"^(triton_[a-z0-9_]+?)_\d+$"), r"\1_*"),
    (re.compile(r"^(Torch-Compiled Region: )\d+/\d+"), r"\1*/*"),
)
#: ``nn.Module`` instance number at the end of a module path component.
MODULE_INSTANCE = re.compile(r"_\d+(?=\.|$)")

_GPU_KINDS = ("kernel", "memcpy", "memset")


def normalize_name(name: str) -> str:
    """``name`` with instance numbers, addresses and hashes replaced (see :data:`NAME_RULES`)."""
    for pattern, repl in NAME_RULES:
        name = pattern.sub(repl, name)
    return name


def normalize_module(path: str) -> str:
    """``Sequential_0.Linear_2`` -> ``Sequential.Linear``."""
    return MODULE_INSTANCE.sub("", path)


def _map_names(frame: pl.DataFrame, col: str, fn: Callable[[str], str]) -> pl.DataFrame:
    """Apply ``fn`` once per distinct value (names repeat thousands of times)."""
    values = frame[col].drop_nulls().unique()
    if values.len() == 0:
        return frame
    mapping = pl.DataFrame({col: values, "_mapped": [fn(v) for v in values.to_list()]})
    return frame.join(mapping, on=col, how="left").with_columns(pl.col("_mapped").alias(col)).drop("_mapped")


# -- environment --------------------------------------------------------------

#: What :func:`environment` reads from a trace, with the words the views use.
ENVIRONMENT: dict[str, str] = {
    "gpu": "GPU",
    "compute_capability": "compute capability",
    "torch": "torch",
    "cuda": "CUDA",
    "world_size": "world size",
}
#: How deep :func:`_find_key` looks into nested trace metadata.
_SEARCH_DEPTH = 4


def _find_key(value: Any, key: str, depth: int = _SEARCH_DEPTH) -> Any:
    """The first ``key`` in nested dicts (breadth first): torch's version sits
    wherever the harness that wrote the trace put it."""
    level = [value]
    for _ in range(depth):
        found = next((d[key] for d in level if isinstance(d, dict) and d.get(key) not in (None, "")), None)
        if found is not None:
            return found
        level = [v for d in level if isinstance(d, dict) for v in d.values() if isinstance(v, dict)]
    return None


def _cuda_version(value: Any) -> str | None:
    """Kineto's ``12040`` as ``12.4``; strings as they are."""
    if isinstance(value, int) and value > 0:
        return f"{value // 1000}.{value % 1000 // 10}"
    return str(value) if value not in (None, "") else None


def environment(trace: Trace) -> dict[str, Any]:
    """What ``trace`` says about the machine and software that ran it (None where it says nothing).

    ``gpu`` and ``compute_capability``: the device that ran the most kernel
    time; ``torch``: a ``torch_version`` anywhere in the trace's metadata
    (kinetolens' run metadata, other harnesses' environment records; Kineto
    itself does not write it); ``cuda``: the CUDA runtime Kineto recorded,
    else the CUDA torch was built with; ``world_size``: ranks in the job.
    """
    meta = trace.metadata
    device = trace_device(trace) or {}
    major, minor = device.get("computeMajor"), device.get("computeMinor")
    run = meta.get(RUN_METADATA_KEY) if isinstance(meta.get(RUN_METADATA_KEY), dict) else {}
    world = trace.world_size if trace.world_size is not None else run.get("world_size")
    torch = _find_key(meta, "torch_version")
    return {
        "gpu": device.get("name") or None,
        "compute_capability": f"{major}.{minor}" if isinstance(major, int) and isinstance(minor, int) else None,
        "torch": str(torch) if torch is not None else None,
        "cuda": _cuda_version(meta.get("cuda_runtime_version")) or _cuda_version(run.get("cuda_version")),
        "world_size": world if isinstance(world, int) else None,
    }


def _side_environment(traces: list[Trace]) -> dict[str, Any]:
    """One value per field when the side's traces agree, else their distinct values joined."""
    out: dict[str, Any] = {}
    envs = [environment(t) for t in traces]
    for key in ENVIRONMENT:
        values = list(dict.fromkeys(e[key] for e in envs if e[key] is not None))
        out[key] = values[0] if len(values) == 1 else ", ".join(map(str, values)) if values else None
    return out


def compare_environments(baseline: list[Trace], experiment: list[Trace]) -> dict[str, Any]:
    """Both sides' :func:`environment`, the fields that differ and those a side does not record."""
    base, exp = _side_environment(baseline), _side_environment(experiment)
    known = [k for k in ENVIRONMENT if base[k] is not None and exp[k] is not None]
    return {
        "baseline": base,
        "experiment": exp,
        "differs": [k for k in known if base[k] != exp[k]],
        "unknown": [k for k in ENVIRONMENT if k not in known],
    }


def environment_warning(env: dict[str, Any]) -> str | None:
    """The sentence every diff view puts first when :func:`compare_environments` found a difference."""
    if not env["differs"]:
        return None
    changes = ", ".join(f"{ENVIRONMENT[k]} {env['baseline'][k]} → {env['experiment'][k]}" for k in env["differs"])
    return f"different environments (baseline → experiment): {changes}; the deltas mix this change with the code's"


# -- one trace ----------------------------------------------------------------


@dataclass
class _TraceFacts:
    """What the levels need from one trace, computed once per trace (in its
    analysis session: a dashboard comparing it with several others reuses it)."""

    path: str | None
    has_steps: bool
    steps: int
    breakdown: pl.DataFrame
    ops: pl.DataFrame  # op and annotation instances inside steps, without the steps
    kernels: pl.DataFrame  # GPU activity inside steps


@per_trace
def _facts(trace: Trace) -> _TraceFacts:
    trace = whole_steps(trace)  # a step the profiler cut short is not a step to compare
    breakdown = step_breakdown(trace)
    has_steps = trace.steps.height > 0
    # Annotations (record_function ranges) are rows too: a user range that
    # appears or grows is a finding, and kernels launched directly under one
    # are its self time.  The steps themselves are the baseline, not a row.
    ops = without_step_ranges(op_instances(trace)).filter(pl.col("kind").cast(pl.String).is_in(("op", "annotation")))
    kernels = trace.kernels.filter(pl.col("kind").cast(pl.String).is_in(_GPU_KINDS))
    if has_steps:
        ops = ops.filter(pl.col("step").is_not_null())
        kernels = kernels.filter(pl.col("step").is_not_null())
    return _TraceFacts(path=trace.path, has_steps=has_steps, steps=breakdown.height, breakdown=breakdown, ops=ops, kernels=kernels)


@dataclass
class _Side:
    facts: list[_TraceFacts]

    @property
    def has_gpu(self) -> bool:
        return all(f.kernels.height > 0 for f in self.facts)

    @property
    def mean_step_ns(self) -> float | None:
        means = [float(f.breakdown["total"].mean()) for f in self.facts if f.steps]  # type: ignore[arg-type]
        return sum(means) / len(means) if means else None


def _as_traces(side: Trace | Sequence[Trace], label: str) -> list[Trace]:
    traces = [side] if isinstance(side, Trace) else list(side)
    if not traces:
        raise ValueError(f"the {label} has no traces")
    return traces


# -- per-level extraction (one trace, sums over its steps) ----------------------


def _level_sums(f: _TraceFacts, level: str, device: bool, exact: bool) -> pl.DataFrame:
    """Key columns plus ``calls``, ``ns`` (and ``total_ns``/``instances``) summed over the trace's steps."""
    self_col, total_col = ("device_self", "device_total") if device else ("host_self", "host_total")
    if level == "step":
        b = f.breakdown
        return pl.DataFrame(
            {
                "category": list(COLUMNS),
                "calls": [None] * len(COLUMNS),
                "ns": [float(b[c].sum()) for c in COLUMNS],
            },
            schema={"category": pl.String, "calls": pl.Float64, "ns": pl.Float64},
        )
    if level == "kernel":
        k = f.kernels.select("name", "dur")
        k = k if exact else _map_names(k, "name", normalize_name)
        return k.group_by("name").agg(calls=pl.len().cast(pl.Float64), ns=pl.col("dur").sum().cast(pl.Float64))
    ops = f.ops
    if level == "module":
        top = ops.filter(pl.col("top_op_id") == pl.col("op_id")).select("module", ns=total_col)
        top = top.with_columns(raw=pl.col("module"))
        top = top if exact else _map_names(top, "module", normalize_module)
        return (
            top.with_columns(pl.col("module").fill_null(NO_KEY))
            .group_by("module")
            .agg(
                calls=pl.len().cast(pl.Float64),
                ns=pl.col("ns").sum().cast(pl.Float64),
                instances=pl.col("raw").n_unique().cast(pl.Float64),
            )
        )
    keys = list(LEVEL_KEYS[level])
    sel = ops.select(*keys, ns=self_col, total_ns=total_col)
    sel = sel if exact else _map_names(sel, "name", normalize_name)
    if "shapes" in keys:
        sel = sel.with_columns(pl.col("shapes").fill_null(NO_KEY))
    sums = sel.group_by(keys).agg(
        calls=pl.len().cast(pl.Float64),
        ns=pl.col("ns").sum().cast(pl.Float64),
        total_ns=pl.col("total_ns").sum().cast(pl.Float64),
    )
    orphans = f.kernels.filter(pl.col("op_id").is_null())
    if device and orphans.height:
        ns = float(orphans["dur"].sum())
        row = {"name": NO_OP, "shapes": NO_KEY, "calls": float(orphans.height), "ns": ns, "total_ns": ns}
        sums = pl.concat([sums, pl.DataFrame({k: [row[k]] for k in sums.columns}, schema=sums.schema)])
    return sums


def _side_per_step(side: _Side, level: str, device: bool, exact: bool) -> pl.DataFrame:
    """Per-step figures of one side: each trace's sums over its steps, then the mean over traces."""
    keys = list(LEVEL_KEYS[level])
    parts = []
    for f in side.facts:
        sums = _level_sums(f, level, device, exact)
        n = max(f.steps, 1)
        value_cols = [c for c in sums.columns if c not in keys]
        per_trace = [pl.col(c) / n for c in value_cols if c != "instances"]
        parts.append(sums.with_columns(per_trace))
    stacked = pl.concat(parts, how="vertical_relaxed")
    n_traces = len(side.facts)
    aggs = [
        (pl.col(c).max() if c == "instances" else pl.col(c).sum() / n_traces).alias(c)
        for c in stacked.columns
        if c not in keys
    ]
    return stacked.group_by(keys, maintain_order=True).agg(aggs)


def _join_sides(base: pl.DataFrame, exp: pl.DataFrame, level: str) -> pl.DataFrame:
    keys = list(LEVEL_KEYS[level])
    joined = base.join(exp, on=keys, how="full", coalesce=True, suffix="_exp")
    us = 1 / 1000.0
    b_calls, e_calls = pl.col("calls").fill_null(0.0), pl.col("calls_exp").fill_null(0.0)
    b_us, e_us = pl.col("ns").fill_null(0.0) * us, pl.col("ns_exp").fill_null(0.0) * us
    b_present = pl.col("ns").is_not_null() & ((b_calls > 0) | (b_us > 0))
    e_present = pl.col("ns_exp").is_not_null() & ((e_calls > 0) | (e_us > 0))
    delta = e_us - b_us
    same = (b_calls == e_calls) & (delta.abs() <= b_us.abs() * SAME_PCT / 100.0)
    if level == "step":
        b_present, e_present = pl.lit(True), pl.lit(True)
        same = delta.abs() <= b_us.abs() * SAME_PCT / 100.0
    status = (
        pl.when(b_present.not_() & e_present)
        .then(pl.lit("new"))
        .when(b_present & e_present.not_())
        .then(pl.lit("gone"))
        .when(same)
        .then(pl.lit("same"))
        .otherwise(pl.lit("changed"))
    )
    cols: list[pl.Expr] = [
        *(pl.col(k) for k in keys),
        status.alias("status"),
        b_us.alias("baseline_us"),
        e_us.alias("experiment_us"),
        delta.alias("delta_us"),
        pl.when(b_us != 0).then(delta / b_us * 100.0).alias("delta_pct"),
    ]
    if level != "step":
        cols += [b_calls.alias("baseline_calls"), e_calls.alias("experiment_calls"), (e_calls - b_calls).alias("delta_calls")]
    if "total_ns" in base.columns:
        cols += [
            (pl.col("total_ns").fill_null(0.0) * us).alias("baseline_total_us"),
            (pl.col("total_ns_exp").fill_null(0.0) * us).alias("experiment_total_us"),
        ]
    if "instances" in base.columns:
        cols += [
            pl.col("instances").fill_null(0.0).cast(pl.Int64).alias("baseline_instances"),
            pl.col("instances_exp").fill_null(0.0).cast(pl.Int64).alias("experiment_instances"),
        ]
    out = joined.select(cols)
    if level == "step":  # the parts by |delta|, then the total they add up to
        return out.sort(pl.col("category") == "total", pl.col("delta_us").abs(), descending=[False, True])
    return out.sort(pl.col("delta_us").abs(), *keys, descending=[True, *([False] * len(keys))])


# -- public API -------------------------------------------------------------------


@dataclass
class RunDiff:
    """The comparison of a baseline with an experiment: a summary and one table per level.

    Tables (times in microseconds per step, calls per step; see the module
    docstring): key columns, ``status`` (``new``, ``gone``, ``changed``,
    ``same``), ``baseline_us``, ``experiment_us``, ``delta_us``,
    ``delta_pct`` (null where the baseline is 0), ``baseline_calls``,
    ``experiment_calls``, ``delta_calls``; op levels add inclusive
    ``baseline_total_us``/``experiment_total_us``, the module level
    ``baseline_instances``/``experiment_instances`` (distinct module
    instances merged into the row).  Rows are ordered by ``|delta_us|``
    (the step level's ``total`` row last).
    """

    summary: dict[str, Any]
    tables: dict[str, pl.DataFrame] = field(default_factory=dict)


def _side_info(side: _Side) -> dict[str, Any]:
    mean = side.mean_step_ns
    return {
        "traces": [f.path for f in side.facts],
        "ranks": len(side.facts),
        "steps": [f.steps for f in side.facts],
        "has_steps": all(f.has_steps for f in side.facts),
        "mean_step_us": None if mean is None else mean / 1000.0,
    }


def largest_step_change(step_table: pl.DataFrame) -> dict[str, Any] | None:
    """The step-time category that moved most (``data loading -58 ms`` says why
    a step got faster before any op does), or None when none moved beyond
    :data:`SAME_PCT`."""
    moved = step_table.filter((pl.col("category") != "total") & (pl.col("status") != "same"))
    if moved.height == 0:
        return None
    row = moved.sort(pl.col("delta_us").abs(), descending=True).row(0, named=True)
    return {k: row[k] for k in ("category", "baseline_us", "experiment_us", "delta_us", "delta_pct")}


def explain(op_table: pl.DataFrame, step_delta_us: float, top: int = EXPLAIN_TOP) -> dict[str, Any]:
    """The ops whose self-time deltas account for most of ``step_delta_us``.

    Ops that moved in the step's direction, largest first, until their sum
    reaches the step delta, ``top`` ops are listed, or the next op moved less
    than :data:`EXPLAIN_MIN_PCT` of the step delta.  ``unexplained_us`` is
    the rest of the step delta: negative when these ops grew more than the
    step did (their extra time overlapped other work), and large when the
    change is not in op time at all (idle gaps, waiting, another thread).
    ``all_ops_net_us`` is the net change of every op's self time.
    """
    sign = 1.0 if step_delta_us >= 0 else -1.0
    moved = op_table.filter(pl.col("delta_us") * sign > 0).sort(pl.col("delta_us") * sign, descending=True)
    rows: list[dict[str, Any]] = []
    explained = 0.0
    for row in moved.iter_rows(named=True):
        if len(rows) >= top or (rows and explained * sign >= step_delta_us * sign):
            break
        if abs(row["delta_us"]) < abs(step_delta_us) * EXPLAIN_MIN_PCT / 100.0:
            break
        explained += row["delta_us"]
        rows.append(
            {
                "name": row["name"],
                "status": row["status"],
                "delta_us": row["delta_us"],
                "share_pct": row["delta_us"] / step_delta_us * 100.0 if step_delta_us else None,
            }
        )
    net = float(op_table["delta_us"].sum()) if op_table.height else 0.0
    return {
        "ops": rows,
        "explained_us": explained,
        "unexplained_us": step_delta_us - explained,
        "all_ops_net_us": net,
    }


def compare(
    baseline: Trace | Sequence[Trace],
    experiment: Trace | Sequence[Trace],
    *,
    levels: Sequence[str] = LEVELS,
    exact_names: bool = False,
    top: int = EXPLAIN_TOP,
) -> RunDiff:
    """Compare two runs (a trace each, or the rank traces of each run).

    The summary holds :func:`compare_environments` (``environment``: GPU,
    torch, CUDA, world size of each side, which differ, which are not
    recorded), both sides' mean step time (mean over ranks of each rank's
    mean step), ``step_delta_us``, ``regression_pct`` (positive: the
    experiment is slower), :func:`largest_step_change` and :func:`explain`'s
    ops, computed from the step and op tables whatever ``levels`` asks for.
    """
    unknown = [lv for lv in levels if lv not in LEVELS]
    if unknown:
        raise ValueError(f"unknown level {unknown[0]!r}; choose from {', '.join(LEVELS)}")
    base_traces, exp_traces = _as_traces(baseline, "baseline"), _as_traces(experiment, "experiment")
    base = _Side([_facts(t) for t in base_traces])
    exp = _Side([_facts(t) for t in exp_traces])
    device = base.has_gpu and exp.has_gpu
    tables: dict[str, pl.DataFrame] = {}
    for level in dict.fromkeys([*levels, "op", "step"]):
        tables[level] = _join_sides(
            _side_per_step(base, level, device, exact_names), _side_per_step(exp, level, device, exact_names), level
        )
    b_mean, e_mean = base.mean_step_ns, exp.mean_step_ns
    summary: dict[str, Any] = {
        "environment": compare_environments(base_traces, exp_traces),
        "basis": "device" if device else "host",
        "baseline": _side_info(base),
        "experiment": _side_info(exp),
        "step_delta_us": None,
        "regression_pct": None,
        "explained_by": None,
        "largest_step_change": largest_step_change(tables["step"]),
    }
    if b_mean is not None and e_mean is not None:
        delta_us = (e_mean - b_mean) / 1000.0
        summary["step_delta_us"] = delta_us
        summary["regression_pct"] = (e_mean / b_mean - 1.0) * 100.0 if b_mean else None
        summary["explained_by"] = explain(tables["op"], delta_us, top)
    summary["counts"] = {
        level: {s: int((t["status"] == s).sum()) for s in STATUSES}
        for level, t in tables.items()
    }
    for level in ("op", "step"):
        if level not in levels:
            tables.pop(level)
    return RunDiff(summary=summary, tables=tables)


def diff_level(
    baseline: Trace | Sequence[Trace],
    experiment: Trace | Sequence[Trace],
    level: str,
    *,
    exact_names: bool = False,
) -> pl.DataFrame:
    """One level's table of :func:`compare`."""
    return compare(baseline, experiment, levels=[level], exact_names=exact_names).tables[level]
