"""The first five minutes: what a performance engineer reads at a glance.

``kinetolens diff`` leads with the step-time categories that changed most;
``summary`` says which rank, world size and device a kinetolens capture ran
on; ``help(kinetolens.Trace)`` documents every table and column with units;
``kinetolens.profile`` has a real signature and says where its trace went.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import kinetolens
from tests.conftest import GOLDEN, trace_path
from tests.cpu_capture import capture_small_mlp

RESNET_0 = "kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"  # DataLoader with 0 workers
RESNET_4 = "kineto/resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz"  # 4 workers, same V100 box


def _cli(*args: str, columns: int = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": str(columns)}
    return subprocess.run(
        [sys.executable, "-m", "kinetolens.cli.main", *args], capture_output=True, text=True, timeout=300, env=env
    )


def _tb_avg_us(rel: str) -> dict[str, float]:
    """torch-tb-profiler's average step breakdown of a stored trace (golden/tb_plugin)."""
    name = rel.replace("/", "__") + ".json"
    return json.loads((GOLDEN / "tb_plugin" / name).read_text())["avg_costs_us"]


def test_diff_leads_with_the_step_category_that_changed() -> None:
    # with 4 DataLoader workers the ResNet-50 step is faster because data
    # loading left the step; that must be on the first screen, before any op or kernel row.
    # The expected figures are torch-tb-profiler's step breakdowns of the two files.
    base, exp = _tb_avg_us(RESNET_0), _tb_avg_us(RESNET_4)
    data_delta_ms = (exp["DataLoader"] - base["DataLoader"]) / 1000  # -58.076
    step_delta_ms = (exp["Total"] - base["Total"]) / 1000  # -36.524
    proc = _cli("diff", str(trace_path(RESNET_0)), str(trace_path(RESNET_4)))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    first = lines[:25]
    data_rows = [line for line in first if line.split()[:2] == ["data", "loading"]]
    assert data_rows, "\n".join(first)
    assert f"{data_delta_ms:+,.3f}" in data_rows[0].split()
    headline = next(line for line in first if line.startswith("Step time"))
    assert f"{step_delta_ms:+,.3f} ms" in headline
    assert f"Largest change: data loading {data_delta_ms:+,.3f} ms per step" in first
    # The step categories come before the op and kernel tables, largest change first.
    first_op = next(i for i, line in enumerate(lines) if "aten::" in line)
    assert lines.index(data_rows[0]) < first_op
    categories = [line.split()[0] for line in first if line.split()[:1] and line.split()[-1][-1:].isdigit()]
    assert categories[0] == "data"
    # ... then the ops and the kernels.
    assert any(line.lstrip().startswith("op per step") for line in lines)
    assert any(line.lstrip().startswith("kernel per step") for line in lines)


def test_diff_says_new_and_gone_everywhere() -> None:
    # one vocabulary for rows only one side has ("new"/"gone"), in the
    # terminal, in the JSON and in the Python tables.
    args = (str(trace_path(RESNET_0)), str(trace_path(RESNET_4)))
    proc = _cli("diff", *args)
    assert proc.returncode == 0, proc.stderr
    assert "appeared" not in proc.stdout and "disappeared" not in proc.stdout
    assert " new, " in proc.stdout and " gone, " in proc.stdout
    for level in ("op", "kernel"):
        proc = _cli("diff", *args, "--json", "-l", level)
        payload = json.loads(proc.stdout)
        statuses = {r["status"] for r in payload["rows"]}
        assert statuses <= {"new", "gone", "changed", "same"} and {"new", "gone"} <= statuses, statuses
        assert set(payload["summary"]["counts"][level]) == {"new", "gone", "changed", "same"}


def test_dashboard_diff_leads_with_the_step_category() -> None:
    # the largest step change sits with the step times, and
    # the first table is the step breakdown, largest change first.
    from kinetolens.views.dashboard import compare as dashboard_compare
    from kinetolens.views.dashboard.sources import Ctx
    from kinetolens.views.dashboard.state import Loaded

    a, b = kinetolens.load(trace_path(RESNET_0)), kinetolens.load(trace_path(RESNET_4))
    ctx = Ctx(loaded=Loaded(a), step=None, args={}, other=Loaded(b))
    blocks = dashboard_compare.diff_view(ctx)
    cards = dict(next(bl for bl in blocks if bl["type"] == "cards")["items"])
    base, exp = _tb_avg_us(RESNET_0), _tb_avg_us(RESNET_4)
    assert cards["largest step change"] == f"data loading {(exp['DataLoader'] - base['DataLoader']) / 1000:+,.3f} ms"
    tables = [bl["source"] for bl in blocks if bl["type"] == "table"]
    assert tables[0] == "diff_step"
    step = dashboard_compare.SOURCES["diff_step"](ctx)
    assert step["category"].to_list()[0] == "dataloader" and step["category"].to_list()[-1] == "total"


# -- summary of a kinetolens capture ---------------------------------------------

@pytest.fixture(scope="module")
def captured(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    return capture_small_mlp(tmp_path_factory.mktemp("single"))


def _cpu_model() -> str:
    """The CPU's name as the kernel reports it (what the capture's run metadata records)."""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    pytest.skip("no /proc/cpuinfo model name on this machine")


def _summary_rows(trace: Path) -> dict[str, str]:
    """The what/value rows of ``kinetolens summary`` (with or without table borders)."""
    proc = _cli("summary", str(trace), "--no-cache")
    assert proc.returncode == 0, proc.stderr
    rows = {}
    for line in proc.stdout.splitlines():
        cells = [c.strip() for c in re.split(r"│|\s{2,}", line.strip("│┃ ")) if c.strip()]
        if len(cells) == 2:
            rows.setdefault(cells[0], cells[1])
    return rows


def test_summary_reads_rank_world_size_and_device_of_a_kinetolens_capture(captured: tuple[Path, str]) -> None:
    # a single-process CPU capture is rank 0 of 1 on this machine's CPU; the
    # trace itself has no distributedInfo nor deviceProperties, the .kinetolens.json beside it does.
    trace, _ = captured
    rows = _summary_rows(trace)
    assert rows["rank / world size"] == "0 / 1", rows
    assert _cpu_model() in rows["devices"] and rows["devices"].startswith("CPU"), rows
    info = json.loads(_cli("summary", str(trace), "--json").stdout)
    assert (info["rank"], info["world_size"]) == (0, 1)
    assert info["device"] == {"type": "cpu", "name": _cpu_model()}


def test_summary_reads_the_launchers_rank(tmp_path: Path) -> None:
    # torchrun sets RANK and WORLD_SIZE before the job initializes
    # torch.distributed; a capture made under them says so (not the 0 / 1 of a lone process).
    trace, _ = capture_small_mlp(tmp_path, RANK="1", WORLD_SIZE="2")
    assert _summary_rows(trace)["rank / world size"] == "1 / 2"


# -- Python API -------------------------------------------------------------------


def _documented_tables() -> dict[str, str]:
    """The table sections of Trace's docstring: ``name``: text, up to the next one."""
    doc = kinetolens.Trace.__doc__ or ""
    heads = list(re.finditer(r"^    ``(\w+)``:", doc, re.MULTILINE))
    ends = [h.start() for h in heads[1:]] + [doc.index("Properties:") if "Properties:" in doc else len(doc)]
    return {h.group(1): doc[h.end() : end] for h, end in zip(heads, ends)}


def test_help_trace_documents_every_table_and_column_with_units() -> None:
    # every table of a real loaded trace (a V100 ResNet-50 run: ops, kernels,
    # runtime, memory, flows, steps...) has a section in help(Trace) that names each of its
    # columns; times are said to be nanoseconds, where the CLI prints us and ms.
    import pydoc

    from kinetolens.model.trace import TABLES

    text = pydoc.render_doc(kinetolens.Trace, renderer=pydoc.plaintext)
    assert "nanoseconds" in text and "us" in text and "ms" in text
    sections = _documented_tables()
    assert set(sections) == set(TABLES), set(TABLES) ^ set(sections)
    trace = kinetolens.load(trace_path(RESNET_0))
    for name in TABLES:
        frame = getattr(trace, name)
        missing = [c for c in frame.columns if f"``{c}``" not in sections[name]]
        assert not missing, (name, missing)
        if "ts" in frame.columns:
            assert re.search(r"\bns\b", sections[name]), name


def test_profile_has_a_real_signature_and_says_where_the_trace_went(captured: tuple[Path, str]) -> None:
    # inspect.signature shows the keywords (not **kwargs), each one documented,
    # and a capture prints one line to stderr naming the trace it wrote.
    import inspect

    params = inspect.signature(kinetolens.profile).parameters
    named = [p for p in params.values() if p.kind is inspect.Parameter.KEYWORD_ONLY]
    assert {"logdir", "run", "steps", "warmup", "skip", "wait", "repeat", "with_stack", "sample_rate"} <= {
        p.name for p in named
    }
    doc = kinetolens.profile.__doc__ or ""
    for p in named:
        assert p.name in doc, p.name
    assert params["steps"].default is None and params["with_stack"].default is True
    trace, stderr = captured
    lines = [line for line in stderr.splitlines() if line.startswith("kinetolens:")]
    assert lines == [f"kinetolens: trace written to {trace}"], stderr
    assert trace.is_file()


def test_dir_lists_the_public_api_only() -> None:
    # no helpers (importlib, TYPE_CHECKING, _LAZY) nor submodules in dir().
    kinetolens.load  # noqa: B018 - a first use imports submodules
    assert set(dir(kinetolens)) == set(kinetolens.__all__)


# -- docs as reference ----------------------------------------------------------

REPO = Path(__file__).resolve().parents[2]
#: What a measurement diary sounds like: before/after figures, fractions saved, runs compared.
DIARY = (
    r"\binstead of \d",
    r"\d\s*(->|→)\s*\d",
    r"\d\s*%",
    r"\ba (fifth|sixth|tenth|quarter|third) (of|off)\b",
    r"\b(were|was) measured\b",
    r"\bpeaks? at \d",
)
BENCH_DIARY = ("previous session", "previous run", "previous full run", "Tried", "Earlier", "What changed since",
               "this round", "from the issue")  # fmt: skip


def test_module_docstrings_say_why_not_what_was_measured() -> None:
    # docstrings of the allocator and Kineto readers give the reason briefly;
    # the figures live in docs/BENCHMARKS.md (and the history in commit messages).
    import ast

    for rel in ("_allocator.py", "ingest/kineto_schema.py", "ingest/kineto_parallel.py", "ingest/kineto_stream.py"):
        tree = ast.parse((REPO / "src" / "kinetolens" / rel).read_text())
        nodes = [tree, *(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef)))]
        for node in nodes:
            doc = ast.get_docstring(node) or ""
            for pattern in DIARY:
                found = re.search(pattern, doc)
                assert not found, (rel, getattr(node, "name", "module"), found and found.group(0))


def test_benchmarks_doc_is_method_tables_and_commands() -> None:
    # every section of docs/BENCHMARKS.md has its command and a current table,
    # and none reads as a diary of earlier runs.
    text = (REPO / "docs" / "BENCHMARKS.md").read_text()
    for phrase in BENCH_DIARY:
        assert phrase not in text, phrase
    sections = text.split("\n## ")[1:]
    assert len(sections) >= 5
    for section in sections:
        title = section.splitlines()[0]
        assert re.search(r"python3? bench/\w+\.py", section), title
        assert "|---" in section, title
