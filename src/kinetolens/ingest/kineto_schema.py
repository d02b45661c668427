"""msgspec schemas for Kineto (Chrome trace) events.

The structs name only the fields kinetolens reads; msgspec skips the rest
while scanning, which is what makes decoding fast.  Every field is optional
because Kineto's writers changed over the years (``external id`` vs
``External id``, ``Input dims`` vs ``Input Dims``, string thread ids in old
traces).  ``gc=False`` keeps hundreds of thousands of short-lived structs out
of the cyclic garbage collector.

An event's ``args`` stay raw JSON text in the first pass and are decoded per
table afterwards (all ops' args in one call, then all runtime calls', all
kernels' ...), each with a struct of only its own fields: one struct holding
every table's fields would make each event's args object several times
larger than it needs to be, and allocating those costs decode time.

Shapes and call stacks stay ``msgspec.Raw`` (the JSON text): only ops that a
report shows ever need them parsed, and nested tensor-list shapes do not fit a
fixed column type anyway.
"""

from __future__ import annotations

import msgspec

Number = int | float
#: Default for optional JSON-text fields (msgspec cannot put Raw in a union).
ABSENT = msgspec.Raw(b"")


#: ``args`` of an event that has none: an empty object, so the args of a
#: table's events can be joined into one JSON array and decoded in one call.
NO_ARGS = msgspec.Raw(b"{}")


class LinkArgs(msgspec.Struct, gc=False):
    """The ids that link events: to their op (External id, in both spellings)
    and between a launch and its GPU work (correlation)."""

    external_id: int | None = msgspec.field(default=None, name="External id")
    external_id_legacy: int | None = msgspec.field(default=None, name="external id")
    correlation: int | None = None


class HostArgs(LinkArgs, gc=False):
    """What kinetolens reads from an op's or annotation's args (and, to check
    them, any host range's)."""

    sequence_number: int | None = msgspec.field(default=None, name="Sequence number")
    fwd_thread_id: int | None = msgspec.field(default=None, name="Fwd thread id")
    record_function_id: int | None = msgspec.field(default=None, name="Record function id")
    # Op inputs.
    input_dims: msgspec.Raw = msgspec.field(default=ABSENT, name="Input Dims")
    input_dims_legacy: msgspec.Raw = msgspec.field(default=ABSENT, name="Input dims")
    input_type: msgspec.Raw = msgspec.field(default=ABSENT, name="Input type")
    concrete_inputs: msgspec.Raw = msgspec.field(default=ABSENT, name="Concrete Inputs")
    call_stack: str | None = msgspec.field(default=None, name="Call stack")
    # Python tracer (with_stack / with_modules).
    python_id: int | None = msgspec.field(default=None, name="Python id")
    python_parent_id: int | None = msgspec.field(default=None, name="Python parent id")
    python_module_id: int | None = msgspec.field(default=None, name="Python module id")
    cbid: int | None = None
    # Collectives (record_param_comms).
    collective_name: str | None = msgspec.field(default=None, name="Collective name")
    in_msg_nelems: int | None = msgspec.field(default=None, name="In msg nelems")
    out_msg_nelems: int | None = msgspec.field(default=None, name="Out msg nelems")
    group_size: int | None = msgspec.field(default=None, name="Group size")
    comm_dtype: str | None = msgspec.field(default=None, name="dtype")
    process_group_name: str | None = msgspec.field(default=None, name="Process Group Name")
    #: What torch says the group is for (``default_pg``, a DeviceMesh dimension's ``mesh_tp``, ...).
    process_group_desc: str | None = msgspec.field(default=None, name="Process Group Description")
    #: The group's global ranks, as text (``[0, 1, 2, 3]``).
    process_group_ranks: str | None = msgspec.field(default=None, name="Process Group Ranks")
    #: The process group's sequence number of the call (newer PyTorch), the same on every rank.
    comm_seq: int | None = msgspec.field(default=None, name="Seq")


class RuntimeArgs(LinkArgs, gc=False):
    """A runtime or driver call's (or a sync's) args: of the host fields, only
    the links and ``cbid`` occur on them (checked on every stored trace), so
    reading the other HostArgs fields from each of them would be wasted
    time.  ROCm names the kernel a launch enqueues (``kernel``): a graph
    capture trace's only record of the kernels captured, which never run
    then."""

    cbid: int | None = None
    kernel: str | None = None


class PythonArgs(msgspec.Struct, gc=False):
    """A Python frame's (``python_function``) args: its ids in the frame tree."""

    python_id: int | None = msgspec.field(default=None, name="Python id")
    python_parent_id: int | None = msgspec.field(default=None, name="Python parent id")
    python_module_id: int | None = msgspec.field(default=None, name="Python module id")


class DeviceArgs(LinkArgs, gc=False):
    """What kinetolens reads from a GPU activity's args (kernels, copies, annotations)."""

    device: int | None = None
    stream: int | None = None
    context: int | None = None
    queued: int | None = None
    grid: list[int] | str | None = None
    block: list[int] | str | None = None
    registers_per_thread: int | None = msgspec.field(default=None, name="registers per thread")
    shared_memory: int | None = msgspec.field(default=None, name="shared memory")
    blocks_per_sm: float | None = msgspec.field(default=None, name="blocks per SM")
    warps_per_sm: float | None = msgspec.field(default=None, name="warps per SM")
    occupancy: float | None = msgspec.field(default=None, name="est. achieved occupancy %")
    theoretical_occupancy: float | None = msgspec.field(default=None, name="theoretical occupancy %")
    bytes: int | None = None
    size: int | None = None  # an MTIA DMA request's bytes
    # Kineto's bytes / exact ns duration: the written ``dur`` may be whole µs.
    memory_bw_gbps: float | None = msgspec.field(default=None, name="memory bandwidth (GB/s)")
    # The graph and graph node a replayed activity ran as (0 for eager work).
    graph_id: int | None = msgspec.field(default=None, name="graph id")
    graph_node_id: int | None = msgspec.field(default=None, name="graph node id")


class MemoryArgs(msgspec.Struct, gc=False):
    """A ``[memory]`` allocator instant's args."""

    addr: int | None = msgspec.field(default=None, name="Addr")
    alloc_bytes: int | None = msgspec.field(default=None, name="Bytes")
    total_allocated: int | None = msgspec.field(default=None, name="Total Allocated")
    total_reserved: int | None = msgspec.field(default=None, name="Total Reserved")
    device_id: int | None = msgspec.field(default=None, name="Device Id")
    device_type: int | None = msgspec.field(default=None, name="Device Type")


class MetaArgs(msgspec.Struct, gc=False):
    """A metadata (``ph: "M"``) event's args: thread and process names and labels."""

    meta_name: str | None = msgspec.field(default=None, name="name")
    labels: str | None = None


class Event(msgspec.Struct, gc=False):
    """One Chrome-trace event with float or integer microsecond times."""

    ph: str = ""
    cat: str | None = None
    name: str | None = None
    pid: int | str | None = None
    tid: int | str | None = None
    ts: Number | None = None
    dur: Number | None = None
    id: int | str | None = None
    bp: str | None = None
    args: msgspec.Raw = NO_ARGS


class ExactTimeEvent(Event, gc=False):
    """The same event with ``ts`` kept as its JSON text.

    Epoch-scale microsecond timestamps with a fractional part
    (``1712195495519689.047``) need 19 significant digits in nanoseconds,
    more than float64 holds; such files are decoded with this struct and the
    text is converted to integer nanoseconds exactly.
    """

    ts: msgspec.Raw = msgspec.Raw(b"null")  # type: ignore[assignment]
