"""A request is checked once and each model loaded once per command (issue 101): ``probe sample`` and ``probe
defuse identify`` run in this process, every check of a request and every read of a model file counted."""

from __future__ import annotations

import collections

import pytest
import torch

from probe_core.bayestrex import request as sample_requests
from probe_core.cli import main
from probe_core.defuse.distill_step import DistillRequest
from probe_core.defuse.identify_step import IdentifyRequest
from probe_core.runs.requests import record


@pytest.fixture
def counted(monkeypatch):
    """Counts of ``check_values`` per request type, of the sampler settings' check and of ``torch.load`` per file."""
    counts = collections.Counter()
    for request_type in (sample_requests.SampleRequest, IdentifyRequest, DistillRequest):
        original = request_type.check_values

        def counting(self, original=original, name=request_type.__name__):
            counts[name] += 1
            return original(self)

        monkeypatch.setattr(request_type, "check_values", counting)
    settings_check = sample_requests.check_sampler_settings

    def counting_settings(**settings):
        counts["sampler settings"] += 1
        return settings_check(**settings)

    monkeypatch.setattr(sample_requests, "check_sampler_settings", counting_settings)
    loads = collections.Counter()
    torch_load = torch.load

    def counting_load(path, *args, **kwargs):
        loads[str(path)] += 1
        return torch_load(path, *args, **kwargs)

    monkeypatch.setattr(torch, "load", counting_load)
    return counts, loads


def test_probe_sample_checks_its_request_once_and_loads_each_model_once(trained_workspace, counted, capsys):
    counts, loads = counted
    assert main(["--workspace", str(trained_workspace.root), "sample", "--target", "high:3", "--chains", "2",
                 "--warmup", "2", "--samples", "2"]) == 0
    assert counts["SampleRequest"] == 1 and counts["sampler settings"] == 1, counts
    assert loads and max(loads.values()) == 1, loads  # the classifier and the generator, once each
    assert "high:3" in capsys.readouterr().out


def test_probe_defuse_identify_checks_its_request_once_and_loads_each_model_once(trained_workspace, counted):
    counts, loads = counted
    assert main(["--workspace", str(trained_workspace.root), "defuse", "identify", "--max-images", "4",
                 "--samples-per-image", "4"]) == 0
    assert counts["IdentifyRequest"] == 1, counts  # built from the settings; the sized values are not checked again
    assert loads and max(loads.values()) == 1, loads


def test_a_request_read_back_from_its_record_is_not_checked_again_and_an_older_one_is(counted):
    from probe_core.runs.requests import from_record

    counts, _ = counted
    request = IdentifyRequest.from_settings(max_images=3, distill_after={"n_components": 5})
    assert counts["IdentifyRequest"] == 1 and counts["DistillRequest"] == 1  # the nested settings checked with it
    assert from_record(IdentifyRequest, record(request)) == request
    assert counts["IdentifyRequest"] == 1  # a record of this version: valid as stored
    older = {key: value for key, value in record(request).items() if key != "request_version"}
    assert from_record(IdentifyRequest, older) == request
    assert counts["IdentifyRequest"] == 2  # a record without the version is checked as it is read
    from probe_core.errors import ProbeError
    with pytest.raises(ProbeError, match="images"):
        from_record(IdentifyRequest, {**older, "max_images": 0})
    assert request.derived(max_images=7).max_images == 7 and counts["IdentifyRequest"] == 3
