"""The caller's own LoRA adapter on the middle blocks (settings.lora; umbra/middle/lora_store.py).

    GET    /v1/lora         {"enabled": false} or the adapter's settings and step count
    PUT    /v1/lora         {"rank", "alpha", "lr", "seed"?} -> a fresh adapter, training on
    POST   /v1/lora/train   {"train": bool} -> start / stop updating it in training sessions
    DELETE /v1/lora         drop it

Every route acts on the adapter of the authenticated client only; none returns weights. A
cloud started without LoRA answers 404 on all of them."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Response
from pydantic import BaseModel

from server.deps import CloudState, client_name, get_state
from umbra.middle.lora_store import LoraConfig, LoraStore
from umbra.errors import SessionError

router = APIRouter(prefix="/v1/lora")


class LoraRequest(BaseModel):
    rank: int = LoraConfig.rank
    alpha: float = LoraConfig.alpha
    lr: float = LoraConfig.lr
    seed: int | None = None


class TrainRequest(BaseModel):
    train: bool


def _store(state: CloudState) -> LoraStore:
    if state.manager.lora is None:
        raise SessionError("LoRA is not enabled on this cloud")
    return state.manager.lora


@router.get("")
async def info(client: str = Depends(client_name), state: CloudState = Depends(get_state)) -> dict:
    return await state.worker.run(_store(state).info, client)


@router.put("")
async def configure(body: LoraRequest, client: str = Depends(client_name),
                    state: CloudState = Depends(get_state)) -> dict:
    config = LoraConfig(rank=body.rank, alpha=body.alpha, lr=body.lr, seed=body.seed)
    return await state.worker.run(_store(state).configure, client, config)


@router.post("/train")
async def train(body: TrainRequest, client: str = Depends(client_name),
                state: CloudState = Depends(get_state)) -> dict:
    return await state.worker.run(_store(state).set_training, client, body.train)


@router.delete("", status_code=204)
async def delete(client: str = Depends(client_name), state: CloudState = Depends(get_state)) -> Response:
    await state.worker.run(_store(state).delete, client)
    return Response(status_code=204)
