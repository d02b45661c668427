"""Capture side, with real torch on CPU: kinetolens.profile as a context
manager and decorator, ``kinetolens run`` on unmodified scripts (plain,
``-m`` with markers, torchrun), and ``kinetolens demo``.

Every test reads the trace back and checks what a wrong implementation would
get wrong: the file name and directory, exactly which ProfilerStep# ranges
were recorded, that stacks and module names are there, and the metadata.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import socket
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import kinetolens
from kinetolens.capture import layout
from kinetolens.capture import profile as kl_profile
from kinetolens.capture import step as kl_step
from tests.distributed.runs import DistributedRun, torchrun_2  # noqa: F401

HOST = socket.gethostname()
TRACE_RE = r"^(?P<worker>.+)\.(?P<ms>\d{13})\.pt\.trace\.json\.gz$"
THIS_FILE = Path(__file__).name


# -- helpers ------------------------------------------------------------------


def read_trace(path: Path) -> dict[str, Any]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        data = json.load(fh)
    assert isinstance(data.get("traceEvents"), list) and data["traceEvents"]
    return data


def events(path: Path) -> list[dict[str, Any]]:
    return read_trace(path)["traceEvents"]


def step_names(evs: list[dict[str, Any]]) -> list[str]:
    return sorted((e["name"] for e in evs if str(e.get("name", "")).startswith("ProfilerStep#")), key=_step_no)


def _step_no(name: str) -> int:
    return int(name.split("#", 1)[1])


def python_names(evs: list[dict[str, Any]]) -> set[str]:
    return {e["name"] for e in evs if e.get("cat") == "python_function"}


def has_frame_in(names: set[str], filename: str) -> bool:
    """A with_stack frame event ``[dir/]filename(line): function``."""
    pattern = re.compile(rf"(^|/){re.escape(filename)}\(\d+\): ")
    return any(pattern.search(n) for n in names)


def read_metadata(trace: Path) -> dict[str, Any]:
    meta_path = trace.with_name(trace.name.replace(".pt.trace.json.gz", ".kinetolens.json"))
    assert meta_path.is_file(), f"no metadata beside {trace}"
    return json.loads(meta_path.read_text())


def assert_trace_name(trace: Path, worker: str) -> None:
    m = re.match(TRACE_RE, trace.name)
    assert m, trace.name
    assert m["worker"] == worker
    # a real millisecond timestamp from this decade, not seconds or ns
    assert 1.6e12 < int(m["ms"]) < 4.1e12


def tiny_model() -> Any:
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))


def train_step(model: Any, opt: Any) -> None:
    loss = model(torch.randn(8, 16)).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()


def kl_cli(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``kinetolens ARGS`` in a fresh interpreter, as a user would run it."""
    return subprocess.run(
        [sys.executable, "-m", "kinetolens.cli.main", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


# -- context manager ----------------------------------------------------------


@pytest.fixture(scope="module")
def cm_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One context-manager profile shared by several tests: skip 1, warmup 1,
    3 active steps, driven for more steps than the window needs."""
    logdir = tmp_path_factory.mktemp("cm")
    torch.manual_seed(0)
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    thin = None
    with kl_profile(logdir=logdir, run="baseline", steps=3, warmup=1, skip=1) as prof:
        thin = getattr(prof.step, "__func__", None)
        for _ in range(8):
            train_step(model, opt)
            prof.step()
    return {"logdir": logdir, "prof": prof, "step_func": thin}


def test_context_manager_writes_one_window(cm_run: dict[str, Any]) -> None:
    prof = cm_run["prof"]
    assert len(prof.trace_files) == 1
    trace = prof.trace_files[0]
    assert trace.parent == cm_run["logdir"].resolve() / "baseline"
    assert sorted(p.name for p in trace.parent.iterdir()) == sorted(
        [trace.name, trace.name.replace(".pt.trace.json.gz", ".kinetolens.json")]
    )
    assert_trace_name(trace, f"{HOST}_{os.getpid()}")
    evs = events(trace)
    # skip=1 and warmup=1 leave steps 0 and 1 out; exactly 2, 3, 4 recorded
    assert step_names(evs) == ["ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"]
    names = python_names(evs)
    assert {"nn.Module: Sequential_0", "nn.Module: Linear_0", "nn.Module: Linear_1"} <= names
    assert has_frame_in(names, THIS_FILE), "with_stack frames missing"
    assert any(e.get("cat") == "cpu_op" and e.get("args", {}).get("Input Dims") for e in evs), "no shapes"
    assert any(e.get("name") == "[memory]" for e in evs), "profile_memory had no effect"


def test_context_manager_metadata(cm_run: dict[str, Any]) -> None:
    trace = cm_run["prof"].trace_files[0]
    meta = read_metadata(trace)
    assert meta["torch_version"] == torch.__version__
    assert meta["rank"] == 0 and meta["world_size"] == 1
    assert meta["argv"] == sys.argv
    assert meta["pid"] == os.getpid()
    assert meta["trace_file"] == trace.name
    assert meta["run"] == "baseline"
    assert meta["schedule"] == {"skip": 1, "wait": 0, "warmup": 1, "steps": 3, "repeat": 1}
    assert meta["options"]["activities"] == (["CPU", "CUDA"] if torch.cuda.is_available() else ["CPU"])
    assert meta["device"]["type"] == ("cuda" if torch.cuda.is_available() else "cpu")
    assert meta["kinetolens_version"] not in ("", None)


def test_step_is_torch_step_while_running(cm_run: dict[str, Any]) -> None:
    """No wrapper frame on the per-step path; a dead profile refuses steps."""
    assert cm_run["step_func"] is torch.profiler.profile.step
    with pytest.raises(RuntimeError, match="outside"):
        cm_run["prof"].step()


def test_loads_with_kinetolens_load(cm_run: dict[str, Any]) -> None:
    trace = kinetolens.load(cm_run["prof"].trace_files[0])
    assert trace is not None


def _cycle_warnings(run: Any) -> list[str]:
    """The "clears events at the end of each cycle" warnings ``run`` raises
    (torch shows each of its warnings once per process: forget it first)."""
    shown = getattr(torch.profiler.profiler, "_WARNINGS_SHOWN", None)
    if shown is not None:
        shown.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run()
    return [str(w.message) for w in caught if "clears events" in str(w.message)]


def test_repeat_writes_separate_windows(tmp_path: Path) -> None:
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def torch_alone() -> None:
        with torch.profiler.profile(
            schedule=torch.profiler.schedule(wait=0, warmup=1, active=1, repeat=2), on_trace_ready=lambda p: None
        ) as p:
            for _ in range(5):
                train_step(model, opt)
                p.step()

    def kinetolens_profile() -> None:
        nonlocal prof
        with kl_profile(logdir=tmp_path, run="r", steps=2, warmup=1, repeat=2, profile_memory=False) as prof:
            for _ in range(7):
                train_step(model, opt)
                prof.step()

    prof: Any = None
    # torch warns that the second window clears the first's events; kinetolens
    # has written that window by then, so its users are spared the warning.
    assert _cycle_warnings(torch_alone)
    assert not _cycle_warnings(kinetolens_profile)
    assert len(prof.trace_files) == 2 and len(set(prof.trace_files)) == 2
    assert step_names(events(prof.trace_files[0])) == ["ProfilerStep#1", "ProfilerStep#2"]
    assert step_names(events(prof.trace_files[1])) == ["ProfilerStep#4", "ProfilerStep#5"]
    assert [read_metadata(t)["window"] for t in prof.trace_files] == [0, 1]


def test_switches_turn_features_off(tmp_path: Path) -> None:
    model = tiny_model()
    with kl_profile(
        logdir=tmp_path, run="off", with_stack=False, with_modules=False, profile_memory=False, record_shapes=False
    ) as prof:
        model(torch.randn(2, 16))
    evs = events(prof.trace_files[0])
    assert not python_names(evs)
    assert not any(e.get("name") == "[memory]" for e in evs)
    assert read_metadata(prof.trace_files[0])["options"]["with_stack"] is False


def test_too_few_steps_warns_and_writes_nothing(tmp_path: Path) -> None:
    with pytest.warns(RuntimeWarning, match="no trace written"):
        with kl_profile(logdir=tmp_path, run="short", steps=2, warmup=2) as prof:
            prof.step()
    assert prof.trace_files == []
    assert not list(tmp_path.rglob("*.gz"))


def test_one_profile_at_a_time(tmp_path: Path) -> None:
    with kl_profile(logdir=tmp_path, run="outer", profile_memory=False):
        with pytest.raises(RuntimeError, match="already running"):
            with kl_profile(logdir=tmp_path, run="inner"):
                pass


def test_bad_arguments_rejected() -> None:
    with pytest.raises(ValueError):
        kl_profile(steps=0)
    with pytest.raises(ValueError):
        kl_profile(warmup=-1)
    with pytest.raises(ValueError):
        kl_profile(run="a/b")


# -- decorator ----------------------------------------------------------------


def test_decorator_profiles_each_call(tmp_path: Path) -> None:
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    @kl_profile(logdir=tmp_path, steps=2, warmup=1, profile_memory=False)
    def train(n: int) -> int:
        for _ in range(n):
            train_step(model, opt)
            kinetolens.step()  # the top-level marker reaches the decorator's profile
        return n

    assert train(4) == 4
    assert train(3) == 3
    assert len(train.trace_files) == 2
    for trace in train.trace_files:
        assert trace.parent == tmp_path.resolve() / "train"  # run defaults to the function name
        assert_trace_name(trace, f"{HOST}_{os.getpid()}")
        evs = events(trace)
        assert step_names(evs) == ["ProfilerStep#1", "ProfilerStep#2"]
        assert "nn.Module: Linear_0" in python_names(evs)
    kl_step()  # outside any profile: a no-op, not an error


def test_bare_decorator_records_whole_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    model = tiny_model()

    @kinetolens.profile
    def infer() -> None:
        with torch.no_grad():
            model(torch.randn(2, 16))

    infer()
    (trace,) = infer.trace_files
    assert trace.parent == tmp_path.resolve() / "kinetolens-runs" / "infer"
    evs = events(trace)
    assert step_names(evs) == ["ProfilerStep#0"]  # no step() calls: one open step
    assert "nn.Module: Sequential_0" in python_names(evs)


def test_import_does_not_import_torch() -> None:
    code = (
        "import sys, kinetolens, kinetolens.capture, kinetolens.cli.capture_commands\n"
        "assert kinetolens.profile is kinetolens.capture.profile\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# -- kinetolens run -------------------------------------------------------------

TRAIN_SCRIPT = """
    import os, sys
    import torch
    print("pid", os.getpid(), flush=True)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2)  # re-wraps opt.step
    for i in range(int(sys.argv[1])):
        loss = model(torch.randn(8, 16)).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    print("args", sys.argv[1:])
    print("to stderr", file=sys.stderr)
    sys.exit(int(sys.argv[2]))
"""


def test_run_profiles_unmodified_script(tmp_path: Path) -> None:
    script = tmp_path / "train_script.py"
    script.write_text(textwrap.dedent(TRAIN_SCRIPT))
    logdir = tmp_path / "runs"
    res = kl_cli(
        "run", "--logdir", str(logdir), "--steps", "2", "--warmup", "1", "--",
        sys.executable, str(script), "9", "3",
        cwd=tmp_path,
    )  # fmt: skip
    assert res.returncode == 3, res.stderr
    pid = int(res.stdout.splitlines()[0].split()[1])
    assert res.stdout == f"pid {pid}\nargs ['9', '3']\n"  # stdout untouched
    assert "to stderr" in res.stderr

    traces = sorted((logdir / "train_script" / "latest").resolve().glob("*.pt.trace.json.gz"))
    assert len(traces) == 1, res.stderr
    trace = traces[0]
    assert_trace_name(trace, f"{HOST}_{pid}")  # the child wrote it, not the launcher
    assert f"kinetolens: wrote {trace}" in res.stderr
    evs = events(trace)
    # profiling starts after the 2nd optimizer step; step 0 is warmup
    assert step_names(evs) == ["ProfilerStep#1", "ProfilerStep#2"]
    names = python_names(evs)
    assert has_frame_in(names, "train_script.py")
    assert "nn.Module: Linear_0" in names
    # each optimizer step sits inside one ProfilerStep (boundaries never split it)
    spans = [(e["ts"], e["ts"] + e["dur"]) for e in evs if str(e.get("name", "")).startswith("ProfilerStep#")]
    opt_steps = [e for e in evs if str(e.get("name", "")).startswith("Optimizer.step#SGD")]
    assert len(opt_steps) == 2
    for e in opt_steps:
        assert any(a <= e["ts"] and e["ts"] + e["dur"] <= b for a, b in spans), e

    meta = read_metadata(trace)
    assert meta["argv"] == [str(script), "9", "3"]
    assert meta["launch_command"] == [sys.executable, str(script), "9", "3"]
    assert meta["torch_version"] == torch.__version__
    assert (meta["rank"], meta["world_size"]) == (0, 1)
    assert meta["pid"] == pid


INFER_MODULE = """
    import torch
    import kinetolens
    model = torch.nn.Linear(8, 8)
    with torch.no_grad():
        for _ in range(6):
            model(torch.randn(4, 8))
            kinetolens.step()
    print("inference done")
"""


def test_run_module_with_markers(tmp_path: Path) -> None:
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "infer.py").write_text(textwrap.dedent(INFER_MODULE))
    logdir = tmp_path / "runs"
    res = kl_cli(
        "run", "--logdir", str(logdir), "--steps", "3", "--warmup", "1", "--no-memory", "--",
        sys.executable, "-m", "mypkg.infer",
        cwd=tmp_path,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert res.stdout == "inference done\n"
    (trace,) = (logdir / "infer" / "latest").glob("*.pt.trace.json.gz")
    evs = events(trace)
    # without an optimizer the first marker starts profiling
    assert step_names(evs) == ["ProfilerStep#1", "ProfilerStep#2", "ProfilerStep#3"]
    assert "nn.Module: Linear_0" in python_names(evs)
    assert not any(e.get("name") == "[memory]" for e in evs)
    assert read_metadata(trace)["options"]["profile_memory"] is False


def test_run_without_steps_reports_and_passes_exit_code(tmp_path: Path) -> None:
    script = tmp_path / "nosteps.py"
    script.write_text("import sys\nprint('hi')\nsys.exit(5)\n")
    res = kl_cli("run", "--logdir", str(tmp_path / "runs"), "--", sys.executable, str(script), cwd=tmp_path)
    assert res.returncode == 5
    assert res.stdout == "hi\n"
    assert "no trace written" in res.stderr
    missing = kl_cli("run", "--", "kinetolens-no-such-program", cwd=tmp_path)
    assert missing.returncode == 127 and "command not found" in missing.stderr


def test_run_under_torchrun_one_trace_per_rank(torchrun_2: DistributedRun) -> None:
    """``kinetolens run -- torchrun --standalone``: each rank's process writes
    its own trace (torchrun binds its own rendezvous port, so no port is
    picked ahead of time and raced for; see tests/distributed/runs.py)."""
    traces = torchrun_2.traces
    assert [re.match(TRACE_RE, t.name)["worker"] for t in traces] == [f"{HOST}_rank0", f"{HOST}_rank1"]
    for rank, trace in enumerate(traces):
        assert step_names(events(trace)) == ["ProfilerStep#1", "ProfilerStep#2"]
        meta = read_metadata(trace)
        assert (meta["rank"], meta["world_size"]) == (rank, 2)
        assert f"kinetolens: wrote {trace}" in torchrun_2.output


def test_run_names_inductor_cpu_kernels_unless_user_chose() -> None:
    from kinetolens.capture.launch import child_environment

    env = child_environment({"run": "x"}, base={"PATH": "/bin"})
    assert env["TORCHINDUCTOR_CPP_ENABLE_KERNEL_PROFILE"] == "1"
    assert env["PYTHONPATH"].split(os.pathsep)[0].endswith("_site")
    kept = child_environment({"run": "x"}, base={"TORCHINDUCTOR_CPP_ENABLE_KERNEL_PROFILE": "0"})
    assert kept["TORCHINDUCTOR_CPP_ENABLE_KERNEL_PROFILE"] == "0"


# -- demo -----------------------------------------------------------------------


def test_demo_writes_and_analyzes_a_trace(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from kinetolens.cli.capture_commands import demo_command

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = CliRunner().invoke(demo_command, ["--logdir", str(tmp_path), "--steps", "2", "--warmup", "1"])
    assert result.exit_code == 0, result.output
    (trace,) = (tmp_path / "demo").glob("*.pt.trace.json.gz")
    assert f"trace: {trace.resolve()}" in result.output
    evs = events(trace)
    assert step_names(evs) == ["ProfilerStep#1", "ProfilerStep#2"]
    names = python_names(evs)
    assert {"nn.Module: DemoNet_0", "nn.Module: TransformerBlock_0", "nn.Module: Conv2d_0"} <= names
    assert has_frame_in(names, "demo_model.py")
    assert read_metadata(trace)["run"] == "demo"


def test_default_run_names() -> None:
    from kinetolens.cli.capture_commands import default_run_name

    assert default_run_name(["python", "path/to/train.py", "--lr", "1"]) == "train"
    assert default_run_name(["python", "-m", "pkg.sub.mod", "x.py"]) == "mod"
    assert default_run_name(["torchrun", "--nproc_per_node", "2", "ddp.py"]) == "ddp"
    assert default_run_name(["python", "-m", "torch.distributed.run", "--nproc_per_node", "2", "ddp.py"]) == "ddp"
    assert default_run_name(["./launch.sh"]) == "launch.sh"


def test_worker_names() -> None:
    assert layout.worker_name(3) == f"{HOST}_rank3"
    assert layout.worker_name(None) == f"{HOST}_{os.getpid()}"
