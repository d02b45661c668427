"""Text columns built by the Kineto reader: values, nulls, and shared storage."""

from __future__ import annotations

import subprocess
import sys

import msgspec
import polars as pl

from kinetolens.ingest.kineto_values import shared_texts, texts


def test_texts_keep_values_and_turn_absent_and_null_into_null() -> None:
    raws = [msgspec.Raw(t) for t in (b"[[1, 2]]", b"", b"null", b"[[1, 2]]", b'["float", ""]', b"[]")]
    assert texts(raws).to_list() == ["[[1, 2]]", None, None, "[[1, 2]]", '["float", ""]', "[]"]
    assert texts([msgspec.Raw(b"")] * 3).to_list() == [None, None, None]


def test_shared_texts_keep_order_and_nulls() -> None:
    values = ["b" * 40, None, "a", "b" * 40, "a", None]
    column = shared_texts(values)
    assert column.dtype == pl.String
    assert column.to_list() == values
    assert shared_texts([None, None]).to_list() == [None, None]


RSS_GROWTH = """
import sys
import polars as pl
from kinetolens.ingest.kineto_values import shared_texts

def rss_kib():
    for line in open("/proc/self/status"):
        if line.startswith("RssAnon:"):
            return int(line.split()[1])

name = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float> >(int)" * 3
values = ["".join(name) + str(i % 7) for i in range(200_000)]  # 7 distinct names, separate objects
before = rss_kib()
column = shared_texts(values) if sys.argv[1] == "shared" else pl.Series(values, dtype=pl.String)
print(rss_kib() - before)
"""


def _growth_kib(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", RSS_GROWTH, mode], check=True, capture_output=True, text=True)
    return int(out.stdout)


def test_shared_texts_store_each_distinct_text_once() -> None:
    # 200k rows of a ~270-byte name: ~54 MB when every row keeps its own copy,
    # a 16-byte view per row (~3 MB) when the texts are shared.
    plain, shared = _growth_kib("plain"), _growth_kib("shared")
    assert plain > 40_000
    assert shared < plain / 4
