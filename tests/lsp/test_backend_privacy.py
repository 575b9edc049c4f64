"""`umbra/status`'s `privacy` and `privacyDetails`: the privacy mode in force for the model the
backend loaded (umbra/privacy/mode.py) — its summary line and the attack tables' figures — read
from the real model and, for a bundle, its manifest; and the private-by-default rule at set-up: a
cloud not on this machine is an "error" naming the mode unless `allowUndefendedRemoteCloud` opts
in, and then the status says the states go undefended. The LSP tests check it arrives in the
notification (test_lsp_server.py: none; test_experts.py: a bundle)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from lsp.backend import Backend
from lsp.options import InitializationOptions
from umbra.privacy.bundle import BundleConfig, init_bundle
from umbra.privacy.mode import PrivacyMode

DEFAULT_MODEL = Path(__file__).resolve().parents[2] / "models" / "umbra-code-tiny"


def _run(options: InitializationOptions) -> list:
    seen = []
    backend = Backend(options, on_status=seen.append)
    assert backend.status.to_json()["privacy"] is None and backend.status.to_json()["privacyDetails"] is None

    async def run():
        await backend.start()
        await backend.aclose()

    asyncio.run(run())
    return seen


def _bundle_status(model_dir, out, keystore) -> list:
    init_bundle(model_dir, BundleConfig(epsilon=1024.0), out, store=keystore)
    return _run(InitializationOptions.from_json({
        "model": {"bundle": str(out), "dir": str(model_dir), "keyringService": keystore.service},
        "cloud": {"url": "http://127.0.0.1:9", "tokenEnv": "UMBRA_PRIVACY_TEST_NO_SUCH_TOKEN"},
    }))


def test_the_status_carries_the_mode_once_the_model_is_loaded(tmp_path, keystore):
    """Before loading: unknown (null). A set-up that fails after loading (here: a configured loopback
    cloud URL with no token anywhere) still says what the loaded model would have sent under. The
    figures are the measured default model's."""
    seen = _bundle_status(DEFAULT_MODEL, tmp_path / "bundle", keystore)
    assert seen[0].privacy is None  # "loading the model"
    assert seen[-1].state == "error" and "no keyring entry" in seen[-1].message, seen
    status = seen[-1].to_json()
    expected = PrivacyMode.of(1024.0, None)  # the package's figures for an untuned bundle at ε = 1 024
    assert expected.measured is not None and status["privacy"] == expected.summary
    assert status["privacy"].startswith("NOIR ε=1024 · ")
    details = status["privacyDetails"]
    assert details["key"] == "eps=1024" and details["defended"] == expected.defended
    assert details["top1"] == expected.measured.top1 and details["source"] == expected.measured.source


def test_a_bundle_of_another_base_model_is_not_measured(lsp_model_dir, tmp_path, keystore):
    status = _bundle_status(lsp_model_dir, tmp_path / "bundle", keystore)[-1].to_json()
    assert status["privacy"] == ("NOIR ε=1024 · base model other than the measured umbra-code-tiny, umbra-code-deep"
                                 " · not measured")
    assert status["privacyDetails"]["measured"] is False and status["privacyDetails"]["defended"] is False


def test_an_undefended_mode_and_a_remote_cloud_is_an_error_naming_the_mode(lsp_model_dir, monkeypatch):
    monkeypatch.delenv("UMBRA_ALLOW_UNDEFENDED_REMOTE_CLOUD", raising=False)
    remote = {"url": "http://192.0.2.1:9", "tokenEnv": "UMBRA_PRIVACY_TEST_NO_SUCH_TOKEN"}
    seen = _run(InitializationOptions.from_json({"model": {"dir": str(lsp_model_dir)}, "cloud": remote}))
    assert seen[-1].state == "error", seen
    assert "not on this machine" in seen[-1].message and "allowUndefendedRemoteCloud" in seen[-1].message
    assert seen[-1].privacy == "none · cloud reads ~99.9 % of tokens"

    # opted in: the rule lets it through (the set-up then fails on the missing token), and says so
    seen = _run(InitializationOptions.from_json({"model": {"dir": str(lsp_model_dir)}, "cloud": remote,
                                                 "allowUndefendedRemoteCloud": True}))
    assert seen[-1].state == "error" and "no keyring entry" in seen[-1].message, seen
    assert seen[-1].privacy == "none — sent undefended by your setting · cloud reads ~99.9 % of tokens"
    assert seen[-1].privacy_details["optedIn"] is True
