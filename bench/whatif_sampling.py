#!/usr/bin/env python3
"""What stopping the recommendations' what-if early costs in accuracy, and saves in time.

The what-if behind the recommendations' savings re-times at most
``SAMPLE_STEPS`` steps, spread over the trace, and stops once every change's
mean effect per step has a standard error under ``SETTLED_SHARE`` of the step
(:mod:`kinetolens.analysis.paths.sampling`).  For each real trace with at least
three complete steps this re-times the recommendations' change sets three ways:

* ``settled``: the default (what the summary does);
* ``sample``: the same steps to the bound, never stopping early;
* ``all``: every complete step;

and prints, per trace, the steps each re-timed, the CPU seconds each took and
the largest difference of a change's mean saving per step from ``all``'s,
in ms and as a share of the mean step.

Usage::

    python3 bench/whatif_sampling.py [TRACE ...] [--write]

Without traces: every Kineto trace under ``../shared/traces``.  ``--write``
puts the table in docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import DOC, TRACES  # noqa: E402

#: The change sets the recommendations simulate (their registered rules' changes, and no change).
SETS = [(), ("category:data_loading=0",), ("category:data_loading=0", "category:cpu=0"), ("launch:0",), ("overlap:communication",)]
MIN_STEPS = 3
HEADER = "| trace | steps | re-timed settled / sample / all | CPU s settled / sample / all | worst saving off (ms, % of step): settled | sample |"


def traces() -> list[Path]:
    found = [p for p in sorted(TRACES.rglob("*.json*")) if p.suffix in (".json", ".gz") and "nsys" not in p.parts]
    return [p for p in found if not p.name.endswith((".csv.gz", ".sqlite.gz"))]


def compare(path: Path) -> str | None:
    import kinetolens
    from kinetolens.analysis.paths.whatif import parse_change, whatif_many
    from kinetolens.analysis.session import whole_steps
    from kinetolens.errors import TraceError

    try:
        trace = whole_steps(kinetolens.load(path))
    except (TraceError, OSError, ValueError):
        return None
    if trace.steps.height < MIN_STEPS:
        return None
    sets = [[parse_change(s) for s in specs] for specs in SETS]
    runs = {}
    for name, kwargs in (("settled", {}), ("sample", {"settle": None}), ("all", {"max_steps": None})):
        t = time.process_time()
        try:
            runs[name] = (whatif_many(trace, sets, paths=False, **kwargs), time.process_time() - t)
        except TraceError:
            return None
    step_us = runs["all"][0][0].measured_us
    if not step_us:
        return None

    def off(name: str) -> str:
        worst = max(abs(a.delta_us - b.delta_us) for a, b in zip(runs[name][0], runs["all"][0], strict=True)) / 1000
        return f"{worst:.2f}, {100 * worst * 1000 / step_us:.1f}%"

    counts = " / ".join(str(len(runs[n][0][0].steps)) for n in ("settled", "sample", "all"))
    cpu = " / ".join(f"{runs[n][1]:.2f}" for n in ("settled", "sample", "all"))
    rel = path.relative_to(TRACES) if path.is_relative_to(TRACES) else path
    return f"| {rel} | {trace.steps.height} | {counts} | {cpu} | {off('settled')} | {off('sample')} |"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", nargs="*", type=Path)
    ap.add_argument("--write", action="store_true", help="put the table in docs/BENCHMARKS.md")
    args = ap.parse_args(argv)
    rows = [HEADER, "|---|---:|---|---|---|---|"]
    print(rows[0], flush=True)
    for path in args.traces or traces():
        row = compare(path)
        if row:
            print(row, flush=True)
            rows.append(row)
    if args.write:
        text = DOC.read_text()
        begin, end = "<!-- whatif-sampling -->", "<!-- /whatif-sampling -->"
        table = "\n".join(rows)
        if begin in text:
            head, rest = text.split(begin, 1)
            text = head + begin + "\n" + table + "\n" + end + rest.split(end, 1)[1]
        else:
            text += f"\n{begin}\n{table}\n{end}\n"
        DOC.write_text(text)


if __name__ == "__main__":
    main()
