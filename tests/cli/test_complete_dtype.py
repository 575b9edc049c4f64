"""`umbra complete --dtype`: the client's compute dtype, the wire's, and a self-started cloud's."""

from __future__ import annotations

import json

import pytest
import torch
from cli_helpers import COMPLETE_GEN as GEN
from cli_helpers import umbra_complete as _umbra

from umbra.engine import ClientModel


@pytest.fixture(scope="module")
def bf16_runs(model_dir, source):
    pos = f"{source}:2:13"  # after "    return a"
    split = _umbra(pos, "--model", model_dir, *GEN, "--dtype", "bf16", "--json")
    local = _umbra(pos, "--model", model_dir, *GEN, "--dtype", "bf16", "--local", "--json")
    fp32 = _umbra(pos, "--model", model_dir, *GEN, "--local", "--json")
    return split, local, fp32


def test_bf16_through_a_self_started_cloud_prints_the_same_as_bf16_local(bf16_runs):
    split, local, fp32 = bf16_runs
    for run in bf16_runs:
        assert run.returncode == 0, run.stderr
    a, b, c = (json.loads(r.stdout) for r in bf16_runs)
    assert a["dtype"] == b["dtype"] == "bf16" and c["dtype"] == "fp32"
    assert a["completion"] == b["completion"] and a["generated_tokens"] == b["generated_tokens"] > 0
    assert "umbra: privacy: none" in split.stderr  # it went through the cloud it started


def test_the_client_parts_are_loaded_in_the_dtype_asked_for(model_dir):
    model = ClientModel.load(model_dir, dtype=torch.bfloat16)
    assert model.dtype == torch.bfloat16
    assert {p.dtype for p in model.encoder.parameters()} == {torch.bfloat16}
    assert {p.dtype for p in model.decoder.parameters()} == {torch.bfloat16}


def test_a_dtype_the_client_does_not_run_is_a_usage_error(model_dir, source):
    bad = _umbra(f"{source}:2:13", "--model", model_dir, *GEN, "--dtype", "fp16", "--local")
    assert bad.returncode == 2 and "--dtype" in bad.stderr and bad.stdout == ""
