"""Write an N-rank run directory from one real rank's trace, with one straggler.

Every rank gets a copy of the source trace with its own ``distributedInfo``
(rank, world size) and its own arrival times at collectives: a collective's
device event (an NCCL kernel, or a ``gloo:*`` range) starts later by a random
share of its duration (``jitter``) and ends where it ended, since all ranks
finish a collective together.  The straggler arrives ``straggle`` of each
collective's duration late, so the others wait that long for it.  With
``plant`` (``--plant``) its lateness is work: a kernel named
:data:`PLANTED_KERNEL` on the collective's stream runs from when the stream
was free and the collective launched until the collective starts (the
cross-rank critical path must go through it).

The copies are thinned to what the distributed view reads (steps, the
collectives' host ranges, runtime calls and device activity; every
``keep_every``-th compute kernel) so that runs of hundreds of ranks stay
small and quick to write and load.

    python bench/gen_ranks.py OUT_DIR --ranks 64 --straggler 17 \
        --source ../shared/traces/hta/trace_filter/sampled_rank-0.json.gz
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
from pathlib import Path
from typing import Any

HOST_KEEP = ("ProfilerStep#", "nccl:", "gloo:", "c10d::", "record_param_comms")
DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
#: The straggler's planted work before each collective (``plant``).
PLANTED_KERNEL = "planted_straggler_kernel"
#: Correlation ids of planted launches start here (above any real one).
PLANTED_CORRELATION = 1 << 40
#: The host thread planted kernels are launched from.
PLANTED_PID, PLANTED_TID = 1, 1 << 30


def _read(path: Path) -> dict[str, Any]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)


def _is_collective(e: dict[str, Any]) -> bool:
    name = str(e.get("name", ""))
    return (
        e.get("cat") == "kernel" and name.lower().startswith("nccl")
    ) or name.startswith("gloo:")


def thin(doc: dict[str, Any], keep_every: int = 1) -> dict[str, Any]:
    """The events the distributed view needs, every ``keep_every``-th compute
    kernel (for 0, no compute, memcpy or memset: a step of collectives only)."""
    kept, compute, launched = [], 0, set()
    for e in doc.get("traceEvents", []):
        cat, name = e.get("cat"), str(e.get("name", ""))
        if (
            e.get("ph") != "X"
            or cat in ("cpu_op", "user_annotation")
            and name.startswith(HOST_KEEP)
            or cat == "Trace"
        ):
            kept.append(e)
        elif cat in DEVICE_CATS:
            if (
                _is_collective(e)
                or keep_every > 0 and cat != "kernel"
                or keep_every > 0 and (compute := compute + 1) % keep_every == 0
            ):
                kept.append(e)
                launched.add((e.get("args") or {}).get("correlation"))
    # runtime calls of the device activity kept (a launch without its kernel is noise)
    runtime = [
        e for e in doc.get("traceEvents", [])
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and (e.get("args") or {}).get("correlation") in launched
    ]  # fmt: skip
    return {**doc, "traceEvents": kept + runtime}


def mesh_groups(rank: int, world: int, tp: int, ep: int) -> dict[str, list[int]]:
    """The rank's tensor, expert and data parallel groups on a (dp, ep, tp) mesh,
    tensor parallel fastest: tp contiguous ranks, ep ranks strided by tp, the
    rest strided by tp * ep."""
    block = tp * ep
    t, e, d = rank % tp, (rank // tp) % ep, rank // block
    return {
        "tp": [d * block + e * tp + i for i in range(tp)],
        "ep": [d * block + j * tp + t for j in range(ep)],
        "dp": [k * block + e * tp + t for k in range(world // block)],
    }


def mesh_dims(events: list[dict[str, Any]]) -> dict[int, str]:
    """Per ``record_param_comms`` event (by ``id``), the mesh dimension its call is
    given: all-to-all is expert parallel, all-reduces alternate data and tensor."""
    params = sorted((e for e in events if e.get("name") == "record_param_comms" and e.get("dur")), key=lambda e: e["ts"])
    calls = [e for e in events if str(e.get("name", "")).startswith("nccl:") and e.get("ph") == "X"]
    dims, reduces = {}, 0
    for p in params:
        inner = next((c for c in calls if c.get("tid") == p.get("tid") and p["ts"] <= c["ts"] <= p["ts"] + p["dur"]), None)
        if inner is None:
            continue
        if "all_to_all" in inner["name"]:
            dims[id(p)] = "ep"
        elif "all_reduce" in inner["name"]:
            dims[id(p)] = ("dp", "tp")[reduces % 2]
            reduces += 1
    return dims


def rank_doc(
    base: dict[str, Any],
    rank: int,
    world: int,
    rng: random.Random,
    jitter: float,
    straggle: float,
    straggler: bool,
    plant: bool = False,
    mesh: tuple[int, int] | None = None,
    dims: dict[int, str] | None = None,
) -> dict[str, Any]:
    """One rank's trace: the base with this rank's identity and arrival times
    (and, with ``mesh`` = (tp, ep), each collective's process group on it)."""
    info = dict(base.get("distributedInfo") or {})
    info.update(rank=rank, world_size=world)
    info.setdefault("backend", "nccl")
    events = []
    ready = _ready_times(base["traceEvents"]) if straggler and plant else {}
    groups = mesh_groups(rank, world, *mesh) if mesh else {}
    for e in base["traceEvents"]:
        if dims and id(e) in dims:
            g = groups[dims[id(e)]]
            e = {**e, "args": {**(e.get("args") or {}), "Process Group Name": f"{dims[id(e)]}{g[0]}",
                               "Process Group Description": f"mesh_{dims[id(e)]}",
                               "Process Group Ranks": json.dumps(g), "Group size": len(g)}}  # fmt: skip
        if e.get("ph") == "X" and _is_collective(e) and e.get("dur"):
            dur = float(e["dur"])
            late = rng.uniform(0.0, jitter) + (straggle if straggler else 0.0)
            lag = min(late, 0.95) * dur
            if id(e) in ready:
                events.extend(_planted(e, ready[id(e)], float(e["ts"]) + lag, len(events)))
            e = {**e, "ts": float(e["ts"]) + lag, "dur": dur - lag}
        events.append(e)
    return {**base, "distributedInfo": info, "traceEvents": events}


def _ready_times(events: list[dict[str, Any]]) -> dict[int, float]:
    """Per collective kernel (by ``id``): when its stream was free and its
    launch call had returned (us), the earliest a kernel before it could start."""
    launch_end = {
        (e.get("args") or {}).get("correlation"): float(e["ts"]) + float(e.get("dur", 0))
        for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")
    }  # fmt: skip
    device = sorted((e for e in events if e.get("ph") == "X" and e.get("cat") in DEVICE_CATS), key=lambda e: float(e["ts"]))
    free: dict[Any, float] = {}
    ready = {}
    for e in device:
        stream = (e.get("pid"), (e.get("args") or {}).get("stream"))
        if _is_collective(e) and e.get("cat") == "kernel":
            start = max(free.get(stream, float("-inf")), launch_end.get((e.get("args") or {}).get("correlation"), float("-inf"))) + 1.0
            ready[id(e)] = min(start, float(e["ts"]))
        free[stream] = max(free.get(stream, float("-inf")), float(e["ts"]) + float(e.get("dur", 0)))
    return ready


def _planted(e: dict[str, Any], start: float, end: float, n: int) -> list[dict[str, Any]]:
    """The straggler's planted kernel on the collective's stream from ``start``
    to the collective's late start, launched from a thread of its own (so no
    op of the collective owns it)."""
    pc = PLANTED_CORRELATION + n
    args = {**(e.get("args") or {}), "correlation": pc, "External id": pc}
    kernel = {**e, "name": PLANTED_KERNEL, "ts": start, "dur": max(end - start, 1.0), "args": args}
    launch = {
        "ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": PLANTED_PID, "tid": PLANTED_TID,
        "ts": start - 2.0, "dur": 1.0, "args": {"correlation": pc, "External id": pc},
    }  # fmt: skip
    return [launch, kernel]


def generate(
    source: Path,
    out_dir: Path,
    ranks: int,
    straggler: int | None,
    *,
    jitter: float = 0.1,
    straggle: float = 0.6,
    keep_every: int = 1,
    seed: int = 0,
    plant: bool = False,
    mesh: tuple[int, int] | None = None,
) -> list[Path]:
    """Write ``ranks`` traces named ``rank-R.json.gz`` into ``out_dir``; return their paths."""
    base = thin(_read(source), keep_every)
    if mesh and ranks % (mesh[0] * mesh[1]):
        raise SystemExit(f"--mesh {mesh[0]},{mesh[1]}: {ranks} ranks are not a whole number of {mesh[0] * mesh[1]}-rank blocks")
    dims = mesh_dims(base["traceEvents"]) if mesh else None
    out_dir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    paths = []
    for r in range(ranks):
        doc = rank_doc(base, r, ranks, rng, jitter, straggle, r == straggler, plant, mesh, dims)
        path = out_dir / f"rank-{r}.json.gz"
        with gzip.open(path, "wt", encoding="utf-8", compresslevel=1) as fh:
            json.dump(doc, fh, separators=(",", ":"))
        paths.append(path)
    return paths


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument(
        "--source", type=Path, required=True, help="a real rank's Kineto trace"
    )
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument(
        "--straggler",
        type=int,
        default=None,
        help="rank that arrives late (default: none)",
    )
    parser.add_argument(
        "--jitter",
        type=float,
        default=0.1,
        help="max random lateness, share of a collective",
    )
    parser.add_argument(
        "--straggle",
        type=float,
        default=0.6,
        help="straggler's lateness, share of a collective",
    )
    parser.add_argument(
        "--keep-every", type=int, default=1, help="keep every k-th compute kernel (0: none)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--plant", action="store_true",
        help=f"make the straggler's lateness a kernel ({PLANTED_KERNEL}) before each collective",
    )  # fmt: skip
    parser.add_argument(
        "--mesh", default=None, metavar="TP,EP",
        help="give the collectives process groups of a (dp, ep, tp) mesh: all-to-alls expert parallel, "
             "all-reduces data and tensor parallel in turn (e.g. 8,4)",
    )  # fmt: skip
    a = parser.parse_args(argv)
    mesh = tuple(int(x) for x in a.mesh.split(",")) if a.mesh else None
    paths = generate(a.source, a.out_dir, a.ranks, a.straggler, jitter=a.jitter, straggle=a.straggle,
                     keep_every=a.keep_every, seed=a.seed, plant=a.plant, mesh=mesh)  # fmt: skip
    print(f"wrote {len(paths)} rank traces to {a.out_dir}")


if __name__ == "__main__":
    main()
