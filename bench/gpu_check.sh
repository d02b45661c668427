#!/usr/bin/env bash
# The GPU suite on a CUDA machine: tests/gpu/, the capture benchmark, and
# the traces to commit under tests/data/gpu/ (see docs/GPU.md).
#
# Two steps:
#
#   1. Here, with PyPI reachable (once per change of the pins below):
#        bash bench/gpu_check.sh wheels
#      downloads into .whl/ (git-ignored) the cp312 manylinux x86_64 wheels
#      of every package kinetolens and the suite need that the GPU image
#      lacks, and checks that each wheel's Requires-Dist is met by another
#      wheel there or by the image.
#
#   2. On the GPU machine (no network; PyTorch with CUDA, Triton, rich,
#      click and jinja2 for Python 3.12 preinstalled), from the repo root
#      with .whl/ beside it:
#        bash bench/gpu_check.sh
#      installs the wheels into /tmp/site, runs bench/capture_overhead.py
#      --device cuda, then `pytest -m gpu tests/gpu` recording traces (its
#      overhead test checks that benchmark's result), checks the recordings
#      with the CPU-CI tests, and leaves traces, logs and results in
#      bench/out/gpu/, or, with $OUT set (the device machine), packed into
#      $OUT/gpu_check.tar.gz with pytest.log and versions.log beside it.
#      Exit status: the GPU suite's.  Then copy traces/* to tests/data/gpu/
#      and fill in docs/GPU.md from traces/results.json and the logs.
#
# Environment: PYTHON (default python3), GPU_CHECK_SITE (default /tmp/site),
# GPU_CHECK_TESTS (default tests/gpu: a file or -k expression's worth, to
# split a run), GPU_CHECK_BENCH=0 skips the benchmark, GPU_CHECK_ALLOW_CPU=1
# runs what can run without CUDA (the install, the imports, the suite's
# collection and the CPU-CI tests) instead of stopping.
set -euo pipefail
export PYTHONUNBUFFERED=1

cd "$(dirname "$0")/.."
REPO=$PWD
PY=${PYTHON:-python3}
WHEELS=$REPO/.whl
SITE=${GPU_CHECK_SITE:-/tmp/site}

# What the GPU machine's image lacks (it holds PyTorch, Triton, numpy,
# pytest, rich, click, jinja2, anyio and their kin), pinned to the versions
# CI tests; keep in step with CI.
# plotly is left out: only the report and dashboard use it, neither runs
# in the suite, and its 9 MiB wheel would break the 60 MiB budget of .whl/.
PINS=(
    polars==2.1.0
    polars-runtime-32==2.1.0
    msgspec==0.22.0
    rustworkx==0.18.1
    starlette==1.10.0
    uvicorn==0.54.0
)
# In the image (with their own dependencies): a Requires-Dist on one of
# these needs no wheel; their versions are checked on the GPU machine.
IMAGE=(torch triton numpy rich click jinja2 markupsafe pygments markdown-it-py mdurl anyio h11 idna
       typing-extensions narwhals packaging pytest pluggy iniconfig)
MAX_WHEEL_BYTES=$((60 * 1024 * 1024))

die() { echo "gpu_check: $*" >&2; exit 2; }

fetch_wheels() {
    mkdir -p "$WHEELS"
    "$PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d "$WHEELS" "${PINS[@]}" || die "pip download failed (is PyPI reachable?)"
    # Only the pinned wheels: an old download left in .whl/ would be installed too.
    "$PY" - "$WHEELS" "${PINS[@]}" -- "${IMAGE[@]}" <<'EOF'
import re, sys, zipfile
from pathlib import Path
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

args = sys.argv[1:]
folder, pins, image = Path(args[0]), args[1:args.index("--")], args[args.index("--") + 1:]
wanted = {canonicalize_name(p.split("==")[0]): p.split("==")[1] for p in pins}
have = {}
for whl in sorted(folder.glob("*.whl")):
    name, version, _, _ = parse_wheel_filename(whl.name)
    if wanted.get(name) != str(version):
        whl.unlink()
        print(f"removed {whl.name} (not pinned)")
        continue
    have[name] = whl
missing = sorted(set(wanted) - set(have))
if missing:
    sys.exit(f"gpu_check: no wheel for {missing}")
# the GPU machine's interpreter: CPython 3.12 on x86_64 Linux
env = default_environment() | {"python_version": "3.12", "python_full_version": "3.12.0", "sys_platform": "linux",
                                "platform_system": "Linux", "platform_machine": "x86_64",
                                "implementation_name": "cpython", "platform_python_implementation": "CPython"}
provided = set(have) | {canonicalize_name(n) for n in image}
unmet = []
for name, whl in have.items():
    with zipfile.ZipFile(whl) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        text = z.read(meta).decode()
    for line in re.findall(r"^Requires-Dist: (.+)$", text, flags=re.M):
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate(env | {"extra": ""}):
            continue
        dep = canonicalize_name(req.name)
        if dep in have and not req.specifier.contains(str(parse_wheel_filename(have[dep].name)[1]), prereleases=True):
            unmet.append(f"{name} needs {req}, the wheel is {have[dep].name}")
        elif dep not in provided:
            unmet.append(f"{name} needs {req}: neither a wheel here nor in the image")
if unmet:
    sys.exit("gpu_check: unmet Requires-Dist:\n  " + "\n  ".join(unmet))
print(f"{len(have)} wheels, every Requires-Dist met by a wheel or the image")
EOF
    local total
    total=$(du -cb "$WHEELS"/*.whl | tail -1 | cut -f1)
    echo "gpu_check: $WHEELS: $(ls "$WHEELS"/*.whl | wc -l) wheels, $((total / 1024 / 1024)) MiB"
    [ "$total" -lt "$MAX_WHEEL_BYTES" ] || die "$WHEELS holds $total bytes, over the 60 MiB the GPU machine takes"
}

install_wheels() {
    ls "$WHEELS"/*.whl >/dev/null 2>&1 || die "no wheels in $WHEELS: run 'bash bench/gpu_check.sh wheels' where PyPI is reachable"
    if "$PY" -m pip --version >/dev/null 2>&1; then
        "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$WHEELS"/*.whl \
            || die "pip could not install the wheels into $SITE"
    else  # no pip in the image: a wheel is a zip of site-packages
        mkdir -p "$SITE"
        "$PY" -c 'import sys, zipfile; [zipfile.ZipFile(w).extractall(sys.argv[1]) for w in sys.argv[2:]]' "$SITE" "$WHEELS"/*.whl
    fi
    export PYTHONPATH="$SITE:$REPO/src${PYTHONPATH:+:$PYTHONPATH}"
}

if [ "${1:-}" = wheels ]; then
    fetch_wheels
    exit 0
fi
[ $# -eq 0 ] || die "usage: bash bench/gpu_check.sh [wheels]"

# Fail fast, in one line, where there is nothing to measure.
"$PY" -c 'import sys; assert sys.version_info >= (3, 10)' 2>/dev/null || die "$PY is not Python >= 3.10"
why=$("$PY" - <<'EOF'
try:
    import torch
except ImportError as exc:
    print(f"torch is not importable ({exc})")
else:
    if not torch.backends.cuda.is_built():
        print(f"this torch build ({torch.__version__}) has no CUDA support")
    elif not torch.cuda.is_available():
        print("no CUDA device is available")
EOF
) || why="could not ask torch about CUDA: ${why:-$PY failed}"
if [ -n "$why" ]; then
    [ "${GPU_CHECK_ALLOW_CPU:-}" = 1 ] || die "no GPU to check: $why"
    echo "gpu_check: $why; GPU_CHECK_ALLOW_CPU=1: running what needs no GPU" >&2
fi

# On the device machine only $OUT comes back, and at most a few files of it:
# everything is written to a folder of its own and packed into
# $OUT/gpu_check.tar.gz when the script ends (however it ends), with the
# suite's log and the versions beside it to read without unpacking.
if [ -n "${OUT:-}" ]; then
    DEST=$(mktemp -d "${TMPDIR:-/tmp}/gpu_check.XXXXXX")
    pack() {
        tar -czf "$OUT/gpu_check.tar.gz" -C "$DEST" . 2>/dev/null || true
        cp "$DEST"/pytest.log "$DEST"/versions.log "$OUT"/ 2>/dev/null || true
    }
    trap pack EXIT
else
    DEST=$REPO/bench/out/gpu
fi
mkdir -p "$DEST/traces"
DEST=$(cd "$DEST" && pwd)

install_wheels
if ! "$PY" - <<'EOF' 2>&1 | tee "$DEST/versions.log"; then
import importlib.metadata as md, platform
print("python", platform.python_version())
for dist in ("torch", "triton", "polars", "polars-runtime-32", "msgspec", "rustworkx", "numpy", "rich", "click",
             "jinja2", "pytest"):
    try:
        print(dist, md.version(dist))
    except md.PackageNotFoundError:
        print(dist, "absent")
import kinetolens, kinetolens.cli.main  # the analyzer and the CLI import with these versions
kinetolens.load
# the carried wheels' Requires-Dist against what the image holds
from packaging.requirements import Requirement
for dist in ("polars", "msgspec", "rustworkx", "starlette", "uvicorn"):
    for line in md.requires(dist) or []:
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        try:
            have = md.version(req.name)
        except md.PackageNotFoundError:
            print(f"warning: {dist} needs {req}: absent")
            continue
        if not req.specifier.contains(have, prereleases=True):
            print(f"warning: {dist} needs {req}: {have} installed")
EOF
    die "kinetolens does not import with the installed wheels (see $DEST/versions.log)"
fi
command -v nvidia-smi >/dev/null && nvidia-smi >"$DEST/nvidia-smi.log" 2>&1 || true

overhead=
if [ -z "$why" ] && [ "${GPU_CHECK_BENCH:-1}" != 0 ]; then
    # First, on a GPU nothing else uses; the suite's overhead test checks this result.
    echo "gpu_check: capture overhead (table: $DEST/capture_overhead.md)" >&2
    # 15 repetitions of 16 steps: with 7 of 8, the per-repetition ratio of a
    # launch-bound 5 ms step swung 0.7-1.3 and its median by 10% between runs.
    if "$PY" bench/capture_overhead.py --device cuda -n 15 --steps 16 --json "$DEST/capture_overhead.json" \
        2>"$DEST/capture_overhead.log" | tee "$DEST/capture_overhead.md"; then
        overhead=$DEST/capture_overhead.json
    else
        echo "gpu_check: the benchmark failed (see $DEST/capture_overhead.log); the suite runs it again" >&2
    fi
fi

echo "gpu_check: GPU suite (log: $DEST/pytest.log)" >&2
set +e
KINETOLENS_GPU_RECORD="$DEST/traces" KINETOLENS_GPU_OVERHEAD_JSON="$overhead" \
    "$PY" -m pytest -o addopts=-ra -m gpu ${GPU_CHECK_TESTS:-tests/gpu} -v -rA -p no:cacheprovider --junitxml="$DEST/junit.xml" \
    2>&1 | tee "$DEST/pytest.log"
suite=${PIPESTATUS[0]}
set -e

# The recordings, checked the way CPU CI will check them once committed.
if ls "$DEST"/traces/*.expect.json >/dev/null 2>&1; then
    echo "gpu_check: recorded traces under the CPU-CI tests (log: $DEST/recorded.log)" >&2
    # (only the tests over recordings: ../shared's traces do not travel here)
    KINETOLENS_GPU_DATA="$DEST/traces" "$PY" -m pytest -o addopts=-ra tests/gpu_recorded/test_gpu_recorded.py -v -rA -p no:cacheprovider \
        -k "recorded_gpu_trace or recordings_are" 2>&1 | tee "$DEST/recorded.log" || true
    du -ch "$DEST"/traces/*.pt.trace.json.gz | tail -1 | sed 's/^/gpu_check: recorded traces: /' >&2
fi
# Without CUDA every GPU test skips at import: pytest's "no tests ran" is the expected outcome.
[ -n "$why" ] && [ "$suite" -eq 5 ] && suite=0
echo "gpu_check: done; GPU suite exit status $suite; results in ${OUT:+$OUT/gpu_check.tar.gz, from }$DEST" >&2
exit "$suite"
