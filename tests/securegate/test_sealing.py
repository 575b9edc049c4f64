"""Sealed revealing adapters (umbra/securegate/sealing.py over umbra/privacy/aead.py): a round
trip; every way of not having the right (key, adapter, key id, untouched blob) fails with one
SealError message that says nothing about which it was; the plaintext is nowhere in the blob;
the AES key is HKDF-SHA256(secret, the header's salt, the context) and nothing simpler."""

from __future__ import annotations

import dataclasses
import json
import secrets
import struct

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from keys.access_keys import AccessKey, generate
from umbra.privacy.aead import SealError, derive_key, read_header
from umbra.securegate import sealing
from umbra.securegate.sealing import MAGIC, open_adapter, seal_adapter, sealed_fields

BUNDLE = "bundleSEAL01"
ONE_MESSAGE = "the sealed revealing adapter cannot be decrypted: wrong key or tampered file"


@pytest.fixture(scope="module")
def plain():
    # structured plaintext (like safetensors: a JSON header, then float bytes) with a marker
    return b'{"__metadata__": {"format": "umbra-adapter"}}' + b"PLAINTEXT-MARKER-0123456789" + secrets.token_bytes(4000)


@pytest.fixture(scope="module")
def key():
    return generate(BUNDLE)


def _fails_alike(blob: bytes, key: AccessKey, adapter: str) -> str:
    with pytest.raises(SealError) as info:
        open_adapter(blob, key, adapter)
    message = str(info.value)
    assert message == ONE_MESSAGE, message
    if key.secret:
        assert key.secret.hex() not in message and key.text() not in message
    return message


def test_round_trip_and_fresh_randomness(plain, key):
    blob = seal_adapter(plain, key, "team-a")
    assert open_adapter(blob, key, "team-a") == plain
    again = seal_adapter(plain, key, "team-a")
    assert again != blob and open_adapter(again, key, "team-a") == plain  # fresh salt and nonce
    h1, h2 = read_header(blob, MAGIC)[0], read_header(again, MAGIC)[0]
    assert h1["salt"] != h2["salt"] and h1["nonce"] != h2["nonce"]
    assert len(bytes.fromhex(h1["salt"])) == 16 and len(bytes.fromhex(h1["nonce"])) == 12
    assert sealed_fields(blob) | {} == h1
    assert (h1["bundle_id"], h1["adapter"], h1["key_id"]) == (BUNDLE, "team-a", key.key_id)
    assert h1["alg"] == "AES-256-GCM" and h1["kdf"] == "HKDF-SHA256"
    assert open_adapter(seal_adapter(b"", key, "x"), key, "x") == b""  # an empty plaintext seals too


def test_the_aes_key_is_hkdf_of_the_secret_under_the_header_salt_and_the_context(plain, key):
    blob = seal_adapter(plain, key, "team-a")
    header, prefix, ciphertext = read_header(blob, MAGIC)
    salt, nonce = bytes.fromhex(header["salt"]), bytes.fromhex(header["nonce"])
    info = sealing._info(BUNDLE, "team-a", key.key_id)
    aes = derive_key(key.secret, salt, info)
    assert AESGCM(aes).decrypt(nonce, ciphertext, prefix) == plain  # the whole prefix is the AD
    assert len(ciphertext) == len(plain) + 16
    with pytest.raises(Exception):
        AESGCM(aes).decrypt(nonce, ciphertext, b"")  # the header is authenticated
    for wrong in (key.secret, derive_key(key.secret, salt, b""),  # never the raw secret, always the context
                  derive_key(key.secret, b"\x00" * 16, info)):
        with pytest.raises(Exception):
            AESGCM(wrong).decrypt(nonce, ciphertext, prefix)


def test_wrong_key_adapter_key_id_or_bundle_fail_alike(plain, key):
    blob = seal_adapter(plain, key, "team-a")
    other = generate(BUNDLE)
    cases = {
        "another key": (other, "team-a"),
        "the same secret, another key id": (dataclasses.replace(key, key_id=other.key_id), "team-a"),
        "another key's id, its secret": (dataclasses.replace(other, key_id=key.key_id), "team-a"),
        "another adapter name": (key, "team-b"),
        "an adapter name with a NUL": (key, "team-a\x00"),
        "the same secret under another bundle": (dataclasses.replace(key, bundle_id="bundleSEAL02"), "team-a"),
        "one bit of the secret": (dataclasses.replace(key, secret=bytes([key.secret[0] ^ 1]) + key.secret[1:]), "team-a"),
        "a trailing zero byte": (dataclasses.replace(key, secret=key.secret + b"\x00"), "team-a"),
        "the empty secret": (dataclasses.replace(key, secret=b""), "team-a"),
    }
    assert len({_fails_alike(blob, k, a) for k, a in cases.values()}) == 1


def test_every_flipped_byte_and_every_truncation_fails_alike(plain, key):
    """Flip each byte of the magic, the header length, the header (including salt and nonce),
    a stride of the ciphertext and every tag byte; cut the blob at every length up to past the
    header and at a stride after it: always the one message."""
    blob = seal_adapter(plain, key, "team-a")
    header, prefix, ciphertext = read_header(blob, MAGIC)
    n = len(blob)
    salt_at = blob.index(header["salt"].encode())
    nonce_at = blob.index(header["nonce"].encode())
    positions = set(range(len(prefix)))  # magic, length, the whole JSON header (salt and nonce in it)
    positions |= set(range(len(prefix), n - 16, 97)) | set(range(n - 16, n))  # ciphertext, tag
    assert salt_at in positions and nonce_at + 5 in positions
    messages = set()
    for i in sorted(positions):
        for bit in (0x01, 0x80):
            tampered = bytearray(blob)
            tampered[i] ^= bit
            messages.add(_fails_alike(bytes(tampered), key, "team-a"))
    cuts = set(range(0, len(prefix) + 40)) | set(range(len(prefix), n, 211)) | {n - 1, n - 16, n - 17}
    for cut in sorted(cuts):
        messages.add(_fails_alike(blob[:cut], key, "team-a"))
    messages.add(_fails_alike(blob + b"\x00", key, "team-a"))  # extended
    messages.add(_fails_alike(b"", key, "team-a"))
    assert messages == {ONE_MESSAGE}


def test_an_edited_header_fails_even_when_it_parses(plain, key):
    blob = seal_adapter(plain, key, "team-a")
    header, prefix, ciphertext = read_header(blob, MAGIC)
    for edit in ({"adapter": "team-b"}, {"key_id": "0" * 16}, {"bundle_id": "x"}, {"v": 2},
                 {"salt": "00" * 16}, {"nonce": "00" * 12}, {"extra": 1}):
        new = json.dumps({**header, **edit}, sort_keys=True).encode()
        forged = MAGIC + struct.pack("<I", len(new)) + new + ciphertext
        _fails_alike(forged, key, "team-a")
        # even with the forged header's context asked for: the tag covers the original prefix
        if "adapter" in edit:
            _fails_alike(forged, key, "team-b")
    # a blob of another kind (the permutation's magic) is not an adapter either
    _fails_alike(b"UMBRA-SL\x01" + blob[len(MAGIC):], key, "team-a")


def test_a_file_moved_to_another_slot_fails_like_a_wrong_key(plain, key):
    """The context comes from the caller: a ciphertext sealed for adapter A under key 1, opened
    as adapter B's or key 2's file, fails (even though its header names A and key 1)."""
    other = generate(BUNDLE)
    blob_a = seal_adapter(plain, key, "team-a")
    blob_b = seal_adapter(plain + b"b", other, "team-b")
    _fails_alike(blob_a, other, "team-b")
    _fails_alike(blob_b, key, "team-a")
    assert open_adapter(blob_b, other, "team-b") == plain + b"b"


def test_the_plaintext_never_appears_in_the_blob(plain, key):
    blob = seal_adapter(plain, key, "team-a")
    assert b"PLAINTEXT-MARKER" not in blob and b"umbra-adapter" not in blob
    for start in range(0, len(plain) - 16, 16):
        assert plain[start:start + 16] not in blob
    for secret_form in (key.secret, key.secret.hex().encode(), key.text().encode(),
                        key.text().rsplit(":", 1)[1].encode()):
        assert secret_form not in blob
    header = read_header(blob, MAGIC)[0]
    aes = derive_key(key.secret, bytes.fromhex(header["salt"]), sealing._info(BUNDLE, "team-a", key.key_id))
    assert aes not in blob
    # a low-entropy plaintext (all zeros) leaves no run of zeros in the ciphertext
    zeros = seal_adapter(bytes(4096), key, "team-a")
    assert bytes(16) not in zeros[len(read_header(zeros, MAGIC)[1]):]
