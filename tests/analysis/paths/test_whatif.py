"""What-if simulator on real traces."""

from __future__ import annotations

import statistics
from pathlib import Path

import polars as pl
import pytest

from kinetolens.analysis.paths.critical_path import critical_path, step_window
from kinetolens.analysis.paths.whatif import BadChange, parse_change, whatif
from kinetolens.loader import load
from kinetolens.model.steps import without_incomplete_steps

SHARED = Path(__file__).resolve().parents[3].parent / "shared" / "traces" / "kineto"
R0 = SHARED / "resnet50_num_workers_0" / "worker0.1623143089861.pt.trace.json.gz"
R4 = SHARED / "resnet50_num_workers_4" / "worker0.1623212756351.pt.trace.json.gz"

pytestmark = pytest.mark.skipif(not R0.exists() or not R4.exists(), reason="shared ResNet-50 traces missing")


@pytest.fixture(scope="module")
def r0():
    return load(R0)


@pytest.fixture(scope="module")
def r4():
    return load(R4)


def _median_measured(trace) -> float:
    return float(without_incomplete_steps(trace).steps["dur"].median()) / 1000


def _op_slowdown(fast, slow) -> float:
    """How much slower the same host ops ran in ``slow`` (call-weighted ratio of
    mean durations of ops with >= 100 calls in both runs, DataLoader excluded)."""
    def per_call(t):
        ops = without_incomplete_steps(t).ops.filter(~pl.col("name").str.contains("DataLoader|ProfilerStep"))
        return ops.group_by("name").agg(us=pl.col("dur").mean(), n=pl.len())
    j = per_call(fast).join(per_call(slow), on="name", suffix="_s").filter((pl.col("n") >= 100) & (pl.col("n_s") >= 100))
    return float((j["us_s"] * j["n_s"]).sum() / (j["us"] * j["n_s"]).sum())


def test_no_change_reproduces_every_measured_step(r0):
    # the replay explains every measured node time, so no change = measured step
    r = whatif(r0, [])
    assert len(r.steps) == 6
    for s in r.steps:
        assert s.predicted_us == pytest.approx(s.measured_us, abs=1.0)


def test_baseline_path_categories_match_critical_path(r0):
    # the simulator's bound-by rules are the critical path's (data loading on the 0-worker path)
    # over the same graph, both paths cut to the step's own window
    cp = critical_path(r0, step_window(r0, 7))
    sim = whatif(r0, [], step=7).steps[0]
    got = dict(zip(sim.summary["bound_by"], sim.summary["us"]))
    assert got["data_loading"] == pytest.approx(dict(zip(cp.summary["bound_by"], cp.summary["us"]))["data_loading"], rel=0.05)


def test_removing_data_loading_predicts_the_four_worker_run(r0, r4):
    # real pair, same job with 0 and 4 DataLoader workers (V100 ResNet-50).
    # Median steps: the 4-worker run has a warm-up step (182 ms) and one slow step (163 ms).
    measured = _median_measured(r4)  # 126.7 ms
    alone = statistics.median(s.predicted_us for s in whatif(r0, [parse_change("category:dataloader=0")]).steps)
    assert abs(alone - measured) / measured < 0.10, (alone, measured)  # 118.6 ms, -6.4%
    # The first kernels of a step queue behind the previous step's tail (15 ms of it runs
    # into the next step's loading): without that carry-over the prediction would be 106 ms.
    assert alone > 115_000
    # The rest is CPU contention: the 4 workers share the host's cores and the same host
    # ops run 1.22x slower in the 4-worker trace (measured op for op from the two traces,
    # not fitted); with that taken in, the prediction comes closer.
    contention = _op_slowdown(r0, r4)
    assert 1.15 < contention < 1.3
    r = whatif(r0, [parse_change("category:dataloader=0"), parse_change(f"category:cpu={contention:.3f}")])
    both = statistics.median(s.predicted_us for s in r.steps)
    assert abs(both - measured) < abs(alone - measured), (both, alone, measured)  # 130.0 ms, +2.6%


def test_launch_overlap_and_kernel_changes_move_the_step_the_right_way(r0):
    # halving cuDNN kernels on a GPU-heavy path saves time, but less than
    # the kernels' total (the CPU bounds part of the step); launch:0 removes launch delays
    step = 7
    base = whatif(r0, [], step=step).steps[0]
    fast = whatif(r0, [parse_change("category:dataloader=0"), parse_change("kernel:cudnn=0.5")], step=step).steps[0]
    no_dl = whatif(r0, [parse_change("category:dataloader=0")], step=step).steps[0]
    assert fast.predicted_us < no_dl.predicted_us < base.measured_us
    k = r0.kernels.filter(pl.col("name").str.to_lowercase().str.contains("cudnn") & pl.col("ts").is_between(r0.steps.filter(pl.col("step") == step)["ts"][0], r0.steps.filter(pl.col("step") == step)["end"][0]))
    assert no_dl.predicted_us - fast.predicted_us < float(k["dur"].sum()) / 1000 / 2
    launch = whatif(r0, [parse_change("launch:0")], step=step).steps[0]
    assert launch.predicted_us <= base.measured_us
    assert float(launch.summary.filter(pl.col("bound_by") == "launch_overhead")["us"].sum()) == 0


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("kernel=0.5", "is not a change"),
        ("kernel:gemm", "needs NAME=FACTOR"),
        ("op:aten::mm=fast", "is not a number"),
        ("module:encoder=-1", "must be a number >= 0"),
        ("category:gpu=0.5", "unknown category"),
        ("overlap:compute", "only overlap:communication"),
        ("rank:x=median", "rank:N=median"),
    ],
)
def test_bad_specs_say_why(spec, message):
    # bad --change specs are one clear message
    with pytest.raises(BadChange, match=message):
        parse_change(spec)


def _cli(*args: str, columns: int = 80):
    import os
    import subprocess
    import sys

    env = {**os.environ, "COLUMNS": str(columns)}
    return subprocess.run([sys.executable, "-m", "kinetolens.cli.main", *args], capture_output=True, text=True, env=env, timeout=300)


def test_cli_reports_measured_predicted_and_the_new_split():
    # kinetolens whatif TRACE --change SPEC; fits 80 columns, units on every time
    p = _cli("whatif", str(R0), "--change", "category:dataloader=0", "--change", "kernel:cudnn=0.5", "--step", "7")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    text = p.stdout
    assert "measured step   180 ms" in text  # step 7: 179.7 ms
    assert "predicted step" in text and "%" in text
    # Without loading and with cuDNN twice as fast, the host's own ops bound the step.
    assert "New critical path" in text and "CPU ops" in text
    assert "data loading" not in text  # removed: no time left on the path


def test_cli_bad_spec_is_one_line_exit_2():
    # a bad spec is one clear line and exit 2, no traceback
    p = _cli("whatif", str(R0), "--change", "category:gpu=0")
    assert p.returncode == 2
    assert len(p.stderr.strip().splitlines()) == 1
    assert "unknown category 'gpu'" in p.stderr


def test_overlap_hides_waits_on_collectives_not_the_collectives():
    # overlap:communication: what waited for a collective no longer does,
    # but the collectives still run back to back on their stream and the step waits for them.
    # df_index_resolver (2-rank DDP, NCCL on stream 14): the step is host-bound, so hiding
    # communication saves nothing; with host and compute removed, the step cannot drop
    # below the 59.5 ms its collectives take on their own stream.
    trace = load(SHARED.parent / "hta" / "df_index_resolver" / "df_index_resolver.json.gz")
    base = whatif(trace, [parse_change("overlap:communication")], step=3).steps[0]
    assert abs(base.predicted_us - base.measured_us) < 0.005 * base.measured_us
    step = trace.steps.filter(pl.col("step") == 3).row(0, named=True)
    comm = trace.kernels.filter((pl.col("stream") == 14) & pl.col("ts").is_between(step["ts"], step["end"]))
    comm_us = float(comm["dur"].sum()) / 1000
    assert comm_us > 50_000
    changes = [parse_change(s) for s in ("category:cpu=0", "category:gpu_compute=0", "overlap:communication")]
    assert whatif(trace, changes, step=3).steps[0].predicted_us >= comm_us


def test_new_path_table_adds_up_to_the_predicted_step() -> None:
    # Qwen on H100: step 6's host range opens with a 14.1 ms cudaDeviceSynchronize
    # waiting for the previous step; the step itself (35.18 ms) starts when that
    # work ends. The new path's table used to start at the host range and sum to
    # 46.8 ms beside a 32.8 ms prediction; it now covers the step, as the prediction does.
    from tests.conftest import trace_path

    trace = load(trace_path("tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"))
    r = whatif(trace, [parse_change("kernel:gemm=0.5")])
    table = r.summary()
    assert float(table["us"].sum()) == pytest.approx(r.predicted_us, rel=1e-6)  # 32,821 us
    assert float(table["pct"].sum()) == pytest.approx(100.0, abs=0.01)
    assert r.measured_us == pytest.approx(35_183.4, abs=0.1)
