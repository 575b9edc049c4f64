"""Training code makes every tensor where its model is (umbra/model/device.py's rule), checked on
a CPU machine: with torch's default device set to "meta" during training, a tensor made without
a device lands on meta, and the first op that meets the model's CPU tensors fails — the error a
CUDA run would hit with that tensor on the CPU. What is built on the CPU by design (a fresh
adapter's and the in-loop probe's initial draws; on an accelerator they are drawn on the CPU and
moved) is built outside the check."""

from __future__ import annotations

import pytest
import torch

from device_check import on_cpu, factories_on_meta
from tests.tuning.conftest import tiny_config
from umbra.data.corpus import read_split
from umbra.engine import ClientModel
from umbra.evaluation.doc_scores import doc_scores
from umbra.middle.local import LocalMiddle
from umbra.model.loader import load_middle
from umbra.privacy.bundle import BundleConfig, init_bundle, load_bundle
from umbra.tuning import adversary as adversary_module
from umbra.tuning import dual_adapters, shared_params
from umbra.tuning.adapter_config import AdapterTrainConfig
from umbra.tuning.adversary import AdversaryConfig
from umbra.tuning.data import TuneData
from umbra.tuning.doc_blocks import DocumentBlocks
from umbra.tuning.gradient_noise import GradientNoise
from umbra.tuning.inversion_penalty import InversionPenalty
from umbra.tuning.loop import tune
from umbra.tuning.noesis import train_experts, train_shared
from umbra.tuning.noesis_config import FAMILIES, DPConfig, SharedConfig, StageOneConfig


@pytest.fixture
def cpu_by_design(monkeypatch):
    monkeypatch.setattr(shared_params, "build_adapter", on_cpu(shared_params.build_adapter))
    monkeypatch.setattr(dual_adapters, "build_adapter", on_cpu(dual_adapters.build_adapter))
    monkeypatch.setattr(adversary_module.InLoopAdversary, "__init__", on_cpu(adversary_module.InLoopAdversary.__init__))


def test_the_check_catches_a_tensor_made_without_a_device():
    weight = torch.ones(3)
    with factories_on_meta(), pytest.raises((RuntimeError, NotImplementedError)):
        (weight * torch.arange(3)).sum().item()  # torch.arange(3): made without a device


@pytest.mark.parametrize("family", FAMILIES)
async def test_noesis_stage_one_and_two_and_scores(base_dir, corpus_dir, cpu_by_design, family):
    model = ClientModel.load(base_dir)  # its own copy: `full` trains it in place
    middle = LocalMiddle(model.load_middle())
    docs = read_split(corpus_dir, "train")
    config = StageOneConfig(SharedConfig(family, prompt_length=4, rank=2, bottleneck=4),
                            DPConfig(1.0, 1e-3, expected_batch=6, epochs=0.25, noise_seed=5), context_length=40,
                            physical_batch=4, lr=1e-2, warmup_steps=1, fim_rate=0.5)
    blocks = DocumentBlocks(docs, model.tokenizer, config.block_len, config.fim_rate)
    held = blocks.eval_blocks(6)
    with factories_on_meta():
        shared = (await train_shared(model, middle, blocks, config)).adapter
        beside = () if shared is None else (shared,)
        texts = {"python": [d.text for d in docs if d.lang == "python"][:4]}
        experts = await train_experts(model, middle, texts, beside,
                                      AdapterTrainConfig(rank=2, epochs=1, block_len=32, batch_size=4, fim_rate=0.5))
        scores = await doc_scores(model, middle, held.ids, held.mask, (*beside, experts["python"][0]))
    assert scores.count.sum() > 0


async def test_stuning_with_noise_penalty_and_adversary(base_dir, corpus_dir, tmp_path, keystore, cpu_by_design):
    from umbra.tuning.inversion_penalty import own_codebook

    init_bundle(base_dir, BundleConfig(epsilon=32.0), tmp_path / "b", store=keystore)
    client = load_bundle(tmp_path / "b", store=keystore)
    config = tiny_config(gradient_noise=GradientNoise(0.5), inversion_penalty=InversionPenalty(weight=1.0),
                         adversary=AdversaryConfig(weight=1.0, hidden=8))
    data = TuneData.from_corpus(corpus_dir, base_dir, config, vocab_size=512)
    codebook = own_codebook(base_dir, data, config.inversion_penalty)
    middle = LocalMiddle(load_middle(base_dir))
    with factories_on_meta():
        result = await tune(client, middle, data, config, noise_seed=1, codebook=codebook, out_dir=tmp_path / "run")
    assert result.finished and len(result.losses) == config.steps
