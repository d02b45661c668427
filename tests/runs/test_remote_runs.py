"""Runs and caches at fsspec URLs: a ``file://`` run through the local pool
and a real Dask LocalCluster gives the plain-path results and fills a cache
that a second run only reads; ``memory://`` (one process) for listing, the
cache round trip in every local/remote combination and damaged entries; one-line
errors for unknown protocols and URLs without traces."""

from __future__ import annotations

import shutil
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from kinetolens.analysis.ranks.distributed import (
    RankSummary,
    collective_stats,
    step_spread,
    step_times,
)
from kinetolens.analysis.ranks.stragglers import stragglers
from kinetolens.cache import ENV_DIR, default_cache_dir
from kinetolens.cli.main import main
from kinetolens.errors import TraceError
from kinetolens.runs import LocalExecutor, summarize_run
from kinetolens.runs.storage import remote_rank_traces
from tests.conftest import trace_path

fsspec = pytest.importorskip("fsspec")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from gen_ranks import generate

SOURCE = "hta/trace_filter/sampled_rank-0.json.gz"
RANKS, STRAGGLER = 6, 4


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("remote") / "run"
    generate(trace_path(SOURCE), out, RANKS, STRAGGLER, keep_every=8, seed=3)
    return out


@pytest.fixture(scope="module")
def plain(run_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> list[RankSummary]:
    """The reference: the run read from its plain local path."""
    return summarize_run(run_dir, LocalExecutor(workers=1), cache=tmp_path_factory.mktemp("plain-cache"))


@pytest.fixture
def memory_root() -> Iterator[str]:
    """A fresh ``memory://`` folder, removed afterwards (the store is per process)."""
    root = f"/kl-{uuid.uuid4().hex}"
    yield root
    fs = fsspec.filesystem("memory")
    if fs.exists(root):
        fs.rm(root, recursive=True)


def tables(summaries: list[RankSummary]) -> list[pl.DataFrame]:
    return [step_times(summaries), step_spread(summaries), collective_stats(summaries), stragglers(summaries)]


def assert_same(a: list[RankSummary], b: list[RankSummary]) -> None:
    assert [s.rank for s in a] == [s.rank for s in b] == list(range(RANKS))
    for x, y in zip(tables(a), tables(b), strict=True):
        assert_frame_equal(x, y)
    flagged = stragglers(b).filter(pl.col("straggler"))["rank"].to_list()
    assert flagged == [STRAGGLER]


def cache_objects(cache: Path) -> dict[str, int]:
    """Every file under a cache directory with its mtime: a decode writes one."""
    return {str(p.relative_to(cache)): p.stat().st_mtime_ns for p in cache.rglob("*") if p.is_file()}


def test_file_url_local_pool_same_as_path_and_cached(
    run_dir: Path, plain: list[RankSummary], tmp_path: Path
) -> None:
    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    cache = tmp_path / "shared-cache"
    first = summarize_run(run.as_uri(), LocalExecutor(workers=2), cache=cache.as_uri())
    assert_same(plain, first)
    assert first[0].path == (run / "rank-0.json.gz").as_uri()  # named by URL, not the temp copy
    written = cache_objects(cache)
    # one packed entry per rank, nothing half-written left beside them
    assert len(written) == RANKS and all(n.endswith(".tar") and not n.startswith(".") for n in written)

    second = summarize_run(run.as_uri(), LocalExecutor(workers=2), cache=cache.as_uri())
    assert_same(plain, second)
    assert cache_objects(cache) == written  # every rank read from the cache: no decode rewrote one

    # The straggler's object rewritten in place (same URL, new content): that
    # rank alone is decoded again, and its new content counts.
    generate(trace_path(SOURCE), tmp_path / "other", RANKS, None, keep_every=8, seed=9)
    (tmp_path / "other" / f"rank-{STRAGGLER}.json.gz").replace(run / f"rank-{STRAGGLER}.json.gz")
    third = summarize_run(run.as_uri(), LocalExecutor(workers=1), cache=cache.as_uri())
    now = cache_objects(cache)
    assert len(now) == RANKS + 1 and all(now[k] == v for k, v in written.items())
    assert stragglers(third).filter(pl.col("straggler")).height == 0  # the straggler is gone


def test_dask_cluster_reads_file_urls_and_shares_the_cache(
    run_dir: Path, plain: list[RankSummary], tmp_path: Path
) -> None:
    """Scheduler and two worker processes on loopback; the workers list nothing,
    they copy their rank's object, load it and write the shared cache."""
    distributed = pytest.importorskip("distributed")
    cache = tmp_path / "cluster-cache"
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
    ) as cluster:
        spec = f"dask://{cluster.scheduler_address.removeprefix('tcp://')}"
        first = summarize_run(run_dir.as_uri(), spec, cache=cache.as_uri())
        written = cache_objects(cache)
        second = summarize_run(run_dir.as_uri(), spec, cache=cache.as_uri())
    assert_same(plain, first)
    assert_same(plain, second)
    assert len(written) == RANKS
    assert cache_objects(cache) == written  # the second run decoded nothing
    # ... and a run on this machine reads the cache the cluster wrote
    local = summarize_run(run_dir.as_uri(), LocalExecutor(workers=1), cache=cache.as_uri())
    assert_same(plain, local)
    assert cache_objects(cache) == written


def test_memory_run_listing_and_cache_round_trip(
    run_dir: Path, plain: list[RankSummary], memory_root: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fs = fsspec.filesystem("memory")
    for p in sorted(run_dir.iterdir()):
        fs.pipe(f"{memory_root}/run/{p.name}", p.read_bytes())
    fs.pipe(f"{memory_root}/run/notes.txt", b"not a trace")
    fs.pipe(f"{memory_root}/run/.hidden_rank-9.json", b"{}")
    run_url = f"memory://{memory_root}/run"

    listed = remote_rank_traces(run_url)
    assert [(t.rank, t.worker) for t in listed] == [(r, f"rank-{r}") for r in range(RANKS)]
    assert [t.size for t in listed] == [(run_dir / f"rank-{r}.json.gz").stat().st_size for r in range(RANKS)]
    assert listed[0].url == f"memory://{memory_root}/run/rank-0.json.gz"

    # $KINETOLENS_CACHE_DIR may be a URL; single-trace loads keep a local cache meanwhile.
    monkeypatch.setenv(ENV_DIR, f"memory://{memory_root}/cache")
    assert not str(default_cache_dir()).startswith("memory")
    assert_same(plain, summarize_run(run_url))
    entries = fs.ls(f"{memory_root}/cache", detail=False)
    assert len(entries) == RANKS
    stamps = {e: fs.info(e)["created"] for e in entries}
    assert_same(plain, summarize_run(run_url))
    assert {e: fs.info(e)["created"] for e in fs.ls(f"{memory_root}/cache", detail=False)} == stamps

    # A damaged entry is rebuilt, never read.
    fs.pipe(entries[0], b"garbage")
    assert_same(plain, summarize_run(run_url))
    assert fs.cat(entries[0])[:7] != b"garbage" and len(fs.ls(f"{memory_root}/cache")) == RANKS

    # Remote run, local cache directory; local run, remote cache.
    local_cache = tmp_path / "local-cache"
    assert_same(plain, summarize_run(run_url, cache=local_cache))
    assert len([d for d in local_cache.iterdir() if not d.name.startswith(".")]) == RANKS
    assert_same(plain, summarize_run(run_dir, cache=f"memory://{memory_root}/cache2"))
    assert len(fs.ls(f"{memory_root}/cache2")) == RANKS
    assert_same(plain, summarize_run(run_dir, cache=f"memory://{memory_root}/cache2"))


def test_bad_remote_trace_names_the_url(memory_root: str) -> None:
    fsspec.filesystem("memory").pipe(f"{memory_root}/run/rank-0.json", b"{not json")
    url = f"memory://{memory_root}/run/rank-0.json"
    with pytest.raises(TraceError) as exc:
        summarize_run(f"memory://{memory_root}/run", cache=False)
    assert str(exc.value).startswith(url + ":") and "kinetolens-" not in str(exc.value)


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("nosuchproto://bucket/run", "unknown storage protocol"),
        ("memory:///kl-missing-run", "no such directory"),
        ("EMPTY", "holds no trace files"),
    ],
)
def test_bad_urls_are_one_line_errors(
    url: str, problem: str, memory_root: str, capsys: pytest.CaptureFixture[str]
) -> None:
    if url == "EMPTY":
        fsspec.filesystem("memory").pipe(f"{memory_root}/run/readme.txt", b"no traces here")
        url = f"memory://{memory_root}/run"
    with pytest.raises(SystemExit) as exc:
        main(["dist", url])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and url in err and problem in err


@pytest.mark.skipif(
    __import__("importlib").util.find_spec("s3fs") is not None, reason="s3fs is installed here"
)
def test_missing_store_package_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["dist", "s3://some-bucket/run"])
    assert exc.value.code == 2
    assert "s3fs" in capsys.readouterr().err


def test_no_cache_and_cache_dir_exclude_each_other(run_dir: Path) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["dist", str(run_dir), "--no-cache", "--cache-dir", "memory://x"])
    assert exc.value.code == 2
