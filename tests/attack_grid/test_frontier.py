"""The frontier's cells on a tiny model: tuned once and stored (a reload is the same client and
the same recorded tuning traffic), the client-alone control sends nothing and is evaluated with
the middle skipped, and measurements run on the stored client."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from tiny_models import CODE_SNIPPETS, build_tiny_model_dir

from umbra.attack_grid.frontier import VARIANTS, Cell, CellData, FrontierParams, cells, tune_config, tuned_cell
from umbra.attack_grid.measures import attacks, sent_prompts, utility
from umbra.attacks.probe import ProbeConfig
from umbra.attacks.public import CorpusSample, PublicModel
from umbra.attacks.suite import AttackSuite, SuiteConfig
from umbra.data.corpus import Document, write_documents
from umbra.errors import ConfigError
from umbra.tuning import TuneData

PARAMS = FrontierParams(tune_steps=3, batch_size=2, context_length=32, warmup_steps=0, gradient_steps=1,
                        prompt_blocks=4, prompt_length=32, public_blocks=40, eval_tokens=256)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("frontier")
    build_tiny_model_dir(root / "model", family="qwen2-tied")
    rng = random.Random(0)
    for split, n in (("train", 40), ("test", 8)):
        docs = [Document("python", f"{split}/{i}.py", "".join(rng.sample(CODE_SNIPPETS, 3))) for i in range(n)]
        write_documents(root / "corpus", split, "python", docs)
    public = PublicModel(root / "model")
    data = TuneData.from_corpus(root / "corpus", root / "model", tune_config(Cell(VARIANTS["fclean"], None, 0), PARAMS),
                                split="train", langs=("python",), vocab_size=public.vocab_size)
    prompts = public.sample_blocks(CorpusSample(root / "corpus", "test", ("python",), 32, 4, seed=1, per_document=1))
    evals = {"python": prompts}
    return root, public, data, prompts, evals


def _weights(client) -> dict[str, torch.Tensor]:
    return {**{f"e.{k}": v.clone() for k, v in client.encoder.state_dict().items()},
            **{f"d.{k}": v.clone() for k, v in client.decoder.state_dict().items()}}


def test_cells_enumerate_variants_epsilons_and_seeds():
    grid = cells(["client_alone", "noir+stuning+noise"], [13.0, 1024.0], [0, 1])
    assert [c.key for c in grid] == ["client_alone@-#s0", "client_alone@-#s1", "noir+stuning+noise@13#s0",
                                     "noir+stuning+noise@1024#s0", "noir+stuning+noise@13#s1", "noir+stuning+noise@1024#s1"]
    assert grid[2].defence().indvocab_epsilon == 13.0 and grid[2].defence().ltokenizer
    assert grid[0].defence().indvocab_epsilon is None and not grid[0].defence().ltokenizer
    with pytest.raises(ConfigError):
        cells(["no-such-variant"], [1.0], [0])


def _cell_data(world) -> CellData:
    root, public, _, _, _ = world
    return CellData(root / "corpus", root / "model", langs=("python",), vocab_size=public.vocab_size)


def test_each_seed_tunes_on_its_own_data_order_in_one_process(world, tmp_path):
    """A run over seeds 1 and 2 once handed seed 1's data order to seed 2 (the client-alone
    control, whose only draw is the data order, came out identical at both): CellData keeps
    one stream per seed, and tuned_cell refuses another seed's stream."""
    _, public, data, _, _ = world
    by_cell = _cell_data(world)
    alone0, alone1 = Cell(VARIANTS["client_alone"], None, 0), Cell(VARIANTS["client_alone"], None, 1)
    assert by_cell(alone0, PARAMS) is by_cell(Cell(VARIANTS["fclean"], None, 0), PARAMS)  # one stream per seed
    first0, _, _ = by_cell(alone0, PARAMS).batch(0, 0, 4)
    first1, _, _ = by_cell(alone1, PARAMS).batch(0, 0, 4)
    assert not np.array_equal(first0, first1)
    with pytest.raises(ConfigError, match="seed 0"):
        tuned_cell(public, alone1, PARAMS, data, tmp_path)  # the fixture's stream is seed 0's
    a = _weights(tuned_cell(public, alone0, PARAMS, by_cell(alone0, PARAMS), tmp_path).client)
    tuned1 = tuned_cell(public, alone1, PARAMS, by_cell(alone1, PARAMS), tmp_path)
    b = _weights(tuned1.client)
    assert any(not torch.equal(a[k], b[k]) for k in a)
    assert tuned1.data_seed == 1 and tuned_cell(public, alone1, PARAMS, None, tmp_path).data_seed == 1  # kept in the store


def test_a_tuned_cell_is_stored_and_reloaded_unchanged(world, tmp_path):
    _, public, data, _, _ = world
    cell = Cell(VARIANTS["noir+stuning+noise"], 64.0, 0)
    first = tuned_cell(public, cell, PARAMS, data, tmp_path)
    assert (tmp_path / "tuned" / f"{cell.key}.pt").is_file()
    assert len(first.losses) == PARAMS.tune_steps and first.training and all(s.grad is not None for s in first.training)
    again = tuned_cell(public, cell, PARAMS, data, tmp_path)
    a, b = _weights(first.client), _weights(again.client)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert again.losses == first.losses and len(again.training) == len(first.training)
    untuned = tuned_cell(public, Cell(VARIANTS["noir"], 64.0, 0), PARAMS, data, tmp_path)
    moved = _weights(untuned.client)
    assert any(not torch.equal(a[k], moved[k]) for k in a)  # tuning moved the client


def test_client_alone_sends_nothing_and_differs_from_fclean(world, tmp_path):
    root, public, data, prompts, evals = world
    alone = tuned_cell(public, Cell(VARIANTS["client_alone"], None, 0), PARAMS, data, tmp_path)
    fclean = tuned_cell(public, Cell(VARIANTS["fclean"], None, 0), PARAMS, data, tmp_path)
    assert alone.training == [] and fclean.training
    suite = AttackSuite.build(public, SuiteConfig(corpus=CorpusSample(root / "corpus", langs=("python",), block_length=32,
                                                                      blocks=40), attacks=("baseline", "nearest"),
                                                  probe=ProbeConfig(hidden=32, epochs=1)))
    assert attacks(public, suite, alone, prompts) == {}
    scored = attacks(public, suite, fclean, prompts)
    assert {"baseline", "nearest"} <= set(scored)
    assert len(sent_prompts(public, fclean, prompts)) == len(prompts)
    u_alone, u_clean = utility(public, alone, evals), utility(public, fclean, evals)
    assert u_alone["languages"]["python"]["tokens"] == u_clean["languages"]["python"]["tokens"] > 0
    assert u_alone["languages"]["python"]["loss"] != u_clean["languages"]["python"]["loss"]  # the middle matters
    assert 0 <= u_alone["top1"] <= 100 and np.isfinite(u_alone["languages"]["python"]["loss"])


def test_a_private_path_cell_sends_keyed_noise_and_keeps_its_path(world, tmp_path):
    _, public, data, prompts, evals = world
    cell = Cell(VARIANTS["noir+path+rank8+noise1"], 64.0, 0)
    tuned = tuned_cell(public, cell, PARAMS, data, tmp_path)
    w = tuned.client.private_path.local.weight.detach().clone()
    assert w.abs().max() > 0  # STuning moved W from its zero start
    again = tuned_cell(public, cell, PARAMS, data, tmp_path)
    assert torch.equal(again.client.private_path.local.weight, w)
    sent, resent = sent_prompts(public, tuned, prompts), sent_prompts(public, again, prompts)
    assert all(torch.equal(a.hidden, b.hidden) for a, b in zip(sent, resent))  # same prefix, same noise
    with torch.no_grad():
        ids = tuned.client.private(prompts[:1])
        clean = tuned.client.encoder(ids, torch.arange(ids.shape[1])[None])[0]
    assert not torch.allclose(sent[0].hidden, clean, atol=1e-3)  # what left is not the encoder's output
    basis = tuned.client.private_path.basis
    inside = sent[0].hidden @ basis @ basis.T
    torch.testing.assert_close(inside, sent[0].hidden, rtol=0, atol=1e-4)  # it lies in the rank-8 subspace
    seed1 = Cell(VARIANTS["noir+path+rank8+noise1"], 64.0, 1)
    other = tuned_cell(public, seed1, PARAMS, _cell_data(world)(seed1, PARAMS), tmp_path)
    assert not torch.equal(other.client.private_path.basis, basis)  # the secret (and basis) is the seed's
    assert utility(public, tuned, evals)["languages"]["python"]["tokens"] > 0


def test_the_adaptive_measures_run_on_a_stored_cell(world, tmp_path):
    """Shadow (split + every middle layer), oracle (held-out files) and decipherment at 1×/10×/100×
    on one tuned cell; the client-alone control has nothing for any of them."""
    root, public, data, prompts, _ = world
    from umbra.attack_grid.measures import VOLUMES, decipher, oracle, shadow

    suite = AttackSuite.build(public, SuiteConfig(corpus=CorpusSample(root / "corpus", langs=("python",), block_length=32,
                                                                      blocks=40), attacks=("baseline",)))
    tuned = tuned_cell(public, Cell(VARIANTS["noir+stuning+noise"], 64.0, 0), PARAMS, data, tmp_path)
    public_code = CorpusSample(root / "corpus", langs=("python",), block_length=32, blocks=40)
    s = shadow(public, suite, tuned, prompts, PARAMS, public_code, tmp_path / "shadows")
    layers = [k for k in s if k.startswith("shadow@")]
    assert "shadow" in s and "shadow_layers" in s and len(layers) == 1 + len(public.middle.stack.layers)
    held = np.ascontiguousarray(np.concatenate([prompts[:, ::-1], np.roll(prompts, 5, axis=1)]))  # other sequences
    o = oracle(public, suite, tuned, prompts, held)
    assert "oracle" in o and all(0 <= v["recovery"] <= 1 for v in o.values())
    volume = np.tile(prompts, (max(VOLUMES) * 64 // len(prompts) + 1, 1))
    d = decipher(public, suite, tuned, volume)
    assert list(d) == [f"{k}x" for k in VOLUMES] and all(0 <= v["recovery"] <= 1 for v in d.values())
    alone = tuned_cell(public, Cell(VARIANTS["client_alone"], None, 0), PARAMS, data, tmp_path)
    assert shadow(public, suite, alone, prompts, PARAMS, public_code, tmp_path) == {}
    assert oracle(public, suite, alone, prompts, held) == {} and decipher(public, suite, alone, volume) == {}


def test_a_clean_residual_cell_keeps_its_gate_and_reads_the_public_table(world, tmp_path):
    _, public, data, prompts, evals = world
    cell = Cell(VARIANTS["noir+clean+noise1"], 64.0, 0)
    assert tune_config(cell, PARAMS).gate_lr == VARIANTS["noir+clean+noise1"].gate_lr > PARAMS.tune_lr
    tuned = tuned_cell(public, cell, PARAMS, data, tmp_path)
    path, perm = tuned.client.private_path, tuned.client.permutation
    gate = path.gate.detach().clone()
    assert (gate - 1).abs().max() > 0  # STuning moved the gate from its start at 1
    tokens = torch.arange(16)
    assert torch.equal(path.clean_embed[perm.to_private(tokens)], public.encoder.embed_tokens.weight[tokens])
    again = tuned_cell(public, cell, PARAMS, data, tmp_path)  # reloaded: the gate from the store, the table rebuilt
    assert torch.equal(again.client.private_path.gate, gate)
    assert torch.equal(again.client.private_path.clean_embed, path.clean_embed)
    sent = sent_prompts(public, tuned, prompts)
    with torch.no_grad():  # the cloud gets the INDVocab encoder's noised state, never anything of the clean table
        ids = tuned.client.private(prompts[:1])
        h = tuned.client.encoder(ids, torch.arange(ids.shape[1])[None])
        assert torch.equal(sent[0].hidden, path.send(h, path.noise_for(ids))[0].to(sent[0].hidden.dtype))
    assert utility(public, tuned, evals)["languages"]["python"]["tokens"] > 0


def test_a_forward_only_cell_records_no_gradient_and_gradient_labels_read_nothing(world, tmp_path):
    root, public, data, prompts, _ = world
    cell = Cell(VARIANTS["noir+clean+noise1+forward"], 64.0, 0)
    config = tune_config(cell, PARAMS)
    assert not config.cloud_backward and not config.gradient_noise.enabled
    tuned = tuned_cell(public, cell, PARAMS, data, tmp_path)
    assert tuned.training and all(seq.grad is None for seq in tuned.training)  # forwards only, recorded
    suite = AttackSuite.build(public, SuiteConfig(corpus=CorpusSample(root / "corpus", "train", ("python",), 32, 40),
                                                  probe=ProbeConfig(hidden=32, epochs=1)))
    scores = attacks(public, suite, tuned, prompts)
    assert "gradient" not in scores and "nearest" in scores  # (e) has nothing to read; (a)-(d) run as ever
    sent_back = tuned_cell(public, Cell(VARIANTS["noir+clean+noise1"], 64.0, 0), PARAMS, data, tmp_path)
    assert "gradient" in attacks(public, suite, sent_back, prompts)  # the same cell with its backward


def test_a_cloud_lora_cell_tunes_the_clouds_adapter_and_keeps_it(world, tmp_path):
    """The cloud's LoRA is trained by the client's STuning backward, stored with the cell, reloaded
    frozen, and the utility runs through the LoRA'd middle (not the public one); what is sent does
    not depend on it, and the product key records cloud_lora."""
    from umbra.privacy.mode import config_key, stuning_record

    _, public, data, _, evals = world
    cell = Cell(VARIANTS["noir+stuning+noise+cloudlora"], 64.0, 0)
    first = tuned_cell(public, cell, PARAMS, data, tmp_path)
    assert first.cloud is not None and first.cloud.steps == PARAMS.tune_steps
    trained = {k: v.clone() for k, v in first.cloud.adapter.state_dict().items()}
    assert any(k.endswith(".b") and v.abs().sum() > 0 for k, v in trained.items())  # B moved from zero
    again = tuned_cell(public, cell, PARAMS, data, tmp_path)
    assert all(torch.equal(trained[k], v) for k, v in again.cloud.adapter.state_dict().items())
    x = torch.randn(1, 16, public.spec.hidden_size, generator=torch.Generator().manual_seed(0))
    pos = torch.arange(16)[None]
    assert not torch.allclose(again.middle_blocks(public)(x, pos), public.middle(x, pos))  # the LoRA'd middle
    assert 0.0 <= utility(public, again, evals)["top1"] <= 100.0
    key = config_key(64.0, stuning_record(tune_config(cell, PARAMS), cloud_lora=True))
    assert "cloud_lora=true" in key


def test_only_the_base_model_is_seed_invariant_and_its_seeds_are_one_client(world, tmp_path):
    _, public, _, prompts, _ = world
    invariant = sorted(name for name, v in VARIANTS.items() if v.seed_invariant)
    assert invariant == ["base"]
    one, two = (tuned_cell(public, Cell(VARIANTS["base"], None, s), PARAMS, None, tmp_path) for s in (0, 5))
    a, b = _weights(one.client), _weights(two.client)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    sent = [sent_prompts(public, t, prompts) for t in (one, two)]
    assert all(torch.equal(x.hidden, y.hidden) for x, y in zip(*sent))



@pytest.mark.parametrize("variant", ["noir+clean+noise1", "noir+path+rank8+noise1", "noir+stuning+noise+penalty",
                                     "noir+stuning+noise+adversary"])
def test_a_cells_tuning_makes_no_tensor_off_the_clients_device(world, tmp_path, monkeypatch, variant):
    """tests/tuning/test_device_following.py's check on the frontier's STuning (private paths, the
    penalty's codebook, the adversary): the client, its secrets, its path and the codebook are built
    on the CPU by design (on an accelerator, `placed` then moves them); the tuning must make
    nothing without a device."""
    from device_check import factories_on_meta, on_cpu
    from umbra.attack_grid import frontier
    from umbra.tuning import adversary, private_path

    monkeypatch.setattr(frontier, "build_client", on_cpu(frontier.build_client))
    monkeypatch.setattr(frontier, "own_codebook", on_cpu(frontier.own_codebook))
    monkeypatch.setattr(private_path, "attach_private_path", on_cpu(private_path.attach_private_path))
    monkeypatch.setattr(adversary.InLoopAdversary, "__init__", on_cpu(adversary.InLoopAdversary.__init__))
    _, public, data, _, _ = world
    with factories_on_meta():
        tuned = tuned_cell(public, Cell(VARIANTS[variant], 64.0, 0), PARAMS, data, tmp_path)
    assert len(tuned.losses) == PARAMS.tune_steps

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA accelerator")


@needs_cuda
@pytest.mark.parametrize("variant", ["noir+stuning+noise", "noir+clean+noise1", "client_alone",
                                     "noir+stuning+noise+adversary"])
def test_on_cuda_a_cell_tunes_what_the_cpu_tunes_and_comes_back_to_the_cpu(world, tmp_path, variant):
    """Tuned on the accelerator: the same draws (noise, path noise, data order come from CPU
    generators), kernels apart; the client and the public middle are on the CPU afterwards and
    the measures run on them as on a CPU-tuned cell."""
    from umbra.model.device import resolve_device

    _, public, data, prompts, evals = world
    cell = Cell(VARIANTS[variant], None if not VARIANTS[variant].noir else 64.0, 0)
    cpu = tuned_cell(public, cell, PARAMS, data, tmp_path / "cpu")
    gpu = tuned_cell(public, cell, PARAMS, data, tmp_path / "gpu", resolve_device("cuda"))
    assert (cpu.tuned_on, gpu.tuned_on) == ("cpu", "cuda")
    assert all(t.device.type == "cpu" for t in (*public.middle.parameters(), *public.middle.buffers()))
    a, b = _weights(cpu.client), _weights(gpu.client)
    assert all(t.device.type == "cpu" for t in b.values())
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(gpu.losses, cpu.losses, rtol=1e-3)
    assert tuned_cell(public, cell, PARAMS, data, tmp_path / "gpu").tuned_on == "cuda"  # the store says so
    assert utility(public, gpu, evals)["languages"]["python"]["tokens"] > 0
