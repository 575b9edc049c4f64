"""Invariant 1 (DESIGN §1): nothing that leaves the client carries text or token ids.

A real capture: the cloud service runs for real on a loopback socket, and a TCP forwarding proxy
between RemoteMiddle and the service records every byte both ways. The client completes a file
that holds a unique marker string, through the completion engine — once on the plain split
path, once with a client bundle (INDVocab + LTokenizer). The capture is then decoded (HTTP/1.1
bodies, chunked or not; WebSocket frames, unmasked and reassembled) and neither the raw bytes
nor any decoded payload may contain:

* the marker as UTF-8 or UTF-16-LE;
* its public-tokenizer id sequence — tokenized alone and as it sits in the file — as little-endian
  int16, int32 and int64 arrays; nor any 8-id window of the whole prompt's public ids;
* with the bundle, the same id sequences in private ids (π of the public ids).

Positive controls make the absence meaningful: every payload RemoteMiddle reports sending
(its `tap`) is found in the decoded client→cloud stream, both HTTP and WebSocket carried data,
and the search does find a needle planted in a copy of the capture."""

from __future__ import annotations

import secrets

import numpy as np
import pytest
import torch
from capture import CaptureProxy, decode_capture, leaks
from tiny_models import build_tiny_model_dir

from server.launch import local_cloud_thread
from umbra.engine import ClientModel, CompletionEngine, EngineConfig, StopConfig
from umbra.middle.remote import RemoteMiddle
from umbra.privacy.bundle import BundleConfig, init_bundle

CONFIG = EngineConfig(stop=StopConfig(max_tokens=6, multiline=True))
ID_DTYPES = ("<i2", "<i4", "<i8")
WINDOW = 8


# -- the needles -----------------------------------------------------------------------------------
def _id_needles(ids: list[int]) -> list[bytes]:
    return [np.asarray(ids, dtype=dt).tobytes() for dt in ID_DTYPES]


def needles(marker: str, text: str, public_tok, permutation=None) -> dict[str, bytes]:
    """name -> bytes that must not leave the client."""
    alone = public_tok.encode(marker)
    ids, offsets = public_tok.encode_with_offsets(text)
    start = text.index(marker)
    in_file = [i for i, (a, b) in zip(ids, offsets) if a < start + len(marker) and b > start]
    seqs = {"marker ids alone": alone, "marker ids in file": in_file}
    seqs.update({f"file ids [{k}:{k + WINDOW}]": ids[k : k + WINDOW] for k in range(0, len(ids) - WINDOW + 1, 3)})
    out = {"marker utf-8": marker.encode("utf-8"), "marker utf-16-le": marker.encode("utf-16-le")}
    for name, seq in seqs.items():
        for dt, b in zip(ID_DTYPES, _id_needles(seq)):
            out[f"{name} {dt}"] = b
        if permutation is not None:
            for dt, b in zip(ID_DTYPES, _id_needles(permutation.to_private(list(seq)))):
                out[f"private {name} {dt}"] = b
    assert min(len(v) for v in out.values()) >= 8  # long enough not to match float bytes by chance
    return out


# -- the test --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def base_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("capture-base")
    build_tiny_model_dir(d, family="llama", style="starcoder")
    return d


def _source(marker: str) -> tuple[str, str]:
    prefix = (f"# owner: {marker}\nimport os\n\n\ndef {marker.lower()}(path):\n"
              f"    '''{marker} reads a file.'''\n    if os.path.exists(path):\n        return ")
    suffix = "\n    return None\n"
    return prefix, suffix


async def _complete_through_proxy(model: ClientModel, base, prefix, suffix):
    tapped: list[tuple[str, bytes]] = []
    with local_cloud_thread(base, model.plan, settings={"torch_threads": 1}) as cloud:
        host, port = cloud.base_url.rsplit("//", 1)[1].split(":")
        proxy = CaptureProxy(host, int(port))
        proxy_port = await proxy.start()
        middle = RemoteMiddle(f"http://127.0.0.1:{proxy_port}", cloud.token, hidden_size=model.spec.hidden_size,
                              tap=lambda d, p: tapped.append((d, bytes(p))))
        try:
            info = await middle.connect()
            engine = CompletionEngine.split(model, middle, CONFIG, context_length=info["max_seq_len"])
            async with engine.session() as session:
                first = await session.complete(prefix, suffix)
                second = await session.complete(prefix + "o", suffix)  # a keystroke: prefix reuse
        finally:
            await middle.aclose()
            await proxy.close()
    assert first.generated_tokens > 0 and second.generated_tokens > 0
    return proxy, tapped


def _check(proxy: CaptureProxy, tapped, needle_map):
    decoded = decode_capture(proxy)
    raw = [bytes(b) for conn in proxy.connections for b in conn]
    # positive controls: the capture holds everything RemoteMiddle sent, over HTTP and WS
    up = decoded["http_up"] + decoded["ws_up"]
    sent = [p for d, p in tapped if d == "sent" and p]
    assert sent and all(any(p == blob for blob in up) for p in sent)
    assert decoded["ws_up"] and decoded["ws_down"] and decoded["http_up"] and decoded["http_down"]
    planted = raw[0][:100] + next(iter(needle_map.values())) + raw[0][100:]
    assert leaks([planted], needle_map)
    # the invariant
    assert leaks(raw, needle_map) == []
    assert leaks([b for blobs in decoded.values() for b in blobs], needle_map) == []


async def test_plain_split_traffic_holds_no_text_or_token_ids(base_dir):
    marker = "UmbraCanary" + secrets.token_hex(6)
    prefix, suffix = _source(marker)
    model = ClientModel.load(base_dir)
    proxy, tapped = await _complete_through_proxy(model, base_dir, prefix, suffix)
    _check(proxy, tapped, needles(marker, prefix + suffix, model.tokenizer))


async def test_bundle_traffic_holds_no_text_public_or_private_ids(base_dir, tmp_path, keystore):
    marker = "UmbraCanary" + secrets.token_hex(6)
    prefix, suffix = _source(marker)
    bundle_dir = tmp_path / "bundle"
    init_bundle(base_dir, BundleConfig(epsilon=13.0), bundle_dir, store=keystore)
    model = ClientModel.from_bundle(bundle_dir, base_dir, store=keystore)
    public = ClientModel.load(base_dir).tokenizer
    proxy, tapped = await _complete_through_proxy(model, base_dir, prefix, suffix)
    _check(proxy, tapped, needles(marker, prefix + suffix, public, model.bundle.permutation))
    assert not torch.equal(model.encoder.embed_tokens.weight, ClientModel.load(base_dir).encoder.embed_tokens.weight)
