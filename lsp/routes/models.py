"""GET /v1/models and GET /v1/models/{model}: the one model this server completes with, as
OpenAI lists models. Its id is the name of the bundle directory when the server runs a bundle,
else of the model directory (`umbra-code-deep` for the embedded default); an OpenAI-style
request must name it (`model`), anything else is a 404 `model_not_found`. `created` is the
directory's modification time."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, Depends

from lsp.backend import Backend
from lsp.deps import get_backend
from lsp.errors import ModelNotFound
from lsp.openai_errors import OpenAIRoute
from lsp.openai_schemas import Model, ModelList
from umbra.paths import default_model_dir

router = APIRouter(route_class=OpenAIRoute)


def served_directory(backend: Backend) -> Path:
    options = backend.options.model
    return Path(options.bundle or options.dir or default_model_dir()).expanduser().resolve()


def served_model(backend: Backend) -> Model:
    path = served_directory(backend)
    try:
        created = int(path.stat().st_mtime)
    except OSError:  # gone since it was loaded: the model is in memory all the same
        created = 0
    return Model(id=path.name, created=created)


def check_model(backend: Backend, name: str) -> Model:
    """The served model if `name` is its id, else ModelNotFound."""
    model = served_model(backend)
    if name != model.id:
        raise ModelNotFound(f"The model '{name}' does not exist: this server serves '{model.id}' (GET /v1/models)")
    return model


@router.get("/v1/models")
async def list_models(backend: Backend = Depends(get_backend)) -> dict:
    return ModelList(data=[served_model(backend)]).model_dump()


@router.get("/v1/models/{model}")
async def retrieve_model(model: str, backend: Backend = Depends(get_backend)) -> dict:
    return check_model(backend, model).model_dump()
