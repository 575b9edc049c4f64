"""Private by default (umbra/privacy/cloud_policy.py, applied by umbra/connect.py): a real cloud on
127.0.0.1 takes an undefended plain model's states; the same real cloud listening on 0.0.0.0 and
reached through this machine's own non-loopback address refuses the link before anything is sent
(the cloud's own counters stay at zero), unless the flag or the environment opts in — and then the
mode in force says so. A link whose mode is offered (defended, and completing above the client's
blocks alone) goes through; a defended mode below that control (every one the tables hold) is
refused as not worth sending; an untuned bundle, deciphered at 10× traffic at every ε the grid
measured, is refused like the plain model."""

from __future__ import annotations

import asyncio
from dataclasses import replace
import ipaddress
import re
import subprocess
from pathlib import Path

import httpx
import pytest

from server.launch import local_cloud_thread
from umbra.connect import CloudConfig, open_middle
from umbra.engine import ClientModel, CompletionEngine, EngineConfig, StopConfig
from umbra.errors import ConfigError
from umbra.privacy.bundle import BundleConfig, init_bundle
from umbra.privacy.cloud_policy import (
    OPT_IN_ENV,
    UndefendedCloudRefused,
    mode_in_force,
    on_this_machine,
    opted_in,
)
from umbra.privacy.measured import CONTROL_MARGIN, measured_table
from umbra.privacy.mode import PrivacyMode

CONFIG = EngineConfig(stop=StopConfig(max_tokens=4))


@pytest.mark.parametrize("url, here", [
    (None, True), ("http://127.0.0.1:8000", True), ("https://127.3.4.5", True), ("http://[::1]:9/", True),
    ("http://localhost:1", True), ("http://LOCALHOST.:1", True), ("http://[::ffff:127.0.0.1]:1", True),
    ("http://192.0.2.2:8000", False), ("http://0.0.0.0:8000", False), ("http://10.0.0.1", False),
    ("https://cloud.example.com", False), ("http://127.0.0.1.nip.io:80", False),  # a name: never looked up
    ("http://localhost.evil.example", False), ("http://[fd00::2]:1", False),
])
def test_which_clouds_are_on_this_machine(url, here):
    assert on_this_machine(url) is here


def test_the_opt_in_comes_from_the_setting_or_the_environment():
    assert not opted_in(False, {})
    assert opted_in(True, {})
    assert opted_in(False, {OPT_IN_ENV: "1"}) and opted_in(False, {OPT_IN_ENV: "true"})
    assert not opted_in(False, {OPT_IN_ENV: "0"})
    with pytest.raises(ConfigError, match=OPT_IN_ENV):
        opted_in(False, {OPT_IN_ENV: "maybe"})


def test_the_rule_for_each_mode():
    none = PrivacyMode.of(None, None)
    assert mode_in_force(none, None, environ={}) is none  # self-started: anything goes
    with pytest.raises(UndefendedCloudRefused) as refused:
        mode_in_force(none, "https://cloud.example.com", environ={})
    message = str(refused.value)
    assert "'none'" in message and "99.9 %" in message and "--allow-undefended-remote-cloud" in message
    assert OPT_IN_ENV in message and "umbra.allowUndefendedRemoteCloud" in message
    sent = mode_in_force(none, "https://cloud.example.com", allow=True, environ={})
    assert sent.opted_in and sent.summary.startswith("none — sent undefended by your setting")
    unmeasured = PrivacyMode.of(500.0, None)
    with pytest.raises(UndefendedCloudRefused, match="nothing measured"):
        mode_in_force(unmeasured, "https://cloud.example.com", environ={})
    offered = _an_offered_mode()
    assert mode_in_force(offered, "https://cloud.example.com", environ={}) is offered
    # every defended mode the tables hold completes below the client's blocks alone: not worth
    # sending, and the refusal says why and points to client-only mode
    defended = _a_defended_mode()
    with pytest.raises(UndefendedCloudRefused, match="not worth sending") as refused:
        mode_in_force(defended, "https://cloud.example.com", environ={})
    m = defended.measured
    assert f"{m.top1:.1f} % vs {m.client_alone_top1:.1f} %" in str(refused.value)
    assert "--client-only" in str(refused.value) and OPT_IN_ENV in str(refused.value)
    sent = mode_in_force(defended, "https://cloud.example.com", allow=True, environ={})
    assert sent.opted_in and sent.summary.startswith(f"{defended.label} — sent by your setting · attacks held")
    uncontrolled = PrivacyMode(offered.key, offered.label, replace(offered.measured, client_alone_top1=None))
    assert uncontrolled.defended and not uncontrolled.offered
    with pytest.raises(UndefendedCloudRefused, match="not measured against the client's blocks alone"):
        mode_in_force(uncontrolled, "https://cloud.example.com", environ={})
    for eps in (1.0, 13.0, 1024.0):  # untuned: the decipherment reads each at 10× traffic (frontier.md)
        deciphered = PrivacyMode.of(eps, None)
        assert deciphered.measured is not None and not deciphered.defended
        with pytest.raises(UndefendedCloudRefused, match="decipher"):
            mode_in_force(deciphered, "https://cloud.example.com", environ={})


def _a_defended_mode() -> PrivacyMode:
    """A configuration the package's tables measured as defended (every attack, the decipherment
    included where it ran, within a point of the frequency baseline), as `umbra tune` hands the
    mode of the configuration it trains to the link; like every defended one measured so far, it
    completes below the client-blocks-alone control."""
    key, measured = next((k, m) for k, m in sorted(measured_table().items()) if m.holds and m.adaptive)
    mode = PrivacyMode(key, measured.label, measured)
    assert mode.defended and measured.below_control and not mode.offered
    return mode


def _an_offered_mode() -> PrivacyMode:
    """The defended mode above with figures no configuration has reached yet: a top-1 above the
    client-blocks-alone control plus its margin (the rule's other side, which the tables lack)."""
    defended = _a_defended_mode()
    m = defended.measured
    better = replace(m, top1=m.client_alone_top1 + CONTROL_MARGIN + 1.0)
    mode = PrivacyMode(defended.key, defended.label, better)
    assert mode.offered and better.beats_control
    return mode


def _own_address() -> str:
    """A non-loopback IPv4 address of this machine (`hostname -I`)."""
    out = subprocess.run(["hostname", "-I"], capture_output=True, text=True, check=True).stdout.split()
    found = [a for a in out if ":" not in a and not ipaddress.ip_address(a).is_loopback]
    assert found, f"this machine has no non-loopback IPv4 address ({out})"
    return found[0]


def _received(cloud) -> dict[str, float]:
    """The cloud's own counters of what reached it (read over loopback)."""
    text = httpx.get(cloud.base_url + "/metrics", headers={"Authorization": f"Bearer {cloud.token}"}).text
    counts = {"umbra_cloud_bytes_in_total": 0.0, "umbra_cloud_sessions_opened_total": 0.0}
    for name, value in re.findall(r"^(umbra_cloud_(?:bytes_in|sessions_opened)_total)(?:\{[^}]*\})? (\S+)$", text, re.M):
        counts[name] += float(value)  # summed over transports (http, ws)
    return counts


async def _complete(model, config: CloudConfig, mode: PrivacyMode | None = None):
    async with open_middle(model, config, mode) as link:
        engine = CompletionEngine.split(model, link.middle, CONFIG, context_length=link.max_seq_len)
        await engine.complete("def add(a, b):\n    return ", "\n")
        return link.privacy


@pytest.fixture(scope="module")
def public_cloud(fim_llama_dir):
    """The real cloud service listening on every address of this machine."""
    with local_cloud_thread(fim_llama_dir, settings={"host": "0.0.0.0", "torch_threads": 1}) as cloud:
        port = cloud.base_url.rsplit(":", 1)[1]
        yield cloud, f"http://{_own_address()}:{port}"


def test_a_loopback_cloud_takes_undefended_states(fim_llama_dir, public_cloud, monkeypatch):
    monkeypatch.delenv(OPT_IN_ENV, raising=False)
    cloud, _ = public_cloud
    before = _received(cloud)
    mode = asyncio.run(_complete(ClientModel.load(fim_llama_dir), CloudConfig(url=cloud.base_url, token=cloud.token)))
    assert mode.key == "none" and not mode.opted_in
    assert _received(cloud)["umbra_cloud_bytes_in_total"] > before["umbra_cloud_bytes_in_total"]


def test_a_cloud_not_on_this_machine_is_refused_before_anything_is_sent(fim_llama_dir, public_cloud, monkeypatch):
    monkeypatch.delenv(OPT_IN_ENV, raising=False)
    cloud, remote = public_cloud
    model = ClientModel.load(fim_llama_dir)
    before = _received(cloud)
    # no token anywhere: the refusal comes first, before the token is even looked up
    config = CloudConfig(url=remote, token_env="UMBRA_POLICY_TEST_NO_TOKEN", keyring_service="umbra-policy-none")
    with pytest.raises(UndefendedCloudRefused, match="not on this machine"):
        asyncio.run(_complete(model, config))
    with pytest.raises(UndefendedCloudRefused):
        asyncio.run(_complete(model, CloudConfig(url=remote, token=cloud.token)))
    assert _received(cloud) == before  # nothing reached it

    sent = asyncio.run(_complete(model, CloudConfig(url=remote, token=cloud.token, allow_undefended_remote_cloud=True)))
    assert sent.opted_in and sent.summary.startswith("none — sent undefended by your setting")
    after_flag = _received(cloud)
    assert after_flag["umbra_cloud_bytes_in_total"] > before["umbra_cloud_bytes_in_total"]  # the check can see traffic

    monkeypatch.setenv(OPT_IN_ENV, "1")
    assert asyncio.run(_complete(model, CloudConfig(url=remote, token=cloud.token))).opted_in
    assert _received(cloud)["umbra_cloud_bytes_in_total"] > after_flag["umbra_cloud_bytes_in_total"]


DEFAULT_MODEL = Path(__file__).resolve().parents[2] / "models" / "umbra-code-tiny"


def test_an_offered_mode_needs_no_opt_in_and_a_defended_one_below_the_control_does(tmp_path, keystore, monkeypatch):
    """An untuned bundle of the measured default model at ε = 13 is deciphered at 10× traffic
    (frontier.md), so a cloud on another address refuses it before anything is sent, unless the
    user opts in. A link opened for a configuration measured as defended (what `umbra tune` does
    for the configuration it trains) is refused too while it completes below the client's blocks
    alone, and one measured above them (offered) goes through without an opt-in."""
    monkeypatch.delenv(OPT_IN_ENV, raising=False)
    init_bundle(DEFAULT_MODEL, BundleConfig(epsilon=13.0), tmp_path / "b", store=keystore)
    model = ClientModel.from_bundle(tmp_path / "b", DEFAULT_MODEL, store=keystore)
    with local_cloud_thread(DEFAULT_MODEL, settings={"host": "0.0.0.0", "torch_threads": 1}) as cloud:
        remote = f"http://{_own_address()}:{cloud.base_url.rsplit(':', 1)[1]}"
        with pytest.raises(UndefendedCloudRefused, match="decipher"):
            asyncio.run(_complete(model, CloudConfig(url=remote, token=cloud.token)))
        assert _received(cloud)["umbra_cloud_sessions_opened_total"] == 0
        sent = asyncio.run(_complete(model, CloudConfig(url=remote, token=cloud.token,
                                                        allow_undefended_remote_cloud=True)))
        assert sent.key == "eps=13" and sent.opted_in
        before = _received(cloud)["umbra_cloud_sessions_opened_total"]
        with pytest.raises(UndefendedCloudRefused, match="not worth sending"):  # defended, below the control
            asyncio.run(_complete(model, CloudConfig(url=remote, token=cloud.token), _a_defended_mode()))
        assert _received(cloud)["umbra_cloud_sessions_opened_total"] == before
        offered = _an_offered_mode()
        mode = asyncio.run(_complete(model, CloudConfig(url=remote, token=cloud.token), offered))
        assert mode.key == offered.key and mode.offered and not mode.opted_in
        assert _received(cloud)["umbra_cloud_sessions_opened_total"] >= 2


def test_figures_of_the_measured_model_are_not_lent_to_another(fim_llama_dir, public_cloud, tmp_path, keystore,
                                                                monkeypatch):
    """The same configuration on another base model has no figures: not measured, so refused."""
    monkeypatch.delenv(OPT_IN_ENV, raising=False)
    cloud, remote = public_cloud
    init_bundle(fim_llama_dir, BundleConfig(epsilon=1024.0), tmp_path / "b", store=keystore)
    model = ClientModel.from_bundle(tmp_path / "b", fim_llama_dir, store=keystore)
    before = _received(cloud)
    with pytest.raises(UndefendedCloudRefused, match="base model other than the measured umbra-code-tiny"):
        asyncio.run(_complete(model, CloudConfig(url=remote, token=cloud.token)))
    assert _received(cloud) == before
