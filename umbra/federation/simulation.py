"""Flower's simulation engine (Ray) for a federation of many organizations on one machine: the
same ServerApp and ClientApp work as `umbra federation serve|join` (server_app.run_federation,
client_app.train / keep_final), run by `flwr.simulation.run_simulation`, each organization a
virtual SuperNode whose ClientApp runs in one of Ray's actors.

    simulate(RunSettings(model=..., rounds=3, min_nodes=30, record_dir=..., out=...),
             [{"data": "orgs/acme", "model": ..., "threads": 1}, ...], cpus=2)

The simulation engine gives a virtual node only `partition-id` and `num-partitions` as its node
config, and the ServerApp an empty run config; here the node config of the organization at that
partition and the run's settings stand in for them, as `join --node-config` and `flwr run
--run-config` give them in a deployment. The node's context (its DP plan's progress,
client_app.DP_STATE) is the engine's, kept per node across rounds as a SuperNode keeps it.
Needs the `federation` extra with Ray (`flwr[simulation]`, .venv-federation)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from flwr.app import Context, Message
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from umbra.errors import ConfigError
from umbra.federation import client_app as deployed
from umbra.federation.deploy import RunSettings
from umbra.federation.server_app import run_federation

PARTITION = "partition-id"  # the simulation engine's node config: which virtual node this is


def _as_organization(context: Context, organizations: Sequence[Mapping]) -> Context:
    """The context with the node config of the organization at the node's partition (same state)."""
    try:
        org = organizations[int(context.node_config[PARTITION])]
    except (KeyError, IndexError, ValueError) as exc:
        raise ConfigError(f"a simulated node with no organization ({exc})") from None
    return Context(run_id=context.run_id, node_id=context.node_id, node_config=dict(org), state=context.state,
                   run_config=context.run_config)


def simulation_apps(settings: RunSettings, organizations: Sequence[Mapping]) -> tuple[ServerApp, ClientApp]:
    """The ServerApp with `settings` as its run config, the ClientApp with each organization's node config."""
    orgs = [dict(o) for o in organizations]
    run_config = settings.validate().run_config()
    server, client = ServerApp(), ClientApp()

    @server.main()
    def _main(grid: Grid, context: Context) -> None:
        run_federation(grid, run_config)

    @client.train()
    def _train(msg: Message, context: Context) -> Message:
        return deployed.train(msg, _as_organization(context, orgs))

    @client.query()
    def _query(msg: Message, context: Context) -> Message:
        return deployed.keep_final(msg, _as_organization(context, orgs))

    return server, client


def simulate(settings: RunSettings, organizations: Sequence[Mapping], *, cpus: int = 2,
             cpus_per_org: float = 1.0) -> None:
    """Run the federation on Flower's simulation engine: one virtual SuperNode per organization,
    Ray actors of `cpus_per_org` CPUs each within `cpus`. The results are where `settings` says
    (`out`, `record_dir`) and at each organization's `global-out`."""
    if not organizations:
        raise ConfigError("a simulated federation needs at least one organization")
    if settings.min_nodes > len(organizations):
        raise ConfigError(f"min_nodes {settings.min_nodes} > the {len(organizations)} organizations simulated")
    if not (0 < cpus_per_org <= cpus):
        raise ConfigError(f"cpus_per_org must be in (0, cpus={cpus}], got {cpus_per_org}")
    from flwr.simulation import run_simulation

    server, client = simulation_apps(settings, organizations)
    run_simulation(server_app=server, client_app=client, num_supernodes=len(organizations),
                   backend_config={"client_resources": {"num_cpus": cpus_per_org, "num_gpus": 0.0},
                                   "init_args": {"num_cpus": cpus, "num_gpus": 0}})
