"""Run the cloud service under uvicorn: `umbra cloud serve` and `python -m server` share this.

The listening socket is bound here (port 0 picks a free port) so the real address can be
written to `--ready-file` before serving; `server.launch` waits on that file, then /healthz."""

from __future__ import annotations

import argparse
import json
import os
import socket
import threading
import time
from pathlib import Path

from server.settings import CloudSettings
from umbra.listen import listen_socket

# flag -> settings field (None values are left to the environment / defaults)
_FLAGS = {
    "model_dir": "model_dir", "encoder_blocks": "encoder_blocks", "decoder_blocks": "decoder_blocks",
    "dtype": "dtype", "device": "device", "kv_memory_fraction": "kv_memory_fraction", "host": "host", "port": "port", "token_file": "token_file",
    "tls_cert": "tls_cert", "tls_key": "tls_key", "max_seq_len": "max_seq_len",
    "max_frame_bytes": "max_frame_bytes", "max_sessions_per_client": "max_sessions_per_client",
    "session_idle_seconds": "session_idle_seconds", "kv_budget_bytes": "kv_budget_bytes",
    "torch_threads": "torch_threads", "lora": "lora", "kv_client_quota_bytes": "kv_client_quota_bytes",
    "max_batch_rows": "max_batch_rows", "decode_width": "decode_width", "decode_min_width": "decode_min_width",
    "decode_solo": "decode_solo",
    "decode_gather_ms": "decode_gather_ms",
    "prefill_chunk_tokens": "prefill_chunk_tokens", "max_connections_per_address": "max_connections_per_address",
    "trusted_proxy": "trusted_proxies", "unauthenticated_timeout_seconds": "unauthenticated_timeout_seconds",
    "max_unauthenticated_per_address": "max_unauthenticated_per_address",
}


def add_serve_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model-dir", type=Path, help="model directory (env UMBRA_CLOUD_MODEL_DIR)")
    p.add_argument("--encoder-blocks", type=int, help="split E (default: SplitPlan.default)")
    p.add_argument("--decoder-blocks", type=int, help="split D (default: SplitPlan.default)")
    p.add_argument("--dtype", choices=["bf16", "fp16", "fp32", "bfloat16", "float16", "float32"],
                   help="compute dtype of the middle blocks (default fp32); the wire keeps the client's dtype")
    p.add_argument("--device", metavar="DEVICE",
                   help="where the middle blocks, KV caches and decode slabs run: auto (a CUDA accelerator when "
                        "there is one), cpu, cuda or cuda:N (default auto; no such device: an error at start)")
    p.add_argument("--host", help="bind address (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (default 8443; 0 = any free port)")
    p.add_argument("--token-file", type=Path, help="token file (default ~/.config/umbra/cloud-tokens.json)")
    p.add_argument("--tls-cert", type=Path, help="PEM certificate (with --tls-key: HTTPS/WSS)")
    p.add_argument("--tls-key", type=Path, help="PEM private key")
    p.add_argument("--max-seq-len", type=int)
    p.add_argument("--max-frame-bytes", type=int)
    p.add_argument("--max-sessions-per-client", type=int)
    p.add_argument("--session-idle-seconds", type=float)
    p.add_argument("--kv-budget-bytes", type=int,
                   help="all sessions' KV memory (default: --kv-memory-fraction of the device's free memory)")
    p.add_argument("--kv-memory-fraction", type=float, help="share of free memory the computed KV budget takes (0.5)")
    p.add_argument("--kv-client-quota-bytes", type=int, help="one client's KV memory (default: budget / 4)")
    p.add_argument("--max-batch-rows", type=int, help="rows (B) of one frame")
    p.add_argument("--decode-width", type=int, help="most rows of one batched decode slab")
    p.add_argument("--decode-min-width", type=int, help="fewest rows of one batched decode slab (padded up to it; "
                   "default: on the CPU the narrowest whose bits every wider slab shares, found at start; 16 on an accelerator)")
    p.add_argument("--decode-solo", action=argparse.BooleanOptionalAction, default=None,
                   help="a lone decode step runs unpadded at width 1 (its bits a one-row slab's, within the "
                        "dtype's tolerance of a batched step's); default: no")
    p.add_argument("--decode-gather-ms", type=float,
                   help="longest wait of a decode step for sessions due back to share its slab (0: never)")
    p.add_argument("--prefill-chunk-tokens", type=int, help="batch x positions per prefill chunk")
    p.add_argument("--max-connections-per-address", type=int, help="open connections per client IP")
    p.add_argument("--max-unauthenticated-per-address", type=int,
                   help="connection slots per address that no valid token has proven yet (the oldest makes way)")
    p.add_argument("--unauthenticated-timeout-seconds", type=float,
                   help="deadline of a whole request on a connection no token has proven yet")
    p.add_argument("--trusted-proxy", action="append", metavar="ADDRESS",
                   help="a reverse proxy (address or network) whose X-Forwarded-For names the client; repeatable")
    p.add_argument("--torch-threads", type=int)
    p.add_argument("--lora", action="store_true", default=None,
                   help="let each client train its own LoRA on the middle blocks (env UMBRA_CLOUD_LORA)")
    p.add_argument("--ready-file", type=Path, help="write {host, port, scheme} here once listening")
    p.add_argument("--exit-with-parent", type=int, metavar="PID",
                   help="shut down when process PID (the launcher) is no longer this process's parent")


def settings_from_args(args: argparse.Namespace) -> CloudSettings:
    overrides = {field: getattr(args, flag) for flag, field in _FLAGS.items() if getattr(args, flag, None) is not None}
    return CloudSettings(**overrides).check()


def uvicorn_config(settings: CloudSettings):
    """The uvicorn configuration of the service (also used by tests that serve it in a thread)."""
    import uvicorn

    from server.app import create_app
    from server.edge import edge_protocol

    return uvicorn.Config(
        create_app(settings),
        http=edge_protocol(settings.edge_limits()),  # header deadline, connections per address
        h11_max_incomplete_event_size=settings.max_header_bytes,
        timeout_keep_alive=5,
        proxy_headers=bool(settings.trusted_proxies),  # forwarded headers only from the explicit allow-list
        forwarded_allow_ips=list(settings.trusted_proxies) or [],
        ssl_certfile=str(settings.tls_cert) if settings.tls_cert else None,
        ssl_keyfile=str(settings.tls_key) if settings.tls_key else None,
        ws_max_size=settings.max_frame_bytes + 1024,  # oversize stream messages: close 1009
        ws_per_message_deflate=False,  # hidden states do not compress; save the CPU
        log_level="warning",
        access_log=False,  # URLs carry session ids only, but keep the logs lean
        lifespan="on",
    )


def bind(settings: CloudSettings) -> socket.socket:
    return listen_socket(settings.host, settings.port, inheritable=True)


def exit_with_parent(server, parent_pid: int, interval: float = 1.0) -> threading.Thread:
    """A daemon thread that asks `server` to shut down once `parent_pid` is no longer our parent
    (it died, even by SIGKILL, and we were re-parented), so a self-started cloud never outlives
    the client that started it."""
    def watch() -> None:
        while not server.should_exit:
            if os.getppid() != parent_pid:
                server.should_exit = True
                return
            time.sleep(interval)

    thread = threading.Thread(target=watch, name="exit-with-parent", daemon=True)
    thread.start()
    return thread


def run(settings: CloudSettings, ready_file: Path | None = None, parent_pid: int | None = None) -> int:
    import uvicorn

    from server.preflight import preflight

    preflight(settings)  # fail fast, in one line, before the port is bound: no client is ever accepted
    sock = bind(settings)
    host, port = sock.getsockname()[:2]
    scheme = "https" if settings.tls_cert else "http"
    server = uvicorn.Server(uvicorn_config(settings))
    if ready_file is not None:
        tmp = ready_file.with_name(ready_file.name + ".tmp")
        tmp.write_text(json.dumps({"host": host, "port": port, "scheme": scheme, "pid": os.getpid()}))
        os.replace(tmp, ready_file)
    if parent_pid is not None:
        exit_with_parent(server, parent_pid)
    server.run(sockets=[sock])
    return 0 if server.started else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m server", description="Umbra cloud service (middle blocks).")
    add_serve_args(parser)
    args = parser.parse_args(argv)
    return run(settings_from_args(args), args.ready_file, args.exit_with_parent)
