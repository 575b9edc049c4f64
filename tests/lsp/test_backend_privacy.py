"""`umbra/status`'s `privacy`: what protects the traffic of the model the backend loaded, read from
the real model and, for a bundle, its manifest — "none" for a plain model, "NOIR ε=E" for a client
bundle (∞ when the bundle adds no INDVocab noise). The LSP tests check it arrives in the
notification (test_lsp_server.py: none; test_experts.py: a bundle)."""

from __future__ import annotations

import asyncio

import pytest

from lsp.backend import Backend, privacy_mode
from lsp.options import InitializationOptions
from umbra.engine import ClientModel
from umbra.privacy.bundle import BundleConfig, init_bundle


def test_a_plain_model_has_no_privacy(lsp_model_dir):
    assert privacy_mode(ClientModel.load(lsp_model_dir)) == "none"


@pytest.mark.parametrize("epsilon, shown", [(4.0, "NOIR ε=4"), (0.5, "NOIR ε=0.5"), (float("inf"), "NOIR ε=∞")])
def test_a_bundle_reports_its_manifest_epsilon(lsp_model_dir, tmp_path, keystore, epsilon, shown):
    out = tmp_path / "bundle"
    init_bundle(lsp_model_dir, BundleConfig(epsilon=epsilon), out, store=keystore)
    assert privacy_mode(ClientModel.from_bundle(out, lsp_model_dir, store=keystore)) == shown


def test_the_status_carries_it_once_the_model_is_loaded(lsp_model_dir, tmp_path, keystore):
    """Before loading: unknown (null). A set-up that fails after loading (here: a configured cloud
    URL with no token anywhere) still says what the loaded model would have sent under."""
    out = tmp_path / "bundle"
    init_bundle(lsp_model_dir, BundleConfig(epsilon=8.0), out, store=keystore)
    options = InitializationOptions.from_json({
        "model": {"bundle": str(out), "dir": str(lsp_model_dir), "keyringService": keystore.service},
        "cloud": {"url": "http://127.0.0.1:9", "tokenEnv": "UMBRA_PRIVACY_TEST_NO_SUCH_TOKEN"},
    })
    seen = []
    backend = Backend(options, on_status=seen.append)
    assert backend.status.to_json()["privacy"] is None

    async def run():
        await backend.start()
        await backend.aclose()

    asyncio.run(run())
    assert seen[0].privacy is None  # "loading the model"
    assert seen[-1].state == "error", seen
    assert seen[-1].to_json()["privacy"] == "NOIR ε=8"
