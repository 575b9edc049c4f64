"""The cloud's per-client LoRA on the middle: trained by STuning's backward for its owner only,
applied to its owner's sessions only, invisible (no weights over the API) and off by default."""

from __future__ import annotations

import pytest
import torch

from server.launch import local_cloud_thread
from tests.tuning.conftest import tiny_config
from umbra.cli.main import main
from umbra.errors import CloudRejected
from umbra.middle.local import LocalMiddle
from umbra.middle.remote import RemoteMiddle
from umbra.model.loader import load_middle
from umbra.privacy.bundle import BundleConfig, init_bundle, load_bundle
from umbra.tuning.cloud_lora import CloudLora, CloudLoraConfig
from umbra.tuning.data import TuneData
from umbra.tuning.loop import tune


@pytest.fixture
def bundle_dir(base_dir, tmp_path, keystore):
    out = tmp_path / "bundle"
    init_bundle(base_dir, BundleConfig(epsilon=32.0), out, store=keystore)
    return out


async def _middle_out(url: str, token: str, hidden: torch.Tensor) -> torch.Tensor:
    middle = RemoteMiddle(url, token, hidden_size=64)
    try:
        session = await middle.open_session()
        return await middle.forward(hidden, torch.arange(hidden.shape[1])[None], session)
    finally:
        await middle.aclose()


async def test_adapter_is_trained_and_served_for_its_owner_only(base_dir, corpus_dir, bundle_dir, keystore):
    config = tiny_config(steps=4)
    hidden = torch.randn(1, 7, 64, generator=torch.Generator().manual_seed(0))
    local = LocalMiddle(load_middle(base_dir))
    base_out = await local.forward(hidden, torch.arange(7)[None], await local.open_session())
    plain = await tune(load_bundle(bundle_dir, store=keystore), LocalMiddle(load_middle(base_dir)),
                       TuneData.from_corpus(corpus_dir, base_dir, config), config)
    with local_cloud_thread(base_dir, settings={"lora": True, "torch_threads": 1}) as cloud:
        other = cloud.add_token("other")
        async with CloudLora(cloud.base_url, cloud.token) as mine, CloudLora(cloud.base_url, other) as theirs:
            fresh = await mine.configure(CloudLoraConfig(rank=4, seed=0))
            assert fresh["enabled"] and fresh["steps"] == 0 and "a" not in fresh and "weights" not in fresh
            assert torch.equal(await _middle_out(cloud.base_url, cloud.token, hidden), base_out)  # B = 0
            middle = RemoteMiddle(cloud.base_url, cloud.token, hidden_size=64)
            try:
                with_lora = await tune(load_bundle(bundle_dir, store=keystore), middle,
                                       TuneData.from_corpus(corpus_dir, base_dir, config), config)
            finally:
                await middle.aclose()
            assert (await mine.info())["steps"] == 4
            assert with_lora.losses[0] == plain.losses[0] and with_lora.losses[1:] != plain.losses[1:]
            own = await _middle_out(cloud.base_url, cloud.token, hidden)
            foreign = await _middle_out(cloud.base_url, other, hidden)
            assert not torch.allclose(own, base_out) and torch.equal(foreign, base_out)
            assert await theirs.info() == {"enabled": False}
            with pytest.raises(CloudRejected, match="404"):
                await theirs.delete()  # nobody can touch another client's adapter
            frozen = await mine.set_training(False)
            assert frozen["train"] is False and frozen["steps"] == 4
            await mine.delete()
            assert torch.equal(await _middle_out(cloud.base_url, cloud.token, hidden), base_out)


async def test_lora_is_off_unless_the_cloud_enables_it(base_dir):
    with local_cloud_thread(base_dir, settings={"torch_threads": 1}) as cloud:
        async with CloudLora(cloud.base_url, cloud.token) as lora:
            with pytest.raises(CloudRejected, match="LoRA is not enabled on this cloud"):
                await lora.configure(CloudLoraConfig())


def test_tune_cli_cloud_lora(base_dir, corpus_dir, bundle_dir, keystore, capsys):
    flags = ["--steps", "2", "--batch-size", "2", "--context-length", "32", "--corpus-dir", str(corpus_dir),
             "--service", keystore.service, "--threads", "1", "--cloud-lora", "--lora-rank", "2"]
    assert main(["tune", "--bundle", str(bundle_dir), "--in-process", *flags]) == 2
    assert "--cloud-lora trains an adapter the cloud keeps" in capsys.readouterr().err
    with local_cloud_thread(base_dir, settings={"lora": True, "torch_threads": 1}) as cloud:
        assert main(["tune", "--bundle", str(bundle_dir), "--cloud", cloud.base_url, "--token", cloud.token,
                     *flags]) == 0
        assert "cloud LoRA: rank 2, 2 steps" in capsys.readouterr().err
        info = cloud.server.config.app.state.cloud.manager.lora.info("local")
    assert info["steps"] == 2 and info["train"] is False
