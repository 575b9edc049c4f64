"""GET /healthz (no auth), GET /v1/info and GET /v1/debug/loaded (auth; debug_routes only)."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from server.deps import CloudState, client_name, get_state
from umbra.errors import SessionError
from umbra.wire import VERSION

router = APIRouter()


@router.get("/healthz")
async def healthz() -> dict:
    return {"status": "ok", "protocol": VERSION}


@router.get("/v1/info")
async def info(client: str = Depends(client_name), state: CloudState = Depends(get_state)) -> dict:
    return {
        "protocol": VERSION,
        "client": client,
        "hidden_size": state.runtime.hidden_size,
        "dtype": str(state.runtime.dtype).removeprefix("torch."),
        "layers": list(state.layers),
        "max_seq_len": state.runtime.max_seq_len,
        "max_frame_bytes": state.settings.max_frame_bytes,
        "max_sessions_per_client": state.settings.max_sessions_per_client,
        "lora": state.manager.lora is not None,
        "open_in_frame": True,  # POST /v1/sessions/forward: open a session with its first frame
    }


@router.get("/v1/debug/loaded")
async def loaded(client: str = Depends(client_name), state: CloudState = Depends(get_state)) -> dict:
    """What this process holds: checkpoint keys read and the module's state-dict keys."""
    if not state.settings.debug_routes:
        raise SessionError("not found")  # 404, as if the route did not exist
    return {
        "layers": list(state.layers),
        "read_keys": list(state.read_keys),
        "state_dict": list(state.runtime.blocks.state_dict().keys()),
    }
