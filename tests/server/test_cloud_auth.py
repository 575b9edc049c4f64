"""Bearer tokens: issued once by `umbra cloud token add`, stored as salted hashes only, checked in
constant time, revocable, picked up by a running service without a restart."""

from __future__ import annotations

import json
import stat

import httpx
import pytest

from cloud_helpers import auth
from server.auth import TokenStore, Unauthorized
from umbra.cli.main import main
from umbra.errors import ConfigError


def test_token_add_prints_once_and_stores_only_a_salted_hash(tmp_path, capsys):
    path = tmp_path / "tokens.json"
    assert main(["cloud", "token", "add", "alice", "--token-file", str(path)]) == 0
    token = capsys.readouterr().out.strip()
    assert token.startswith("umbra_")
    text = path.read_text()
    _, token_id, secret = token.split("_", 2)  # the secret is URL-safe base64 and may hold "_" itself
    assert len(token_id) == 16 and len(secret) == 43
    assert secret not in text and token not in text
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    entry = json.loads(text)["tokens"][0]
    assert entry["name"] == "alice" and len(bytes.fromhex(entry["salt"])) == 16
    assert TokenStore(path).authenticate(f"Bearer {token}") == "alice"

    assert main(["cloud", "token", "add", "alice", "--token-file", str(path)]) == 0
    second = capsys.readouterr().out.strip()
    assert second != token  # a fresh secret each time
    assert main(["cloud", "token", "list", "--token-file", str(path)]) == 0
    listing = capsys.readouterr().out
    assert listing.count("alice") == 2 and secret not in listing


def test_revoke_and_malformed_tokens(tmp_path):
    store = TokenStore(tmp_path / "t.json")
    token = store.add("bob")
    keep = store.add("carol")
    for header in (None, "", "Bearer", "Bearer " + token[:-1], "Token " + token, "Bearer umbra_zz_zz"):
        with pytest.raises(Unauthorized):
            store.authenticate(header)
    assert store.revoke("bob") == 1
    with pytest.raises(Unauthorized):
        store.authenticate("Bearer " + token)
    assert store.authenticate("Bearer " + keep) == "carol"
    with pytest.raises(ConfigError):
        store.add("not a name!")


def test_running_service_sees_new_and_revoked_tokens(cloud):
    store = TokenStore(cloud.workdir / "tokens.json")
    token = store.add("late")
    with httpx.Client(base_url=cloud.base_url) as http:
        assert http.get("/v1/info", headers=auth(token)).json()["client"] == "late"
        store.revoke("late")
        r = http.get("/v1/info", headers=auth(token))
        assert r.status_code == 401 and r.json()["detail"] == "invalid bearer token"
