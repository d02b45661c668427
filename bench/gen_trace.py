#!/usr/bin/env python3
"""Build a large, realistic Kineto trace by repeating the steps of a real one.

Benchmarks of multi-GB traces need multi-GB traces with real structure: op
nesting, launches linked to kernels, forward/backward pairs, flows, memory
events.  Random events would exercise none of it.  This script takes a real
trace (default: ``hta/df_index_resolver``, 216k events from a V100 training
job) and writes it out ``N`` times back to back:

* every copy is shifted in time by the span of the source (plus a gap), so
  copies never overlap and each one reads as the next few training steps;
* every id that links events is made fresh per copy (``External id``,
  ``correlation``, flow ``id``, ``Python id``/``Python parent id``,
  ``Sequence number``, ``Record function id``), so no link crosses copies;
* ``ProfilerStep#N`` is renumbered, so steps stay distinct;
* metadata events (``ph: M``) and the top-level keys are written once;
* with ``--launched-only``, GPU activities whose launch the source did not
  record (the previous iteration draining when profiling began) are left
  out: they precede the first step, and repeated they would sit inside later
  steps, which no profiler writes.

Events are encoded and written one copy at a time, so the generator's memory
is the source trace's, whatever the output size.

Usage::

    python3 bench/gen_trace.py --size-mb 256 -o bench/out/gen_256mb.json
    python3 bench/gen_trace.py --size-mb 2048 -o bench/out/gen_2gb.json.gz
    python3 bench/gen_trace.py --launched-only --size-mb 1000 -o bench/out/qwen_1000mb.json \
        --source ../shared/traces/tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz
"""

from __future__ import annotations

import argparse
import gzip
import math
import sys
from decimal import Decimal
from pathlib import Path
from typing import IO, Any

import msgspec

DEFAULT_SOURCE = Path(__file__).resolve().parents[2] / "shared/traces/hta/df_index_resolver/df_index_resolver.json.gz"
#: Event args that hold ids linking events to each other.
LINK_ARGS = ("External id", "external id", "correlation", "Python id", "Python parent id", "Sequence number", "Record function id")
STEP_PREFIX = "ProfilerStep#"
#: Gap between copies, in microseconds.
GAP_US = 1000


def _read(path: Path) -> dict[str, Any]:
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    # Decimal keeps float timestamps' digits exactly (epoch-scale
    # microseconds with three decimals do not fit a float64).
    trace = msgspec.json.Decoder(float_hook=Decimal).decode(data)
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        sys.exit(f"gen_trace: {path}: not a Kineto trace (no traceEvents array)")
    return trace


#: Categories of GPU activities, linked to their launch by ``correlation``.
GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver", "hip_runtime", "hip_driver")


def launched_only(events: list[Any]) -> list[Any]:
    """``events`` without the GPU activities whose launch is not among them."""
    launched = {(e.get("args") or {}).get("correlation") for e in events if e.get("cat") in LAUNCH_CATEGORIES}
    return [e for e in events if e.get("cat") not in GPU_CATEGORIES or (e.get("args") or {}).get("correlation") in launched]


def _max_int(values: Any) -> int:
    return max((v for v in values if isinstance(v, int) and not isinstance(v, bool)), default=0)


class Repeater:
    """Shifts times, ids and step numbers of the source events per copy."""

    def __init__(self, events: list[dict[str, Any]]) -> None:
        self.meta = [e for e in events if e.get("ph") == "M"]
        self.body = [e for e in events if e.get("ph") != "M"]
        timed = [e for e in self.body if isinstance(e.get("ts"), (int, Decimal))]
        start = min(e["ts"] for e in timed)
        end = max(e["ts"] + e.get("dur", 0) for e in timed)
        # Whole microseconds: shifted times keep their own decimals.
        self.period = math.ceil(end - start) + GAP_US
        args = [e.get("args") or {} for e in self.body]
        self.arg_offset = {key: _max_int(a.get(key) for a in args) + 1 for key in LINK_ARGS}
        self.flow_offset = _max_int(e.get("id") for e in self.body) + 1
        steps = [int(e["name"][len(STEP_PREFIX) :]) for e in self.body if str(e.get("name", "")).startswith(STEP_PREFIX)]
        self.step_offset = (max(steps) - min(steps) + 1) if steps else 0
        # Originals, so that each copy is computed from the source, not from
        # the previous copy (no drift of float times).
        self.ts = [e.get("ts") for e in self.body]
        self.ids = [e.get("id") for e in self.body]
        self.arg_values = [{k: a[k] for k in LINK_ARGS if isinstance(a.get(k), int)} for a in args]
        self.step_numbers = [
            int(e["name"][len(STEP_PREFIX) :]) if str(e.get("name", "")).startswith(STEP_PREFIX) else None
            for e in self.body
        ]

    def copy(self, k: int) -> list[dict[str, Any]]:
        """The events of copy ``k`` (the dicts are reused between copies)."""
        shift = k * self.period
        for i, e in enumerate(self.body):
            ts = self.ts[i]
            if isinstance(ts, (int, Decimal)):
                e["ts"] = ts + shift
            fid = self.ids[i]
            if isinstance(fid, int):
                e["id"] = fid + k * self.flow_offset
            values = self.arg_values[i]
            if values:
                a = e["args"]
                for key, v in values.items():
                    a[key] = v + k * self.arg_offset[key]
            step = self.step_numbers[i]
            if step is not None:
                e["name"] = f"{STEP_PREFIX}{step + k * self.step_offset}"
        return self.body


def _write(out: IO[bytes], trace: dict[str, Any], repeater: Repeater, copies: int) -> int:
    encode = msgspec.json.Encoder(decimal_format="number").encode
    head = {k: v for k, v in trace.items() if k != "traceEvents"}
    written = out.write(b'{"traceEvents": [\n')
    first = True
    for event in repeater.meta:
        written += out.write((b"" if first else b",\n") + encode(event))
        first = False
    for k in range(copies):
        events = repeater.copy(k)
        body = b",\n".join(encode(e) for e in events)
        written += out.write((b"" if first else b",\n") + body)
        first = False
        print(f"\r  copy {k + 1}/{copies}", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    tail = encode(head)[1:]  # the metadata keys, after the array
    written += out.write(b"\n]" + (b", " + tail if len(tail) > 1 else b"}"))
    return written


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="real Kineto trace to repeat")
    ap.add_argument("--size-mb", type=float, required=True, help="approximate uncompressed size, MB (10^6 bytes)")
    ap.add_argument("-o", "--output", type=Path, required=True, help="output .json or .json.gz")
    ap.add_argument("--launched-only", action="store_true", help="leave out GPU activities whose launch was not recorded")
    args = ap.parse_args(argv)
    trace = _read(args.source)
    if args.launched_only:
        trace["traceEvents"] = launched_only(trace["traceEvents"])
    repeater = Repeater(trace["traceEvents"])
    one_copy = len(msgspec.json.encode(repeater.body))
    copies = max(1, round(args.size_mb * 1e6 / one_copy))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.output.with_name(args.output.name + ".partial")
    opener = (lambda p: gzip.open(p, "wb", compresslevel=1)) if args.output.suffix == ".gz" else (lambda p: open(p, "wb"))
    with opener(tmp) as out:
        size = _write(out, trace, repeater, copies)
    tmp.replace(args.output)
    print(f"{args.output}: {copies} copies of {args.source.name}, {size / 1e6:.0f} MB uncompressed")


if __name__ == "__main__":
    main()
