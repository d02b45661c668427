"""One rank's collectives: every call, its bytes and its time on the wire.

A collective call is the communication library's own range, ``nccl:*`` or
``gloo:*`` (c10d records one per call, under ``c10d::<op>`` and, in newer
torch, ``record_param_comms``).  Traces from torch builds without those
ranges still have ``record_param_comms`` with a ``Collective name``; such a
range with no library range below it is a call too.  ``wait`` and
``barrier`` bookkeeping ranges are not calls.

Where the call ran:

* NCCL: the ``nccl*`` kernels launched by the call (or by its
  ``record_param_comms`` parent): from the first kernel's start to the last
  one's end.  The host range is only the enqueue: a call whose kernels were
  not captured (or not tied to it) keeps its host range but is marked
  ``timed = False``, and the cross-rank figures (waiting, transfer time, bus
  bandwidth) leave it out: microseconds of enqueue for 78 MB read as
  ~800 GB/s on an A100 pair that moved it at 6 GB/s.
* gloo (and any other library that works on the host): the ``gloo:*`` range
  itself, on gloo's worker thread, which does the transfer (and the
  waiting) on the CPU.

Bytes are the larger of the input and output message
(``In/Out msg nelems`` x ``dtype`` of ``record_param_comms``), the size
nccl-tests reports, so that :func:`bus_factor` turns them into its bus
bandwidth.  Older traces have no message sizes; there the input tensors of
the library range (shape x element size) are used, as torch-tb-profiler
does.

Calls are numbered per rank within their process group and collective
(``seq``): every rank issues the collectives of a group in the same order,
so ``(group, collective, seq)`` names the same call on every rank.  Numbering
per collective rather than per group keeps the matching intact where a
sampled or truncated trace lost a call of another kind.  Newer PyTorch
records the process group's own sequence number of each call
(``record_param_comms``' ``Seq``); where every call of a group and collective has one, it
is the ``seq``, and a call lost on one rank no longer shifts the others.
"""

from __future__ import annotations

import re

import msgspec
import polars as pl

from kinetolens.analysis.gputime.gpu_streams import covered_ns, union_intervals
from kinetolens.analysis.gputime.overview import step_windows
from kinetolens.analysis.ranks.groups import DATA, UNKNOWN, description_dimension, group_dimension
from kinetolens.analysis.ranks.unrecorded_groups import fsdp_issued
from kinetolens.model.trace import Trace
from kinetolens.model.vocabulary import (
    COMM_LIBRARY_PREFIXES,
    GLOO_PREFIX,
    NCCL_PREFIX,
    PARAM_COMMS,
    is_comm_kernel,
    is_comm_kernel_name,
    is_comm_op,
)
from kinetolens.registry.dtypes import dtype_bytes

#: ``record_param_comms`` ranges that are bookkeeping, not transfers.
NOT_CALLS = ("wait", "barrier", "init", "")

#: c10::ScalarType names, as ``record_param_comms`` spells its dtype.
SCALAR_TYPE_BYTES: dict[str, int] = {
    "Float": 4, "Double": 8, "Half": 2, "BFloat16": 2, "Long": 8, "Int": 4, "Short": 2,
    "Char": 1, "Byte": 1, "Bool": 1, "ComplexFloat": 8, "ComplexDouble": 16,
    "Float8_e4m3fn": 1, "Float8_e5m2": 1,
}  # fmt: skip

#: Collective kind (nccl-tests' naming) from the spelling in a trace.
_KINDS: tuple[tuple[str, str], ...] = (
    ("allreduce", r"all_?reduce"),
    ("reduce_scatter", r"reduce_?scatter"),
    ("allgather", r"all_?gather"),
    ("alltoall", r"all_?to_?all"),
    ("broadcast", r"broadcast"),
    ("reduce", r"reduce"),
    ("sendrecv", r"send|recv"),
    ("barrier", r"barrier"),
    ("gather", r"gather"),
    ("scatter", r"scatter"),
)

CALL_SCHEMA: dict[str, pl.DataType] = {
    "group": pl.String(),
    "collective": pl.String(),
    "kind": pl.String(),
    "seq": pl.Int64(),
    "step": pl.Int64(),
    "op_id": pl.Int64(),
    "host_ts": pl.Int64(),
    "host_dur": pl.Int64(),
    "ts": pl.Int64(),
    "dur": pl.Int64(),
    "kernels": pl.Int64(),
    "bytes": pl.Int64(),
    "group_size": pl.Int64(),
    #: torch's description of the group and its global ranks (text), where recorded.
    "group_desc": pl.String(),
    "group_ranks": pl.String(),
    #: The parallel dimension the call serves and the evidence for it
    #: (:func:`kinetolens.analysis.ranks.groups.group_dimension`).
    "dimension": pl.String(),
    "basis": pl.String(),
    "timed": pl.Boolean(),
}

STEP_SCHEMA: dict[str, pl.DataType] = {
    "step": pl.Int64(),
    "start": pl.Int64(),
    "step_ns": pl.Int64(),
    "compute_ns": pl.Int64(),
    "comm_ns": pl.Int64(),
    "overlap_ns": pl.Int64(),
    "other_ns": pl.Int64(),
}


def collective_kind(name: str) -> str:
    """``allreduce``, ``allgather``, ... from ``nccl:all_reduce``, ``_all_gather_base``."""
    low = name.lower().split(":", 1)[-1]
    for kind, pattern in _KINDS:
        if re.search(pattern, low):
            return kind
    return low.strip("_") or "unknown"


def bus_factor(kind: str, ranks: int | None) -> float | None:
    """nccl-tests' bus-bandwidth factor: busbw = algbw x factor.

    all-reduce moves ``2(n-1)/n`` of the message over each rank's link;
    all-gather, reduce-scatter and all-to-all ``(n-1)/n``; broadcast,
    reduce and point-to-point the whole message once.
    """
    if not ranks or ranks < 1:
        return None
    n = float(ranks)
    if kind == "allreduce":
        return 2.0 * (n - 1) / n
    if kind in ("allgather", "reduce_scatter", "alltoall", "gather", "scatter"):
        return (n - 1) / n
    if kind in ("broadcast", "reduce", "sendrecv"):
        return 1.0
    return None


def _element_bytes(dtype: str | None) -> float | None:
    if not dtype:
        return None
    return SCALAR_TYPE_BYTES.get(dtype) or dtype_bytes(dtype)


def _tensor_bytes(dims_text: str | None, types_text: str | None) -> int | None:
    """Bytes of the tensor inputs of a range (shape x element size)."""
    if not dims_text or not types_text:
        return None
    try:
        dims = msgspec.json.decode(dims_text)
        types = msgspec.json.decode(types_text)
    except msgspec.DecodeError:
        return None
    total = 0.0
    known = False
    for shape, dtype in zip(dims, types, strict=False):
        size = _element_bytes(dtype) if isinstance(dtype, str) else None
        if (
            size is None
            or not isinstance(shape, list)
            or any(isinstance(d, list) for d in shape)
        ):
            continue
        count = 1
        for d in shape:
            count *= int(d)
        total += count * size
        known = True
    return int(total) if known else None


def _message_bytes(row: dict) -> int | None:
    size = _element_bytes(row.get("p_dtype"))
    nelems = [v for v in (row.get("p_in"), row.get("p_out")) if v is not None]
    if size is not None and nelems:
        return int(max(nelems) * size)
    return _tensor_bytes(row.get("input_dims"), row.get("input_types"))


def _call_ops(ops: pl.DataFrame) -> pl.DataFrame:
    """The ops that are collective calls, with their ``record_param_comms`` fields."""
    name = pl.col("name")
    library = pl.any_horizontal(*(name.str.starts_with(p) for p in COMM_LIBRARY_PREFIXES))
    params = ops.filter(name == PARAM_COMMS).select(
        p_id="op_id",
        p_parent="parent_id",
        p_collective="collective_name",
        p_in="in_msg_nelems",
        p_out="out_msg_nelems",
        p_dtype="comm_dtype",
        p_size="group_size",
        p_group="process_group_name",
        p_seq="comm_seq",
        p_desc="process_group_desc",
        p_ranks="process_group_ranks",
        p_found=pl.lit(True),
    )
    lib = ops.filter(library).join(
        params, left_on="parent_id", right_on="p_id", how="left"
    )
    # record_param_comms with a collective name and no library range under it
    covered = lib["parent_id"].drop_nulls()
    bare = (
        ops.filter((name == PARAM_COMMS) & ~pl.col("op_id").is_in(covered.implode()))
        .filter(
            pl.col("collective_name").is_not_null()
            & ~pl.col("collective_name").is_in(NOT_CALLS)
        )
        .join(params, left_on="op_id", right_on="p_id", how="left")
        .with_columns(name=pl.col("collective_name"))
    )
    return pl.concat([lib, bare], how="diagonal_relaxed")


def _nccl_backend(trace: Trace) -> bool:
    """Whether collectives without a library range (bare ``record_param_comms``)
    are NCCL's: the trace's backend says so, else its NCCL kernels do."""
    info = trace.metadata.get("distributedInfo")
    backend = info.get("backend") if isinstance(info, dict) else None
    if isinstance(backend, str) and backend:
        return "nccl" in backend.lower()
    k = trace.kernels
    return bool(k.height) and bool(
        k.select(is_comm_kernel_name(pl.col("name")).any()).item()
    )


def collective_calls(trace: Trace) -> pl.DataFrame:
    """One row per collective call of this rank (see the module docstring)."""
    return numbered_calls(call_rows(trace))


#: :func:`call_rows`' columns: the calls' and the sequence number torch recorded (null where it did not).
ROW_SCHEMA: dict[str, pl.DataType] = {**CALL_SCHEMA, "p_seq": pl.Int64()}


def call_rows(trace: Trace) -> pl.DataFrame:
    """:func:`collective_calls` before they are numbered (:func:`numbered_calls`):
    a trace read a step window at a time numbers its windows' calls together."""
    calls = _call_ops(trace.ops)
    if calls.height == 0:
        return pl.DataFrame(schema=ROW_SCHEMA)
    # Kernels belong to the call when launched by it or by its record_param_comms.
    owners = pl.concat(
        [
            calls.select(call_id="op_id", owner="op_id"),
            calls.filter(
                pl.col("p_found").fill_null(False) & pl.col("name").str.contains(":")
            ).select(call_id="op_id", owner="parent_id"),
        ]
    ).unique()
    k = trace.kernels
    device = pl.DataFrame(
        schema={
            "call_id": pl.Int64,
            "k_ts": pl.Int64,
            "k_end": pl.Int64,
            "kernels": pl.UInt32,
        }
    )
    if k.height:
        device = (
            k.filter(is_comm_kernel(k))
            .join(owners, left_on="op_id", right_on="owner")
            .group_by("call_id")
            .agg(
                k_ts=pl.col("ts").min(),
                k_end=(pl.col("ts") + pl.col("dur")).max(),
                kernels=pl.len(),
            )
        )
    rows = calls.join(device, left_on="op_id", right_on="call_id", how="left")
    extra = [c for c in ("input_dims", "input_types") if c not in rows.columns]
    rows = rows.with_columns(*(pl.lit(None, pl.String).alias(c) for c in extra))
    msg = rows.select(
        "p_dtype", "p_in", "p_out", "input_dims", "input_types"
    ).to_dicts()
    out = rows.select(
        group=pl.col("p_group").fill_null(""),
        collective=pl.col("name").str.replace(r"^(nccl|gloo):", ""),
        step=pl.col("step"),
        op_id=pl.col("op_id"),
        host_ts=pl.col("ts"),
        host_dur=pl.col("dur"),
        ts=pl.coalesce("k_ts", "ts"),
        dur=pl.coalesce(pl.col("k_end") - pl.col("k_ts"), pl.col("dur")),
        kernels=pl.col("kernels").fill_null(0).cast(pl.Int64),
        bytes=pl.Series([_message_bytes(r) for r in msg], dtype=pl.Int64),
        group_size=pl.col("p_size"),
        group_desc=pl.col("p_desc"),
        group_ranks=pl.col("p_ranks"),
        p_seq=pl.col("p_seq"),
        nccl=pl.col("name").str.starts_with(NCCL_PREFIX)
        | (~pl.col("name").str.contains(":") & pl.lit(_nccl_backend(trace))),
    )
    # NCCL calls whose kernels were not captured keep their host range (they
    # are still counted as calls, never dropped) but are not timed.
    out = out.with_columns(
        kind=pl.col("collective").map_elements(collective_kind, return_dtype=pl.String),
        timed=(pl.col("kernels") > 0) | ~pl.col("nccl"),
    )
    out = _with_dimensions(out.with_columns(fsdp=fsdp_issued(trace.ops, rows)), trace)
    return out.with_columns(seq=pl.lit(None, pl.Int64)).select(list(ROW_SCHEMA)).cast(ROW_SCHEMA)  # type: ignore[arg-type]


def numbered_calls(rows: pl.DataFrame) -> pl.DataFrame:
    """:func:`call_rows` in start order, each numbered within its group and
    collective: torch's sequence number where it recorded one for every such
    call, else their order."""
    recorded = pl.col("p_seq").is_not_null().all().over("group", "collective")
    out = rows.sort("host_ts").with_columns(
        seq=pl.when(recorded).then(pl.col("p_seq")).otherwise(pl.int_range(pl.len()).over("group", "collective"))
    )
    return out.select(list(CALL_SCHEMA)).cast(CALL_SCHEMA)  # type: ignore[arg-type]


#: The group of a call the trace does not place, among several groups (:mod:`.unrecorded_groups`).
NOT_RECORDED = "(not recorded)"


def _listed_groups(trace: Trace) -> list[dict]:
    """``distributedInfo``'s ``pg_config``: the process groups this rank is in."""
    info = trace.metadata.get("distributedInfo")
    configs = info.get("pg_config") if isinstance(info, dict) else None
    return [c for c in (configs if isinstance(configs, list) else []) if isinstance(c, dict) and c.get("pg_name") is not None]


def _pg_config(listed: list[dict]) -> dict[str, dict]:
    """The listed groups by name; where the rank is in one group only, or
    every group it is in spans the same ranks (a job's extra whole-world
    groups), the default one also under ``""``: a call without a recorded
    group ran on it, or on one just like it."""
    out = {str(c["pg_name"]): c for c in listed}
    spans = {tuple(c["ranks"]) if isinstance(c.get("ranks"), list) else None for c in listed}
    if len(listed) == 1 or (len(spans) == 1 and None not in spans):
        out[""] = next((c for c in listed if c.get("pg_desc") == "default_pg"), listed[0])
    return out


def _unrecorded(fsdp: bool, kind: str, listed: list[dict]) -> tuple[str, str | None, str | None, str, str]:
    """``(group, description, ranks, dimension, basis)`` of a call that names no
    group while the rank is in several (see :mod:`.unrecorded_groups`)."""
    names = ", ".join(str(c.get("pg_desc") or c["pg_name"]) for c in listed)
    if not fsdp:
        by_kind, why = group_dimension(None, None, kind, None)  # send/recv and all-to-all name theirs
        if by_kind != UNKNOWN:
            return NOT_RECORDED, None, None, by_kind, f"{why}; the trace records no group for the call"
        return NOT_RECORDED, None, None, UNKNOWN, (
            f"the trace records no group for the call, and this rank is in {len(listed)} ({names})")
    data = [c for c in listed if description_dimension(c.get("pg_desc")) == DATA]
    if len(data) != 1:
        return NOT_RECORDED, None, None, DATA, "FSDP issued it (FSDP's collectives are data parallel); the trace records no group"
    c = data[0]
    ranks = str(c["ranks"]) if isinstance(c.get("ranks"), list) else None
    return str(c["pg_name"]), c.get("pg_desc"), ranks, DATA, (
        f"FSDP issued it; the trace records no group, and {c.get('pg_desc')!r} is this rank's one data-parallel group")


def _with_dimensions(calls: pl.DataFrame, trace: Trace) -> pl.DataFrame:
    """Each call's group description and ranks (from its args, else
    ``distributedInfo``'s group config) and the dimension they name."""
    listed = _listed_groups(trace)
    configs = _pg_config(listed)
    world = trace.world_size
    rows = calls.select("group", "group_desc", "group_ranks", "kind", "fsdp").to_dicts()
    group, desc, ranks, dim, basis = [], [], [], [], []
    for r in rows:
        if not r["group"] and "" not in configs and len(listed) > 1 and not r["group_desc"]:
            g, d, rk, named, why = _unrecorded(bool(r["fsdp"]), r["kind"], listed)
        else:
            c = configs.get(r["group"] or "", {})
            g, d = r["group"], r["group_desc"] or c.get("pg_desc")
            rk = r["group_ranks"] if r["group_ranks"] not in (None, "", "[]") else (
                str(c["ranks"]) if isinstance(c.get("ranks"), list) else None
            )
            named, why = group_dimension(d, rk, r["kind"], world)
        group.append(g)
        desc.append(d)
        ranks.append(rk)
        dim.append(named)
        basis.append(why)
    return calls.with_columns(
        group=pl.Series(group, dtype=pl.String),
        group_desc=pl.Series(desc, dtype=pl.String),
        group_ranks=pl.Series(ranks, dtype=pl.String),
        dimension=pl.Series(dim, dtype=pl.String),
        basis=pl.Series(basis, dtype=pl.String),
    )


def dimension_exposure(trace: Trace, calls: pl.DataFrame) -> pl.DataFrame:
    """Per parallel dimension, group and step: ``comm_ns``, the wall time its
    timed calls are in flight (their union: concurrent calls count once), and
    ``exposed_ns``, the part of it no computation on any stream runs beside
    (see :func:`compute_and_comm_intervals`)."""
    schema = {"dimension": pl.String, "group": pl.String, "step": pl.Int64, "comm_ns": pl.Int64, "exposed_ns": pl.Int64}
    timed = calls.filter(pl.col("timed") & (pl.col("dur") > 0))
    if timed.height == 0:
        return pl.DataFrame(schema=schema)
    compute, _ = compute_and_comm_intervals(trace)
    rows = []
    by = ["dimension", "group"]
    spans = timed.select(*by, "ts", end=pl.col("ts") + pl.col("dur"))
    for w in step_windows(trace).iter_rows(named=True):
        a, b = int(w["start"]), int(w["end"])
        cp = _clip(compute, a, b)
        for (dim, group), part in sorted(spans.group_by(by), key=lambda g: (str(g[0][0]), str(g[0][1]))):
            mine = union_intervals(_clip(part.select("ts", "end"), a, b))
            comm_ns = covered_ns(mine)
            if comm_ns == 0:
                continue
            both = covered_ns(union_intervals(pl.concat([cp, mine])))
            rows.append({"dimension": dim, "group": group, "step": w["step"], "comm_ns": comm_ns,
                         "exposed_ns": both - covered_ns(cp)})  # fmt: skip
    return pl.DataFrame(rows, schema=schema)


def compute_and_comm_intervals(trace: Trace) -> tuple[pl.DataFrame, pl.DataFrame]:
    """``[ts, end)`` intervals of computation and of communication.

    With GPU kernels: computation is every kernel that is not communication
    (:func:`~kinetolens.model.vocabulary.is_comm_kernel`, the step
    breakdown's rule; memcpy and memset are neither, as in
    torch-tb-profiler), communication those kernels plus any gloo ranges.  Without: computation is the host ops that
    neither wrap nor wait for a collective, communication the gloo ranges.
    """
    cols = [pl.col("ts"), (pl.col("ts") + pl.col("dur")).alias("end")]
    gloo = trace.ops.filter(pl.col("name").str.starts_with(GLOO_PREFIX)).select(cols)
    k = trace.kernels.filter(pl.col("dur") >= 0)
    if k.height:
        kernel = pl.col("kind").cast(pl.String) == "kernel"
        comm_kernel = is_comm_kernel(k)
        compute = k.filter(kernel & ~comm_kernel).select(cols)
        comm = pl.concat([k.filter(kernel & comm_kernel).select(cols), gloo])
    else:
        host = trace.ops.filter(
            (pl.col("kind").cast(pl.String) == "op") & ~is_comm_op(pl.col("name"))
        )
        compute = host.select(cols)
        comm = gloo
    return union_intervals(compute), union_intervals(comm)


def _clip(intervals: pl.DataFrame, start: int, end: int) -> pl.DataFrame:
    return intervals.filter((pl.col("end") > start) & (pl.col("ts") < end)).select(
        ts=pl.max_horizontal("ts", pl.lit(start)),
        end=pl.min_horizontal("end", pl.lit(end)),
    )


def comm_overlap_per_step(trace: Trace) -> pl.DataFrame:
    """Per step: wall time, computation, communication, their overlap, and the rest (ns).

    ``other = step - (computation + communication - overlap)``: torch-tb-profiler's
    "computation / communication / overlap / other" split of its Distributed view,
    on kinetolens' disjoint step windows.
    """
    compute, comm = compute_and_comm_intervals(trace)
    rows = []
    for w in step_windows(trace).iter_rows(named=True):
        a, b = int(w["start"]), int(w["end"])
        cp, cm = _clip(compute, a, b), _clip(comm, a, b)
        comp_ns, comm_ns = covered_ns(cp), covered_ns(cm)
        both = covered_ns(union_intervals(pl.concat([cp, cm])))
        overlap = comp_ns + comm_ns - both
        rows.append({
            "step": w["step"], "start": a, "step_ns": b - a, "compute_ns": comp_ns, "comm_ns": comm_ns,
            "overlap_ns": overlap, "other_ns": (b - a) - both,
        })  # fmt: skip
    return pl.DataFrame(rows, schema=STEP_SCHEMA)
