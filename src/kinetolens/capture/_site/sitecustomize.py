"""Entry point of ``kinetolens run`` inside the profiled interpreter.

Python imports ``sitecustomize`` at start-up from the first PYTHONPATH entry
that has one; ``kinetolens run`` puts this file's folder first.  We arm the
profiler (cheaply: torch is not imported here) and then run the
``sitecustomize`` we shadowed, if there is one, so site setup still happens.
"""

import os
import sys


def _chain_shadowed_sitecustomize(here: str) -> None:
    import importlib.machinery
    import importlib.util

    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


def _main() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    try:
        _chain_shadowed_sitecustomize(here)
    except Exception as exc:  # what site.py would have reported for it
        print(f"Error in sitecustomize; {type(exc).__name__}: {exc}", file=sys.stderr)
    if not os.environ.get("KINETOLENS_RUN_CONFIG"):
        return
    try:
        from kinetolens.capture.runner import bootstrap
    except Exception as exc:
        print(
            f"kinetolens: not profiling: cannot import kinetolens in {sys.executable} ({exc})",
            file=sys.stderr,
        )
        return
    bootstrap()


_main()
