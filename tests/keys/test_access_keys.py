"""SecureGate access keys (keys/access_keys.py): 32 CSPRNG bytes and a fresh key id each; a text
form that round-trips and is parsed strictly, with errors that never contain the secret; a repr
without it; stored, listed, loaded and deleted through the real OS keyring."""

from __future__ import annotations

import base64
import dataclasses
import io
import re

import keyring
import pytest

from keys import KeyNotFound, KeyStoreError
from keys.access_keys import (ENTRY_PREFIX, PREFIX, SECRET_BYTES, AccessKeyError, delete_key, entry_name,
                              generate, held_key_ids, load_key, new_key_id, parse, read_secret_text, store_key)

BUNDLE = "0123456789abcdef0123456789abcdef"


def _b64(secret: bytes) -> str:
    return base64.urlsafe_b64encode(secret).rstrip(b"=").decode()


def test_generate_is_32_random_bytes_and_a_fresh_key_id():
    keys = [generate(BUNDLE) for _ in range(200)]
    assert all(len(k.secret) == SECRET_BYTES == 32 and isinstance(k.secret, bytes) for k in keys)
    assert len({k.secret for k in keys}) == 200 and len({k.key_id for k in keys}) == 200
    assert all(re.fullmatch(r"[0-9a-f]{16}", k.key_id) and k.bundle_id == BUNDLE for k in keys)
    # no byte value is missing or stuck: 6400 bytes from a CSPRNG cover all 256 values
    pool = b"".join(k.secret for k in keys)
    assert len(set(pool)) == 256
    ones = sum(bin(b).count("1") for b in pool) / (8 * len(pool))
    assert abs(ones - 0.5) < 0.01
    assert re.fullmatch(r"[0-9a-f]{16}", new_key_id()) and new_key_id() != new_key_id()
    for bad in ("", "has space", "a/b", "x" * 65, None):
        with pytest.raises(AccessKeyError):
            generate(bad)


def test_text_round_trip():
    key = generate(BUNDLE)
    text = key.text()
    assert text == f"{PREFIX}:{BUNDLE}:{key.key_id}:{_b64(key.secret)}"
    assert "=" not in text and re.fullmatch(r"[A-Za-z0-9_:-]+", text)
    assert parse(text) == key
    assert parse(f"  {text}\n") == key  # surrounding whitespace from a paste
    for secret in (bytes(32), b"\xff" * 32, bytes(range(32)), b"\xfb\xef\xbe" * 10 + b"\xfb\xff"):
        k = dataclasses.replace(key, secret=secret)
        assert parse(k.text()) == k  # '-' and '_' of base64url survive
    assert entry_name(BUNDLE, key.key_id) == f"{ENTRY_PREFIX}{BUNDLE}/{key.key_id}" == key.entry


def _rejected(text: str, secret_text: str):
    with pytest.raises(AccessKeyError) as info:
        parse(text)
    message = str(info.value)
    assert message.startswith("not an Umbra access key")
    for shown in (message, repr(info.value), str(info.value.__cause__ or "")):
        assert secret_text not in shown, shown
    assert isinstance(info.value, KeyStoreError)
    return message


def test_parse_rejects_everything_else_without_showing_the_secret():
    key = generate(BUNDLE)
    enc = _b64(key.secret)
    cases = {
        "wrong prefix": f"umbra-ak2:{BUNDLE}:{key.key_id}:{enc}",
        "the permutation's prefix": f"umbra-k1:{BUNDLE}:{key.key_id}:{enc}",
        "no prefix": f"{BUNDLE}:{key.key_id}:{enc}",
        "upper-case prefix": f"UMBRA-AK1:{BUNDLE}:{key.key_id}:{enc}",
        "one field short": f"{PREFIX}:{key.key_id}:{enc}",
        "one field more": f"{PREFIX}:{BUNDLE}:{key.key_id}:{enc}:x",
        "empty bundle": f"{PREFIX}::{key.key_id}:{enc}",
        "bundle with a slash": f"{PREFIX}:a/b:{key.key_id}:{enc}",
        "bundle too long": f"{PREFIX}:{'b' * 65}:{key.key_id}:{enc}",
        "key id too short": f"{PREFIX}:{BUNDLE}:{key.key_id[:-1]}:{enc}",
        "key id too long": f"{PREFIX}:{BUNDLE}:{key.key_id}0:{enc}",
        "key id upper case": f"{PREFIX}:{BUNDLE}:ABCDEF0123456789:{enc}",
        "key id not hex": f"{PREFIX}:{BUNDLE}:{'g' * 16}:{enc}",
        "short secret (31 bytes)": f"{PREFIX}:{BUNDLE}:{key.key_id}:{_b64(key.secret[:31])}",
        "long secret (33 bytes)": f"{PREFIX}:{BUNDLE}:{key.key_id}:{_b64(key.secret + b'x')}",
        "16-byte secret": f"{PREFIX}:{BUNDLE}:{key.key_id}:{_b64(key.secret[:16])}",
        "empty secret": f"{PREFIX}:{BUNDLE}:{key.key_id}:",
        "padded base64": f"{PREFIX}:{BUNDLE}:{key.key_id}:{enc}=",
        "standard base64 (+/)": f"{PREFIX}:{BUNDLE}:{key.key_id}:{enc.replace('-', '+').replace('_', '/')}"
        if ("-" in enc or "_" in enc) else f"{PREFIX}:{BUNDLE}:{key.key_id}:{enc[:-1]}+",
        "a character outside base64": f"{PREFIX}:{BUNDLE}:{key.key_id}:{enc[:20]}!{enc[21:]}",
        "a space inside": f"{PREFIX}:{BUNDLE}:{key.key_id}:{enc[:20]} {enc[20:]}",
        "a dot inside": f"{PREFIX}:{BUNDLE}:{key.key_id}:{enc[:20]}.{enc[21:]}",
        "one base64 character too many": f"{PREFIX}:{BUNDLE}:{key.key_id}:{enc}A",
        "the secret in hex": f"{PREFIX}:{BUNDLE}:{key.key_id}:{key.secret.hex()}",
        "empty": "",
    }
    for what, text in cases.items():
        secret_part = text.rsplit(":", 1)[-1]
        _rejected(text, secret_part if len(secret_part) >= 8 else enc)


def test_repr_and_str_hide_the_secret():
    key = generate(BUNDLE)
    for shown in (repr(key), str(key), f"{key}", f"{key!r}", repr([key]), repr({"k": key})):
        assert key.secret.hex() not in shown and _b64(key.secret) not in shown
        assert repr(key.secret) not in shown and str(list(key.secret[:4]))[1:-1] not in shown
        assert key.key_id in shown and BUNDLE in shown
    assert repr(key) == f"AccessKey(bundle_id={BUNDLE!r}, key_id={key.key_id!r})"
    # and in a traceback of an error that carries the key
    try:
        raise RuntimeError(key)
    except RuntimeError as exc:
        assert key.secret.hex() not in repr(exc) and repr(key.secret) not in str(exc)


def test_store_load_held_delete_through_the_real_keyring(keystore):
    assert type(keystore.backend).__module__ == "keyring.backends.SecretService"
    a, b = generate(BUNDLE), generate(BUNDLE)
    other = generate("otherbundle")
    assert held_key_ids(keystore, BUNDLE) == []
    for key in (a, b, other):
        store_key(keystore, key)
    assert sorted(held_key_ids(keystore, BUNDLE)) == sorted([a.key_id, b.key_id])
    assert held_key_ids(keystore, "otherbundle") == [other.key_id]
    assert held_key_ids(keystore, "0123456789abcdef") == []  # a prefix of BUNDLE is another bundle
    assert load_key(keystore, BUNDLE, a.key_id) == a
    # stored base64 under access/<bundle>/<key id>, as any keyring client sees it
    raw = keyring.get_keyring().get_password(keystore.service, a.entry)
    assert base64.b64decode(raw) == a.secret and a.entry == f"access/{BUNDLE}/{a.key_id}"
    # entries that are not access keys of the bundle are not listed as held
    keystore.set(f"access/{BUNDLE}/not-a-key-id", b"x")
    keystore.set(f"bundle/{BUNDLE}/{a.key_id}", b"y")  # the permutation's entry namespace
    assert sorted(held_key_ids(keystore, BUNDLE)) == sorted([a.key_id, b.key_id])
    delete_key(keystore, BUNDLE, a.key_id)
    assert held_key_ids(keystore, BUNDLE) == [b.key_id]
    with pytest.raises(KeyNotFound):
        load_key(keystore, BUNDLE, a.key_id)
    with pytest.raises(KeyNotFound):
        delete_key(keystore, BUNDLE, a.key_id)
    # a secret changed behind Umbra's back is loaded as it is (the gate and the seal judge it)
    keystore.set(b.entry, b"\x00" * 5)
    assert load_key(keystore, BUNDLE, b.key_id).secret == b"\x00" * 5


def test_secret_text_is_read_from_a_stream_never_argv():
    key = generate(BUNDLE)
    assert read_secret_text("access key", io.StringIO(key.text() + "\n")) == key.text()
    for bad in ("", "   \n", "a b", "a\tb", "umbra\x01x"):
        with pytest.raises(KeyStoreError) as info:
            read_secret_text("access key", io.StringIO(bad))
        assert bad.strip() == "" or bad not in str(info.value)
