"""The cloud service: `create_app()` wires settings, auth, the middle blocks and the routers.

The lifespan loads only the middle blocks (their checkpoint tensors and nothing else) on the
compute worker, builds the session manager and starts the idle-session sweeper."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from fastapi import FastAPI
from starlette.requests import ClientDisconnect

from server.aborts import ClientAborts
from server.auth import TokenStore
from server.deps import CloudState
from umbra.middle.lora_store import LoraStore
from server.errors import install_handlers
from server.metrics import Metrics
from server.routes import health, lora, metrics, sessions, stream
from server.edge import BodyGuard
from server.scheduler import Scheduler
from server.sessions import Limits, SessionManager
from server.worker import ComputeWorker
from server.settings import CloudSettings, get_settings
from umbra.middle.runtime import MiddleRuntime
from umbra.model.batch_decode import check_slab_shape, slab_floor, slab_widths, solo_widths
from server.preflight import preflight
from umbra.model.loader import load_part
from umbra.model.memory_plan import plan_memory
from umbra.edge import EDGE_EXTENSION
from umbra.errors import UmbraError

log = logging.getLogger("umbra.cloud")


def _load(settings: CloudSettings):
    """(blocks, checkpoint, memory plan) of the middle part, on the device and in the dtype asked
    for (checked first: server/preflight.py); runs on the compute worker."""
    pre = preflight(settings)
    blocks = load_part(settings.model_dir, "middle", pre.plan, pre.dtype, pre.spec, pre.checkpoint, pre.device)
    max_seq_len = settings.max_seq_len or pre.spec.max_position_embeddings
    memory = plan_memory(pre.spec, pre.middle_layers, pre.dtype, pre.device, max_seq_len,
                         fraction=settings.kv_memory_fraction, budget_bytes=settings.kv_budget_bytes,
                         max_width=settings.decode_width, min_width=settings.decode_min_width or 16)
    return blocks, pre.checkpoint, memory


async def _sweep(state: CloudState) -> None:
    while True:
        await asyncio.sleep(state.settings.sweep_interval_seconds)
        await state.worker.run(state.manager.expire_idle)
        await close_revoked_streams(state)


async def close_revoked_streams(state: CloudState) -> None:
    """Close every open stream whose token no longer authenticates (revoked): 4401."""
    for websocket, authorization in list(state.streams.items()):
        try:
            state.tokens.authenticate(authorization)
        except UmbraError:
            state.streams.pop(websocket, None)
            with contextlib.suppress(Exception):
                await websocket.close(4401, "token revoked")


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI):
    settings = _settings_of(app).check()
    worker = ComputeWorker(settings.torch_threads)
    metrics: Metrics = app.state.metrics
    try:
        blocks, ckpt, memory = await worker.run(_load, settings)
        runtime = MiddleRuntime(blocks, settings.max_seq_len)
        worker.use(runtime.transfer)  # each job one step: on CUDA its own stream (umbra/model/transfer.py)
        floor, smallest = slab_floor(memory.device, settings.decode_min_width)  # the CPU: the narrowest that agrees
        tried = slab_widths(floor, memory.decode_width)
        shape = await worker.run(check_slab_shape, blocks.stack, tried, runtime.dtype, smallest=smallest)
        wider = tried[tried.index(shape.widths[0]):]
        if list(shape.widths) != wider:
            log.warning("decode slab widths %s give rows other bits than width %d on this machine: not used",
                        sorted(set(wider) - set(shape.widths)), shape.widths[0])
        if not shape.group_slots:
            log.warning("gathered decode attention does not give the in-place bits on this machine: "
                        "every session attends in place")
        widths = solo_widths(shape.widths, bool(settings.decode_solo))
        limits = Limits(settings.max_sessions_per_client, settings.session_idle_seconds, memory.kv_budget_bytes,
                        settings.client_quota(memory.kv_budget_bytes), settings.max_batch_rows, widths,
                        shape.group_slots)
        manager = SessionManager(runtime, limits, metrics, LoraStore(blocks) if settings.lora else None)
        state = CloudState(settings, runtime, manager, worker, TokenStore(settings.token_file), metrics,
                           (blocks.stack.first, blocks.stack.last), list(ckpt.read_keys),
                           Scheduler(worker, manager, metrics, settings.max_frame_bytes,
                                     settings.prefill_chunk_tokens, settings.decode_gather_ms / 1e3), {})
        metrics.gauges.update({
            "umbra_cloud_sessions_active": lambda: len(manager.owners),
            "umbra_cloud_kv_bytes": lambda: manager.kv_bytes,
            "umbra_cloud_kv_budget_bytes": lambda: limits.kv_budget_bytes,
            "umbra_cloud_decode_pending": lambda: state.scheduler.pending_decodes,
            "umbra_cloud_device_free_bytes": lambda: memory.free_bytes,
            "umbra_cloud_kv_positions_budget": lambda: memory.positions,
            "umbra_cloud_kv_sessions_full_context": lambda: memory.sessions_at_full_context,
            "umbra_cloud_decode_width": lambda: shape.widths[-1],
            "umbra_cloud_decode_solo": lambda: int(widths[0] == 1),
        })
        app.state.cloud = state
        log.warning("middle blocks [%d, %d) loaded from %s; hidden size %d; %s on %s",
                    *state.layers, settings.model_dir, runtime.hidden_size,
                    str(runtime.dtype).removeprefix("torch."), memory.device)
        log.warning("%s", memory.describe())
        log.warning("decode slab widths %s%s", list(widths),
                    " (a lone step unpadded)" if widths[0] == 1 and len(widths) > 1 else "")
        sweeper = asyncio.create_task(_sweep(state))
    except BaseException:
        worker.shutdown()
        raise
    try:
        yield
    finally:
        sweeper.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sweeper
        worker.shutdown()


class LatencyMiddleware:
    """Per-route latency histogram and error counter for HTTP requests (pure ASGI), outermost.

    A request the client abandoned (a disconnect mid-body: starlette's ClientDisconnect, or no
    response at all because the connection went, or a response the edge saw go to a connection
    the client had already left) is a client abort (server/aborts.py) — its own counter, one log
    line with the route template and a reason, never a 500 or a traceback."""

    def __init__(self, app, metrics: Metrics, aborts: ClientAborts):
        self.app, self.metrics, self.aborts = app, metrics, aborts

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        t0, status = time.perf_counter(), None

        async def send_status(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        aborted = False
        try:
            await self.app(scope, receive, send_status)
            aborted = status is None or scope.get("extensions", {}).get(EDGE_EXTENSION, {}).get("gone", False)
        except ClientDisconnect:
            aborted = True
        except BaseException:
            status = status or 500
            raise
        finally:
            path = getattr(scope.get("route"), "path", "unmatched")
            route = f"{scope['method']} {path}"
            self.metrics.observe(time.perf_counter() - t0, route=route)
            if aborted:
                reason = scope.get("extensions", {}).get(EDGE_EXTENSION, {}).get("reason", "disconnect")
                self.aborts.count(route, reason)
            elif status is not None and status >= 400:
                self.metrics.inc("umbra_cloud_errors_total", status=str(status))


def _settings_of(app: FastAPI) -> CloudSettings:
    """The settings `create_app` was given, else the environment's."""
    return app.state.given_settings or get_settings()


def create_app(settings: CloudSettings | None = None) -> FastAPI:
    """The ASGI app; `settings` overrides the environment (UMBRA_CLOUD_*) when given."""
    app = FastAPI(title="Umbra cloud", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.given_settings = settings
    if settings is not None:
        async def given() -> CloudSettings:  # a coroutine: no thread hop per request (server/deps.py)
            return settings

        app.dependency_overrides[get_settings] = given
    app.state.metrics = Metrics()
    app.state.aborts = ClientAborts(app.state.metrics)  # also counted by the stream route
    install_handlers(app)
    for module in (health, sessions, stream, metrics, lora):
        app.include_router(module.router)
    app.add_middleware(BodyGuard, limits=lambda: _settings_of(app).edge_limits())
    app.add_middleware(LatencyMiddleware, metrics=app.state.metrics, aborts=app.state.aborts)  # outermost: BodyGuard's refusals count too
    return app
