"""The cells of experiments/federation.py: organizations' trainers, a federation run under one Flower
strategy over LocalGrid, each organization's local and fused adapters, and the measurements
(utility on held-out code, canary leakage per route). Adapters are cached as .npz per settings, so a
resumed run retrains nothing it already has."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

from experiments.canary_measures import (candidate_sets, completions, greedy_by, greedy_completions, mean_exposure, scan,
                             scored_only, split_inference)
from experiments.federation_orgs import organizations
from umbra.engine import ClientModel
from umbra.evaluation.memorization import Trunk, inference_attack, perplexity, route_logits
from umbra.federation.adapter_arrays import adapter_to_arrays, arrays_to_adapter, initial_arrays
from umbra.federation.aggregate import ServerOptConfig
from umbra.federation.local_grid import LocalGrid
from umbra.federation.org_training import OrgTrainer, ScrubbedView, scrubbed_view
from umbra.federation.record import load_arrays, save_arrays
from umbra.federation.strategy import SecureFedNesterov, to_record
from umbra.middle.local import LocalMiddle
from umbra.model.adapters.selection import EMPTY, AdapterSet
from umbra.paths import default_model_dir
from umbra.scrub import Scrubber
from umbra.tuning.adapter_config import AdapterTrainConfig
from umbra.tuning.dual_adapters import train_lora, train_view_adapter
from umbra.tuning.fusion import FusionConfig, fit_fusion_weights, fuse_lora
from umbra.tuning.noesis_config import DPConfig
from umbra.tuning.securegate import OrgTrainConfig

STRATEGIES = ("FedAvg", "FedAdagrad", "FedAdam", "FedYogi", "FedAvgM", "SecureFedNesterov", "SecureFedNesterov-0.5")
# "SecureFedNesterov-0.5": server rate η = 0.5. At η = 1 (the default) eqs. 4-5 give Δw' = Δw̄ whatever m:
# Δv' = m(1-η)Δv + η(Δw̄ - Δw), Δw' = (1-η)Δw + ηΔw̄ + m(1-η)Δv, so the momentum only acts for η < 1
SERVER_ETA = 1e-2  # η of Flower's FedAdagrad/FedAdam/FedYogi (their default 0.1 moves every LoRA entry by
#                    ~0.1 in round 1, an order above the entries themselves); β1 0.9, β2 0.99, τ 1e-3 (defaults)
MOMENTUM = 0.5  # FedAvgM's server momentum and SecureFedNesterov's m (seed 003 App. A), both at η = 1


def make_strategy(name: str, initial: dict, n: int):
    from flwr.serverapp import strategy as fl

    common = dict(fraction_evaluate=0.0, min_train_nodes=n, min_available_nodes=n)
    if name.startswith("SecureFedNesterov"):
        eta = float(name.split("-")[1]) if "-" in name else 1.0
        return SecureFedNesterov(initial, ServerOptConfig(momentum=MOMENTUM, lr=eta), min_nodes=n, node_wait=1.0)
    if name == "FedAvg":
        return fl.FedAvg(**common)
    if name == "FedAvgM":
        return fl.FedAvgM(**common, server_learning_rate=1.0, server_momentum=MOMENTUM)
    opt = dict(eta=SERVER_ETA, tau=1e-3, beta_1=0.9, beta_2=0.99)
    if name == "FedAdagrad":
        opt.pop("beta_1"), opt.pop("beta_2")
    return getattr(fl, name)(**common, **opt)


def counts(r) -> dict:
    return {"correct": r.correct, "trials": r.trials}


def extracted(x) -> dict:
    return {"generated": x.generated, "true_found": x.true_found, "canaries": x.canaries}


class Bench:
    def __init__(self, args, cache: Path):
        self.args, self.cache = args, cache
        self.model = ClientModel.load(default_model_dir())
        self.middle_blocks = self.model.load_middle()
        self.middle = LocalMiddle(self.middle_blocks)
        self.trunk = Trunk(self.model.encoder, self.middle_blocks)
        self.config = AdapterTrainConfig(rank=args.rank, lr=args.lr, epochs=args.epochs, block_len=args.block_len,
                                         batch_size=args.batch_size, fim_rate=args.fim_rate, seed=args.seed)
        self.scrubber = Scrubber()
        self._trainers: dict = {}
        self._groups: dict = {}

    # -- training ----------------------------------------------------------------------------------
    def view(self, org, kind: str) -> ScrubbedView:
        files = [(d.path, d.text) for d in org.train]
        return ScrubbedView(tuple(t for _, t in files), {}) if kind == "raw" else scrubbed_view(files, self.scrubber)

    async def trainer(self, org, kind: str = "scrubbed", dp: DPConfig | None = None, rounds: int = 1) -> OrgTrainer:
        if dp is not None:  # stateful (its CSPRNG, steps taken): never shared
            return await OrgTrainer.create(self.model, self.middle, self.view(org, kind), self.config, dp, rounds)
        key = (org.project, org.train[0].path, kind)
        if key not in self._trainers:
            self._trainers[key] = await OrgTrainer.create(self.model, self.middle, self.view(org, kind), self.config)
        return self._trainers[key]

    def federate(self, strategy: str, trainers: list, rounds: int) -> tuple[dict, list]:
        from flwr.app import ConfigRecord

        initial = initial_arrays(self.model, self.config)
        grid = LocalGrid({101 + i: t for i, t in enumerate(trainers)})
        c = self.config
        train = ConfigRecord({"rank": c.rank, "lr": c.lr, "epochs": c.epochs, "block-len": c.block_len,
                              "batch-size": c.batch_size, "fim-rate": c.fim_rate, "seed": c.seed, "rounds": rounds})
        result = make_strategy(strategy, initial, len(trainers)).start(
            grid=grid, initial_arrays=to_record(initial), num_rounds=rounds, train_config=train)
        final = {k: a.numpy() for k, a in result.arrays.items()} if result.arrays is not None else initial
        if len(grid.reports) != rounds * len(trainers):
            raise RuntimeError(f"{strategy}: {len(grid.reports)} organization-rounds answered, "
                               f"expected {rounds * len(trainers)}")
        return final, grid.reports

    def _cached(self, name: str):
        path = self.cache / f"{name}.npz"
        return (arrays_to_adapter(load_arrays(path)[0], self.model, self.config, name.split("-")[0])
                if path.exists() else None), path

    async def local_secure(self, org, rounds: int, kind: str = "scrubbed", dp: DPConfig | None = None):
        """The organization alone: its secure adapter, T·K epochs from Δw^0 (under DP: T rounds of its
        own DP plan, each from the last)."""
        name = f"local-{kind}{'-dp' if dp else ''}-{org.project}-{rounds}"
        adapter, path = self._cached(name)
        if adapter is None:
            start = arrays_to_adapter(initial_arrays(self.model, self.config), self.model, self.config, "start")
            if dp is not None:  # its own CSPRNG stream, not the federated run's
                t = await self.trainer(org, kind, replace(dp, noise_seed=dp.noise_seed + 1000), rounds)
                arrays = adapter_to_arrays(start)
                for r in range(1, rounds + 1):
                    arrays, _, _ = t.round(arrays, r)
                adapter = arrays_to_adapter(arrays, self.model, self.config, "local")
            else:
                t = await self.trainer(org, kind)
                adapter, _, _ = train_lora(self.model, t.hidden, t.blocks, replace(self.config, epochs=rounds *
                                                                                   self.config.epochs), "local",
                                           start=start)
            save_arrays(path, adapter_to_arrays(adapter))
        return adapter

    async def revealing(self, org, rounds: int):
        name = f"revealing-{org.project}-{rounds}"
        adapter, path = self._cached(name)
        if adapter is None:
            config = replace(self.config, epochs=rounds * self.config.epochs)
            adapter, _ = await train_view_adapter(self.model, self.middle, [d.text for d in org.train], config,
                                                  "revealing")
            save_arrays(path, adapter_to_arrays(adapter))
        return adapter

    async def fused(self, global_, local, texts: list[str], name: str):
        fit = await fit_fusion_weights(self.model, self.middle, texts, global_, local, OrgTrainConfig().psi,
                                       FusionConfig(max_iters=self.args.fusion_iters))
        return fuse_lora(global_, local, *fit.weights, name=name), list(fit.weights)

    # -- measurements ------------------------------------------------------------------------------
    def utility(self, adapter, docs) -> dict:
        aset = EMPTY if adapter is None else AdapterSet([adapter])
        m = perplexity(route_logits(self.model.decoder, self.trunk, aset), self.model.tokenizer,
                       [d.text for d in docs])
        return {"loss": m.loss, "top1": m.top1, "tokens": m.tokens}

    def groups(self, org) -> dict[str, set[str]]:
        """The organization's canaries by what the scrubber does to them: "removed" (no occurrence left
        in the scrubbed training and query views) and "missed" (some occurrence left)."""
        key = (org.project, tuple(c.value for c in org.planted.canaries))  # the scaling cells' organizations
        if key not in self._groups:  # share names with the 3-organization cells', not their files or canaries
            files = [(d.path, d.text) for d in org.train + org.query]
            texts = scrubbed_view(files, self.scrubber).texts
            missed = {c.value for c in org.planted.canaries if any(c.value in t for t in texts)}
            self._groups[key] = {"removed": {c.value for c in org.planted.canaries} - missed, "missed": missed}
        return self._groups[key]

    async def leak(self, org, adapter, exposure: bool = False, extract: bool = False) -> dict:
        aset = AdapterSet([adapter])
        score = scored_only(self.model.tokenizer, self.model.decoder, self.trunk, aset,
                            max_context_tokens=self.args.context_tokens)
        groups, canaries = self.groups(org), org.planted.canaries
        sets = candidate_sets(org.planted, 50, self.args.seed)
        result = inference_attack(score, sets)
        kinds = {k: {c.value for c in canaries if c.kind == k} for k in org.planted.config.kinds}
        out = {"c50": counts(result), "c50_by": split_inference(result, sets, groups),
               "c50_kind": split_inference(result, sets, kinds)}
        if exposure:
            out["exposure"], out["max_exposure"] = mean_exposure(score, org.planted, self.args.exposure_sample,
                                                                 self.args.seed)
        if extract:
            texts = await completions(self.model, self.middle_blocks, org.planted, aset, self.args.samples,
                                      self.args.seed)
            out["extraction"] = extracted(scan(texts, canaries, org.planted.config.org))
            out["extraction_by"] = {g: extracted(scan(texts, [c for c in canaries if c.value in vs],
                                                      org.planted.config.org)) for g, vs in groups.items() if vs}
            greedy = await greedy_completions(self.model, self.middle_blocks, canaries, aset)
            out["greedy"] = greedy_by(greedy, canaries, groups)
        return out

    def residue(self, org) -> dict[str, list[int]]:
        """{kind: [occurrences the scrubber left in the scrubbed training view, occurrences planted]}."""
        view = self.view(org, "scrubbed")
        out = {k: [0, 0] for k in org.planted.config.kinds}
        for c in org.planted.canaries:
            out[c.kind][0] += sum(t.count(c.value) for t in view.texts)
            out[c.kind][1] += sum(d.text.count(c.value) for d in org.train)
        return out

    # -- cells ---------------------------------------------------------------------------------------
    async def run(self, cell: str) -> dict:
        kind, arg = cell.split(":")
        a = self.args
        if kind == "f5":
            return await self.scale(int(arg))
        orgs = organizations(3, a.spec, a.seed)
        dp = None
        if arg == "dp":
            dp = DPConfig(epsilon=a.dp_epsilon, delta=a.dp_delta, clip_norm=a.dp_clip, expected_batch=a.dp_batch,
                          noise_seed=a.seed)
        view = "raw" if arg == "raw" else "scrubbed"
        strategy = "SecureFedNesterov" if kind == "f2" else arg
        trainers = [await self.trainer(o, view, dp and replace(dp, noise_seed=a.seed * 100 + i), a.rounds)
                    for i, o in enumerate(orgs)]
        global_arrays, reports = self.federate(strategy, trainers, a.rounds)
        save_arrays(self.cache / f"global-{cell.replace(':', '-')}.npz", global_arrays)
        global_ = arrays_to_adapter(global_arrays, self.model, self.config, "global")
        detail = strategy == "SecureFedNesterov"
        out = {"strategy": strategy, "view": view, "orgs": [o.name for o in orgs], "per_org": {}}
        if dp is not None:
            out["privacy"] = [t.privacy() for t in trainers]
        revealing = {o.name: await self.revealing(o, a.rounds) for o in orgs}
        routes = {}
        for o in orgs:
            local = (revealing[o.name] if view == "raw"  # on the raw view: the revealing adapter's training
                     else await self.local_secure(o, a.rounds, view, dp))
            query_scrubbed = [t for t in scrubbed_view([(d.path, d.text) for d in o.query], self.scrubber).texts]
            secure, alpha = await self.fused(global_, local, [d.text for d in o.query] if view == "raw"
                                             else query_scrubbed, "secure")
            right, beta = await self.fused(global_, revealing[o.name], [d.text for d in o.query], "revealing")
            routes[o.name] = (right, secure, local, alpha, beta)
        for o in orgs:
            right, secure, local, alpha, beta = routes[o.name]
            others = [d for m in orgs if m.name != o.name for d in m.heldout]
            out["per_org"][o.name] = {
                "alpha": alpha, "beta": beta, "residue": self.residue(o), "canaries": len(o.planted.canaries),
                "groups": {g: sorted({c.kind for c in o.planted.canaries if c.value in vs})
                           for g, vs in self.groups(o).items()},
                "utility": {"base": self.utility(None, o.heldout), "global": self.utility(global_, o.heldout),
                            "local": self.utility(local, o.heldout), "secure_route": self.utility(secure, o.heldout),
                            "right_route": self.utility(right, o.heldout), "base_others": self.utility(None, others),
                            "global_others": self.utility(global_, others), "local_others": self.utility(local, others)},
                "leak": {"right": await self.leak(o, right, exposure=detail, extract=detail),
                         "secure": await self.leak(o, secure, exposure=detail, extract=detail),
                         "global": await self.leak(o, global_, extract=detail)},
            }
            if detail:  # the other organizations' keys, on this organization's canaries
                out["per_org"][o.name]["leak"]["other_keys"] = [await self.leak(o, routes[m.name][0])
                                                                for m in orgs if m.name != o.name]
        return out

    async def scale(self, n: int) -> dict:
        a = self.args
        orgs = organizations(n, a.scale_spec, a.seed)
        trainers = [await self.trainer(o) for o in orgs]
        global_arrays, _ = self.federate("SecureFedNesterov", trainers, a.scale_rounds)
        global_ = arrays_to_adapter(global_arrays, self.model, self.config, "global")
        locals_ = {o.name: await self.local_secure(o, a.scale_rounds) for o in orgs}
        out = {"orgs": [o.name for o in orgs], "per_org": {}}
        own = {o.name: {"global": self.utility(global_, o.heldout)} for o in orgs}
        for o in orgs:
            own[o.name]["local"] = {m.name: self.utility(locals_[o.name], m.heldout) for m in orgs}
        for i, o in enumerate(orgs):
            row = {"global_own": own[o.name]["global"], "local_own": own[o.name]["local"][o.name],
                   "global_others": pool([own[m.name]["global"] for m in orgs if m.name != o.name]),
                   "local_others": pool([v for m, v in own[o.name]["local"].items() if m != o.name]),
                   "leak": {"global": await self.leak(o, global_)}}
            if i < 3:  # the tracked organizations: their keys' routes
                q = [d.text for d in o.query]
                qs = list(scrubbed_view([(d.path, d.text) for d in o.query], self.scrubber).texts)
                secure, _ = await self.fused(global_, locals_[o.name], qs, "secure")
                right, _ = await self.fused(global_, await self.revealing(o, a.scale_rounds), q, "revealing")
                row["leak"].update(right=await self.leak(o, right), secure=await self.leak(o, secure))
            out["per_org"][o.name] = row
        return out


def pool(ms: list[dict]) -> dict:
    """Token-weighted mean of several utility measurements."""
    tokens = sum(m["tokens"] for m in ms)
    loss = sum(m["loss"] * m["tokens"] for m in ms) / tokens
    return {"loss": loss, "top1": sum(m["top1"] * m["tokens"] for m in ms) / tokens, "tokens": tokens,
            "ppl": math.exp(loss)}

