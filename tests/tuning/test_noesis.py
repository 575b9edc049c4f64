"""NOESIS on the split client (umbra/tuning/noesis.py, per_sample.py, doc_blocks.py): per-document
gradients are each document's own for every shared family; one step runs the same operations
whichever documents were drawn; a fixed seed gives identical weights through LocalMiddle and the
real cloud; stage 2 trains experts beside the frozen shared parameters."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from server.launch import local_cloud_thread
from umbra.data.corpus import read_split
from umbra.errors import ConfigError
from umbra.evaluation.doc_scores import doc_scores
from umbra.middle.local import LocalMiddle
from umbra.middle.remote import RemoteMiddle
from umbra.tuning.adapter_config import AdapterTrainConfig
from umbra.tuning.doc_blocks import Blocks, DocumentBlocks, split_rows
from umbra.tuning.dp_sgd import DPRandom, plan_run
from umbra.tuning.noesis import dp_step, train_experts, train_shared
from umbra.tuning.noesis_config import (DEFAULT_CLIP_NORM, FAMILIES, FAMILY_CLIP_NORM, DPConfig, SharedConfig,
                                        StageOneConfig)
from umbra.tuning.per_sample import batch_grads, per_sample_grads
from umbra.tuning.shared_params import SharedParams


def _config(family="soft_prompt", epsilon=1.0, **dp) -> StageOneConfig:
    dp = {"delta": 1e-3, "expected_batch": 6, "epochs": 0.25, "noise_seed": 5, **dp}
    return StageOneConfig(SharedConfig(family, prompt_length=4, rank=2, bottleneck=4),
                          DPConfig(epsilon=epsilon, **dp), context_length=40, physical_batch=4, lr=1e-2,
                          warmup_steps=1, fim_rate=0.5)


@pytest.fixture(scope="module")
def docs(corpus_dir):
    return read_split(corpus_dir, "train")


def _blocks(model, docs, config):
    return DocumentBlocks(docs, model.tokenizer, config.block_len, config.fim_rate)


@pytest.mark.parametrize("family", FAMILIES)
async def test_each_documents_gradient_is_its_own(model, middle_blocks, docs, family):
    shared = SharedParams(model, SharedConfig(family, prompt_length=4, rank=2, bottleneck=4))
    with torch.no_grad():  # away from the zero init, so every parameter has a gradient
        for p in shared.parameters().values():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(0)) * 0.05)
    shared.train()
    middle = LocalMiddle(middle_blocks)
    blocks = _blocks(model, docs, _config(family)).train_blocks(np.arange(3), DPRandom(1), rows=4)
    session = await middle.open_session(training=True)
    per, losses = await per_sample_grads(shared, middle, session, blocks)
    for i in range(3):
        alone = Blocks(blocks.ids[i : i + 1], blocks.mask[i : i + 1], torch.ones(1))
        grads, loss = await batch_grads(shared, middle, session, alone)
        assert loss[0].item() == pytest.approx(losses[i].item(), rel=1e-5)
        for name, g in grads.items():
            torch.testing.assert_close(per[name][i], g, rtol=1e-4, atol=1e-6)
    assert all(torch.count_nonzero(g[3]) == 0 for g in per.values())  # the padding row: no real token
    await middle.close(session)
    for p in shared.holder.parameters():
        p.requires_grad_(False)


class OpLog(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops: list[tuple[str, tuple]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        shapes = tuple(tuple(a.shape) for a in args if isinstance(a, torch.Tensor))
        self.ops.append((str(func), shapes))
        return out


class ShapeLog(LocalMiddle):
    def __init__(self, blocks):
        super().__init__(blocks)
        self.sent: list[tuple] = []

    async def forward(self, hidden, positions, session, key_padding=None):
        self.sent.append(("forward", tuple(hidden.shape)))
        return await super().forward(hidden, positions, session, key_padding)

    async def backward(self, grad_out, session):
        self.sent.append(("backward", tuple(grad_out.shape)))
        return await super().backward(grad_out, session)


@pytest.mark.parametrize("family", ["soft_prompt", "lora"])
async def test_a_step_runs_the_same_operations_whichever_documents_were_drawn(model, middle_blocks, docs, family):
    """Neighbouring datasets (one drawn document removed): the same operators on the same shapes,
    and the same frames to the cloud — nothing branches on the documents' content (the number of
    equal-shaped chunks is ⌈|S| / physical batch⌉, a function of the draw's size alone)."""
    config = _config(family)
    plan = plan_run(config.dp, len(docs))
    traces = []
    for chosen in (np.array([0, 3, 5, 9, 11, 14, 20]), np.array([0, 3, 9, 11, 14, 20])):
        shared = SharedParams(model, config.shared)
        shared.train()
        middle = ShapeLog(middle_blocks)
        session = await middle.open_session(training=True)
        with OpLog() as log:
            await dp_step(shared, middle, session, _blocks(model, docs, config), chosen, plan, config, DPRandom(2))
        traces.append((log.ops, middle.sent))
        for p in shared.holder.parameters():
            p.requires_grad_(False)
    (ops_a, sent_a), (ops_b, sent_b) = traces
    assert len(ops_a) > 100 and ops_a == ops_b
    assert sent_a == sent_b and all(shape[0] == config.physical_batch for _, shape in sent_a)


def _snapshot(result) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in result.params.parameters().items()}


async def test_a_fixed_seed_gives_identical_weights_through_local_middle_and_the_cloud(
        model, middle_blocks, base_dir, docs):
    torch.set_num_threads(1)
    config = _config("soft_prompt")
    blocks = _blocks(model, docs, config)
    local = await train_shared(model, LocalMiddle(middle_blocks), blocks, config)
    with local_cloud_thread(base_dir, settings={"torch_threads": 1}) as cloud:
        middle = RemoteMiddle(cloud.base_url, cloud.token, hidden_size=model.spec.hidden_size)
        try:
            remote = await train_shared(model, middle, blocks, config)
        finally:
            await middle.aclose()
    other = await train_shared(model, LocalMiddle(middle_blocks), blocks,
                               StageOneConfig(config.shared, DPConfig(**{**config.dp.__dict__, "noise_seed": 6}),
                                              config.context_length, config.physical_batch, config.lr,
                                              config.weight_decay, config.warmup_steps, config.fim_rate))
    # two runs of one seed (one through each middle) give the same bits: the seed fixes the run
    a, c, d = (_snapshot(r) for r in (local, remote, other))
    assert local.plan.steps == math.ceil(0.25 * len(docs) / 6) and local.plan.epsilon <= 1.0
    assert all(torch.equal(a[n], c[n]) for n in a)
    assert local.losses == remote.losses and local.batch_sizes == remote.batch_sizes
    assert any(not torch.equal(a[n], d[n]) for n in a)  # another seed: other draws, other noise
    assert all(not p.requires_grad for p in local.params.parameters().values())


@pytest.mark.parametrize("family", FAMILIES)
async def test_non_private_stage_one_lowers_the_loss_of_its_documents(base_dir, middle_blocks, docs, family):
    """Every family learns when nothing is noised (the zero-initialized ones included: a flat DP row
    is then the noise or the budget, not a family that cannot move)."""
    from umbra.engine import ClientModel

    model = ClientModel.load(base_dir)  # its own: `full` trains the client's blocks in place
    config = _config(family, epsilon=math.inf, epochs=3.0, expected_batch=8)
    blocks = _blocks(model, docs, config)
    middle = LocalMiddle(middle_blocks)
    held = blocks.eval_blocks(24)
    before = await doc_scores(model, middle, held.ids, held.mask)
    lr = 3e-3 if family == "full" else 3e-2
    result = await train_shared(model, middle, blocks, StageOneConfig(config.shared, config.dp, config.context_length,
                                                                      config.physical_batch, lr, 0.0, 1, 0.0))
    after = await doc_scores(model, middle, held.ids, held.mask, () if result.adapter is None else (result.adapter,))
    assert result.plan.noise_multiplier == 0 and after.mean_loss < before.mean_loss - 0.05, (before.mean_loss,
                                                                                            after.mean_loss)


async def test_experts_train_beside_the_frozen_shared_parameters(model, middle_blocks, docs):
    shared = (await train_shared(model, LocalMiddle(middle_blocks), _blocks(model, docs, _config()), _config())).adapter
    prompt = shared.prompt.detach().clone()
    texts = {lang: [d.text for d in docs if d.lang == lang][:8] for lang in ("python", "go")}
    config = AdapterTrainConfig(rank=2, epochs=2, block_len=32, batch_size=4, fim_rate=0.0, seed=0)
    experts = await train_experts(model, LocalMiddle(middle_blocks), texts, (shared,), config)
    assert sorted(experts) == ["go", "python"] and experts["go"][0].name == "expert-go"
    assert torch.equal(shared.prompt, prompt)
    assert all(torch.count_nonzero(a.layers[str(i)][t].b) > 0 for a, _ in experts.values()
               for i in a.blocks for t in a.config.targets)
    with pytest.raises(ConfigError, match="no documents for language"):
        await train_experts(model, LocalMiddle(middle_blocks), {"python": texts["python"], "java": []}, (shared,), config)


def test_equal_shaped_chunks_and_bad_settings():
    blocks = Blocks(torch.zeros(5, 3, dtype=torch.int64), torch.ones(5, 3, dtype=torch.bool), torch.ones(5))
    chunks = split_rows(blocks, 4)
    assert [len(c) for c in chunks] == [4, 4] and chunks[1].weight.tolist() == [1, 0, 0, 0]
    empty = split_rows(Blocks(torch.zeros(0, 3, dtype=torch.int64), torch.zeros(0, 3, dtype=torch.bool),
                              torch.zeros(0)), 4)
    assert len(empty) == 1 and empty[0].weight.sum() == 0  # an empty draw still runs (and is noised)
    with pytest.raises(ConfigError):
        StageOneConfig(SharedConfig("soft_prompt", prompt_length=40), context_length=40).validate()
    with pytest.raises(ConfigError):
        SharedConfig("prefix").validate()


def test_stage_one_takes_the_familys_clip_bound_unless_one_is_given():
    """Whoever builds stage 1 (CLI, benchmarks, a library caller) gets the family's C when none is set;
    a given C wins; elsewhere (DP-LoRA, federation) an unset C plans at the default."""
    for family in FAMILIES:
        want = FAMILY_CLIP_NORM.get(family, DEFAULT_CLIP_NORM)
        assert StageOneConfig(SharedConfig(family)).dp.clip_norm == want
        assert StageOneConfig(SharedConfig(family), DPConfig(epsilon=2.0)).dp.clip_norm == want
        assert StageOneConfig(SharedConfig(family), DPConfig(clip_norm=0.25)).dp.clip_norm == 0.25
    assert FAMILY_CLIP_NORM["deep_prompt"] != DEFAULT_CLIP_NORM  # the table departs somewhere
    assert plan_run(DPConfig(expected_batch=10), 1_000).clip_norm == DEFAULT_CLIP_NORM
    assert plan_run(StageOneConfig(SharedConfig("deep_prompt"), DPConfig(expected_batch=10)).dp,
                    1_000).clip_norm == FAMILY_CLIP_NORM["deep_prompt"]
    with pytest.raises(ConfigError):
        DPConfig(clip_norm=0.0).validate()


needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA accelerator")


@needs_cuda
@pytest.mark.parametrize("family", FAMILIES)
async def test_on_cuda_stage_one_trains_what_the_cpu_trains(base_dir, docs, family):
    """The same draws (sampling, offsets, noise: the CSPRNG runs on the CPU) on either device; only
    the kernels differ, so the weights agree to float tolerance after a few steps."""
    from umbra.engine import ClientModel
    from umbra.model.device import resolve_device

    config = _config(family)
    trained = []
    for device in (torch.device("cpu"), resolve_device("cuda")):
        m = ClientModel.load(base_dir, device=device)  # a model of its own: `full` trains it in place
        trained.append(await train_shared(m, LocalMiddle(m.load_middle()), _blocks(m, docs, config), config))
    cpu, gpu = trained
    assert cpu.batch_sizes == gpu.batch_sizes
    assert all(p.device.type == "cuda" for p in gpu.params.parameters().values())
    a, b = _snapshot(cpu), _snapshot(gpu)
    for n in a:
        torch.testing.assert_close(b[n].cpu(), a[n], rtol=1e-3, atol=1e-4)


@needs_cuda
async def test_on_cuda_experts_and_scores_are_what_the_cpu_gives(base_dir, docs):
    from umbra.engine import ClientModel
    from umbra.model.device import resolve_device

    texts = {lang: [d.text for d in docs if d.lang == lang][:8] for lang in ("python", "go")}
    config = AdapterTrainConfig(rank=2, epochs=2, block_len=32, batch_size=4, fim_rate=0.0, seed=0)
    scores = []
    for device in (torch.device("cpu"), resolve_device("cuda")):
        m = ClientModel.load(base_dir, device=device)
        middle = LocalMiddle(m.load_middle())
        shared = (await train_shared(m, middle, _blocks(m, docs, _config()), _config())).adapter
        experts = await train_experts(m, middle, texts, (shared,), config)
        assert all(p.device == device for a, _ in experts.values() for p in a.parameters())
        held = _blocks(m, docs, _config()).eval_blocks(12)
        scores.append(await doc_scores(m, middle, held.ids, held.mask, (shared, experts["python"][0])))
    cpu, gpu = scores
    np.testing.assert_array_equal(gpu.count, cpu.count)
    np.testing.assert_allclose(gpu.loss, cpu.loss, rtol=1e-3)
    assert abs(gpu.accuracy - cpu.accuracy) <= 0.02
