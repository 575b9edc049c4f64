"""Cloud service settings: environment variables prefixed UMBRA_CLOUD_ (e.g. UMBRA_CLOUD_MODEL_DIR),
overridable by `umbra cloud serve` flags. Handlers read them through the `get_settings` dependency."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from umbra.errors import ConfigError


def default_token_file() -> Path:
    return Path.home() / ".config" / "umbra" / "cloud-tokens.json"


class CloudSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="UMBRA_CLOUD_", extra="ignore", protected_namespaces=())

    model_dir: Path | None = None  # Hugging Face model directory; only the middle blocks are read
    encoder_blocks: int | None = None  # split E (None: SplitPlan.default)
    decoder_blocks: int | None = None  # split D (None: SplitPlan.default)
    dtype: str = "float32"  # compute dtype of the middle blocks: fp32 | fp16 | bf16 (or float32 | float16 |
    # bfloat16); the wire keeps the client's dtype (frames are cast at the edge)
    device: str = "auto"  # where the middle blocks, KV caches and decode slabs run: auto | cpu | cuda | cuda:N
    host: str = "127.0.0.1"
    port: int = 8443
    token_file: Path = Field(default_factory=default_token_file)  # salted hashes, see server/auth.py
    tls_cert: Path | None = None  # PEM certificate; with tls_key, serve HTTPS/WSS
    tls_key: Path | None = None
    max_seq_len: int | None = None  # per session; None: the model's max_position_embeddings
    max_frame_bytes: int = 64 * 1024 * 1024  # largest accepted frame (HTTP body or WS message)
    max_sessions_per_client: int = 64  # open sessions per token name
    session_idle_seconds: float = 900.0  # sessions unused this long are expired (client re-prefills)
    sweep_interval_seconds: float = 5.0  # how often idle sessions are looked for
    kv_budget_bytes: int | None = None  # all sessions' KV caches together; checked before allocating
    # (None: kv_memory_fraction of the device's free memory once the blocks are loaded; umbra/model/memory_plan.py)
    kv_memory_fraction: float = 0.5  # share of the free memory the computed KV budget takes
    kv_client_quota_bytes: int | None = None  # one client's sessions (None: a quarter of the budget);
    # over it the client's own LRU sessions are evicted, never another client's
    max_batch_rows: int = 64  # rows (B) of one frame (413 over it)
    decode_width: int = 64  # most rows of one batched decode slab (continuous batching, server/scheduler.py)
    decode_min_width: int | None = None  # fewest: a slab takes the smallest of this, doubled up to decode_width,
    # that holds its rows; at start each wider width is kept only if its rows match this one's bit for bit
    # on this machine (umbra/model/batch_decode.py). None: on the CPU the narrowest width (from 1 row up) whose
    # bits every wider one shares, so a lone step costs as few padding rows as the kernels allow and gets
    # the bits it would get beside other sessions; on an accelerator 16 (padding is free there)
    decode_solo: bool | None = None  # a lone step (one row in its slab) runs unpadded, at width 1: no padding
    # rows to pay for, but its bits those of a one-row slab (within the dtype's tolerance of a batched step's,
    # so greedy output could depend on whether the session was alone). None: no (since the CPU floor above
    # is the narrowest that agrees, a lone step rarely pays for padding)
    decode_gather_ms: float = 20.0  # a decode step waits at most this free worker time for sessions due back (by their
    # last gap) to send theirs, so they share one slab (0: never wait; server/scheduler.py)
    prefill_chunk_tokens: int = 256  # batch x positions per prefill chunk; decode steps run between chunks
    max_json_bytes: int = 64 * 1024  # body of the JSON routes (413 over it, before auth)
    max_header_bytes: int = 16 * 1024  # request line + headers (h11_max_incomplete_event_size)
    header_timeout_seconds: float = 10.0  # request headers must be complete within this (408)
    body_timeout_seconds: float = 30.0  # a whole request (headers + body) on an authenticated connection (408, close)
    unauthenticated_timeout_seconds: float = 5.0  # a whole request on a connection no valid token has proven yet
    max_unauthenticated_per_address: int = 32  # connection slots unproven connections may hold (oldest displaced)
    trusted_proxies: list[str] = []  # proxy addresses / networks whose X-Forwarded-For names the client
    # (--trusted-proxy, repeatable; empty: forwarded headers are ignored from everyone)
    ws_idle_seconds: float = 300.0  # a stream with no message this long is closed (1001)
    max_connections_per_address: int = 128  # open connections per client IP (429 over it)
    torch_threads: int | None = None  # intra-op threads of the compute worker (None: torch default)
    debug_routes: bool = False  # expose GET /v1/debug/loaded (loaded tensor names; tests, audits)
    lora: bool = False  # let each client train its own LoRA on the middle (umbra/middle/lora_store.py, /v1/lora)

    def client_quota(self, budget: int) -> int:
        """One client's KV quota under the service's budget `budget` (explicit or computed)."""
        return self.kv_client_quota_bytes or max(1, budget // 4)

    @property
    def torch_dtype(self):
        from umbra.model.device import resolve_dtype

        return resolve_dtype(self.dtype)

    def edge_limits(self):
        from server.edge import EdgeLimits

        return EdgeLimits(self.max_frame_bytes, self.max_json_bytes, self.header_timeout_seconds,
                          self.body_timeout_seconds, self.max_connections_per_address, self.max_header_bytes,
                          self.unauthenticated_timeout_seconds, self.max_unauthenticated_per_address,
                          tuple(self.trusted_proxies))

    def plan_args(self) -> tuple[int, int] | None:
        if self.encoder_blocks is None and self.decoder_blocks is None:
            return None
        if self.encoder_blocks is None or self.decoder_blocks is None:
            raise ConfigError("set both encoder_blocks and decoder_blocks, or neither")
        return self.encoder_blocks, self.decoder_blocks

    def check(self) -> "CloudSettings":
        if self.model_dir is None:
            raise ConfigError("no model directory (UMBRA_CLOUD_MODEL_DIR or --model-dir)")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ConfigError("TLS needs both a certificate and a key")
        from umbra.model.device import CHOICES, DTYPES

        if self.dtype not in DTYPES:
            raise ConfigError(f"dtype must be bf16, fp16 or fp32, got {self.dtype!r}")
        if self.device not in CHOICES and not self.device.startswith("cuda:"):
            raise ConfigError(f"device must be one of {', '.join(CHOICES)} or cuda:N, got {self.device!r}")
        if not 0 < self.kv_memory_fraction <= 1:
            raise ConfigError("kv_memory_fraction must lie in (0, 1]")
        if self.kv_budget_bytes is not None and self.kv_budget_bytes < 1:
            raise ConfigError("kv_budget_bytes must be >= 1")
        for name in ("max_frame_bytes", "max_sessions_per_client", "max_batch_rows",
                     "decode_width", "decode_min_width", "prefill_chunk_tokens", "max_json_bytes", "max_header_bytes",
                     "max_connections_per_address", "max_unauthenticated_per_address"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1")
        from umbra.edge_slots import TrustedProxies

        try:
            TrustedProxies(self.trusted_proxies)
        except ValueError as exc:
            raise ConfigError(f"trusted_proxies: {exc}") from None
        if self.decode_gather_ms < 0:
            raise ConfigError("decode_gather_ms must be >= 0")
        if self.kv_client_quota_bytes is not None and self.kv_client_quota_bytes < 1:
            raise ConfigError("kv_client_quota_bytes must be >= 1")
        for name in ("session_idle_seconds", "sweep_interval_seconds", "header_timeout_seconds",
                     "body_timeout_seconds", "ws_idle_seconds", "unauthenticated_timeout_seconds"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be > 0")
        return self


@lru_cache(maxsize=1)
def get_settings() -> CloudSettings:
    """FastAPI dependency; `create_app(settings)` overrides it with the given settings."""
    return CloudSettings().check()
