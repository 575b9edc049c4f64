"""open_middle (umbra/connect.py): the one way a client gets a Middle. A self-started cloud is the
real service on loopback, stopped on exit and started again after it dies; a configured cloud's
token is explicit, else the keyring entry, else the environment; bad settings are ConfigErrors."""

from __future__ import annotations

from pathlib import Path

from http_probe import refuses_connections
import pytest
import torch

from keys.cloud_tokens import cloud_token_name
from server.launch import local_cloud_thread
from umbra.connect import CloudConfig, find_token, open_middle, with_token
from umbra.errors import ConfigError

URL = "https://cloud.example:8443"


@pytest.fixture(scope="module")
def model(fim_llama_dir):
    """The tiny llama with a FIM tokenizer that the run builds once (tests/conftest.py)."""
    from umbra.engine import ClientModel

    return ClientModel.load(fim_llama_dir)


@pytest.mark.parametrize("fields, message", [
    (dict(url="cloud.example"), "starts with http:// or https://"),
    (dict(token="t"), "configured cloud URL only"),
    (dict(url=URL, token=" "), "token is empty"),
    (dict(url=URL, certificate=Path("/nonexistent/c.pem")), "is not a file"),
    (dict(threads=0), "threads must be >= 1"),
    (dict(token_env=""), "must not be empty"),
])
def test_bad_settings_are_config_errors(fields, message):
    with pytest.raises(ConfigError, match=message):
        CloudConfig(**fields).validate()


def test_token_explicit_then_keyring_then_environment(keystore, monkeypatch):
    config = CloudConfig(url=URL, keyring_service=keystore.service, token_env="UMBRA_TEST_TOKEN")
    monkeypatch.delenv("UMBRA_TEST_TOKEN", raising=False)
    with pytest.raises(ConfigError, match="no keyring entry") as err:
        find_token(config)
    assert "$UMBRA_TEST_TOKEN is not set" in str(err.value)
    monkeypatch.setenv("UMBRA_TEST_TOKEN", "from-env")
    assert find_token(config) == "from-env"
    keystore.set(cloud_token_name(URL), b"from-keyring")
    assert find_token(config) == "from-keyring"
    assert with_token(config).token == "from-keyring" and "from-keyring" not in repr(with_token(config))
    assert find_token(CloudConfig(url=URL, token="given", keyring_service=keystore.service)) == "given"


async def test_a_configured_cloud_gives_a_connected_remote_middle(model, monkeypatch):
    with local_cloud_thread(model.model_dir, model.plan, settings={"torch_threads": 1}) as cloud:
        config = CloudConfig(url=cloud.base_url + "/", token=cloud.token, audit=False)
        async with open_middle(model, config) as link:
            assert link.url == cloud.base_url and link.local is None and not link.self_started
            assert link.middle is link.remote and link.max_seq_len > 0 and link.exit_status() is None
            assert await link.reachable() and cloud.token not in repr(link)
            session = await link.middle.open_session()
            pos = torch.arange(3)[None]
            hidden = torch.randn(1, 3, model.spec.hidden_size)
            assert (await link.middle.forward(hidden, pos, session)).shape == hidden.shape
            await link.middle.close(session)
            with pytest.raises(ConfigError, match="only a self-started cloud"):
                await link.restart()
        assert link.remote is None  # closed; the cloud itself is not ours to stop
        assert await link.reachable()


async def test_a_self_started_cloud_is_stopped_on_exit_and_restarted_after_it_dies(model):
    async with open_middle(model, CloudConfig(threads=1, audit=False)) as link:
        assert link.self_started and link.url.startswith("http://127.0.0.1:") and link.exit_status() is None
        assert "a self-started cloud at" in link.describe() and await link.reachable()
        link.local.kill()
        assert link.exit_status() is not None and not await link.reachable()
        fresh = await link.restart()
        try:
            assert fresh is not link and fresh.url != link.url and fresh.exit_status() is None
            await fresh.connect()
            assert fresh.max_seq_len > 0
        finally:
            await fresh.aclose()
        assert refuses_connections(fresh.url)
    assert refuses_connections(link.url)
