"""One declaration of the capture options: kinetolens.profile's signature and
docs are made from it, and kinetolens run hands it to the profiled process."""

from __future__ import annotations

import dataclasses
import inspect
import json

import pytest

import kinetolens
from kinetolens.capture.counters import CaptureUnsupportedError
from kinetolens.capture.options import NAMES, ProfileOptions


def test_profile_signature_and_docs_are_the_options() -> None:
    params = inspect.signature(kinetolens.profile).parameters
    keywords = {p.name: p.default for p in params.values() if p.kind is inspect.Parameter.KEYWORD_ONLY}
    assert keywords == {f.name: f.default for f in dataclasses.fields(ProfileOptions)}
    assert "torch_kwargs" in params and params["torch_kwargs"].kind is inspect.Parameter.VAR_KEYWORD
    doc = kinetolens.profile.__doc__ or ""
    for f in dataclasses.fields(ProfileOptions):
        assert f"    {f.name}: {f.metadata['doc']}" in doc, f.name


def test_profile_builds_the_options_and_passes_the_rest_to_torch() -> None:
    prof = kinetolens.profile(steps=3, with_stack=False, acc_events=True)
    assert prof.options == ProfileOptions(steps=3, with_stack=False)
    assert prof.options.warmup == 2  # the default with steps
    assert prof.torch_kwargs == {"acc_events": True}


def test_options_cross_to_the_profiled_process_unchanged() -> None:
    sent = ProfileOptions(logdir="/tmp/x", run="r", steps=3, skip=1, counters=["roofline"], with_stack=False)
    received = ProfileOptions.from_config({**json.loads(json.dumps(sent.to_config())), "command": ["python"]})
    assert received == sent
    assert set(sent.to_config()) == set(NAMES) - {"activities"}


def test_bad_values_fail_when_the_options_are_made() -> None:
    for bad in ({"steps": 0}, {"warmup": -1}, {"repeat": True}, {"run": "a/b"}, {"sample_rate": 0}, {"counters": ["bogus"]}):
        with pytest.raises(ValueError, match="kinetolens.profile"):
            ProfileOptions(**bad)
    with pytest.raises(CaptureUnsupportedError, match="profile_device=False"):
        ProfileOptions(counters="roofline", profile_device=False)
