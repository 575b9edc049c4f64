"""umbra/scrub/scrubber.py: the scrubbed view end to end — every kind replaced by its placeholder,
exact findings, no found value left, idempotence, determinism, kinds switched off."""

import random
import string

import pytest

from umbra.scrub import PLACEHOLDERS, ScrubConfig, Scrubber, ScrubResult, scrub_text

VALUES = {
    "secret": ["AKIAQ3EGT2ZJW6PXMN4R", "hunter22x", "svc:Xk29fLq0pZ"],
    "url": ["https://grafana.ops.internal/d/abc"],
    "email": ["jane.doe@globex.io"],
    "host": ["redis-3.prod.internal"],
    "ip": ["10.20.30.40"],
    "name": ["Jane Doe", "jdoe"],
}
SOURCE = """# Copyright (c) 2021 Jane Doe
# TODO(jdoe): rotate the key
import os

AWS_ACCESS_KEY_ID = "AKIAQ3EGT2ZJW6PXMN4R"
password = "hunter22x"
DB = "postgresql://svc:Xk29fLq0pZ@db.globex.io:5432/orders"
STATUS = "https://grafana.ops.internal/d/abc"
ALERTS = "jane.doe@globex.io"
CACHE = ("redis-3.prod.internal", 6379)
BASTION = "10.20.30.40"
PUBLIC = "https://github.com/globex/tools"
"""
EXPECTED = """# Copyright (c) 2021 <NAME>
# TODO(<NAME>): rotate the key
import os

AWS_ACCESS_KEY_ID = "<SECRET>"
password = "<SECRET>"
DB = "postgresql://<SECRET>@db.globex.io:5432/orders"
STATUS = "<URL>"
ALERTS = "<EMAIL>"
CACHE = ("<HOST>", 6379)
BASTION = "<IP>"
PUBLIC = "https://github.com/globex/tools"
"""


def test_every_kind_is_replaced_by_its_placeholder():
    result = Scrubber().scrub(SOURCE, path="settings.py")
    assert isinstance(result, ScrubResult)
    assert result.text == EXPECTED
    assert result.counts() == {"secret": 3, "url": 1, "email": 1, "host": 1, "ip": 1, "name": 2}
    for kind, values in VALUES.items():
        for value in values:
            assert value not in result.text, kind


def test_findings_point_at_what_was_replaced():
    result = Scrubber().scrub(SOURCE, path="settings.py")
    lines = SOURCE.split("\n")
    seen = []
    for f in result.findings:
        seen.append((f.kind, lines[f.line - 1][f.column - 1:f.column - 1 + f.length]))
    assert seen == [("name", "Jane Doe"), ("name", "jdoe"), ("secret", "AKIAQ3EGT2ZJW6PXMN4R"),
                    ("secret", "hunter22x"), ("secret", "svc:Xk29fLq0pZ"),
                    ("url", "https://grafana.ops.internal/d/abc"), ("email", "jane.doe@globex.io"),
                    ("host", "redis-3.prod.internal"), ("ip", "10.20.30.40")]


def test_scrubbing_is_idempotent_and_deterministic():
    scrubber = Scrubber()
    once = scrubber.scrub(SOURCE, path="settings.py")
    assert scrubber.scrub(once.text, path="settings.py") == ScrubResult(once.text, ())
    assert Scrubber().scrub(SOURCE, path="settings.py") == once


def _random_document(rng: random.Random) -> str:
    """Lines mixing every kind with code, punctuation and placeholders, in random order."""
    pieces = [
        f'TOKEN = "ghp_{"".join(rng.choice(string.ascii_letters + string.digits) for _ in range(36))}"',
        f'host = "db{rng.randrange(99)}.{rng.choice(["corp", "lan", "internal"])}"',
        f"# mail {rng.choice(['ann', 'bo', 'cy'])}.{rng.choice(['lee', 'chan'])}@{rng.choice(['globex', 'hooli'])}.io",
        f'url = "http://{rng.choice(["jenkins", "10.1.2.3", "ci.corp"])}:8080/job/{rng.randrange(9)}"',
        f"ip = '192.168.{rng.randrange(256)}.{rng.randrange(1, 255)}'",
        f"# @author {rng.choice(['Ann', 'Bo', 'Cy'])} {rng.choice(['Lee', 'Chan', 'Okafor'])}",
        f'DSN = "mysql://u{rng.randrange(9)}:p{rng.randrange(10 ** 6)}x@db.globex.io/app"',
        'x = "<SECRET>" + "<URL>"  # placeholders already there',
        "def f(a, b):\n    return a @ b",
        f"password = 'Pw{rng.randrange(10 ** 6)}!'",
    ]
    rng.shuffle(pieces)
    return "\n".join(pieces[: rng.randrange(3, len(pieces) + 1)]) + "\n"


@pytest.mark.parametrize("seed", range(40))
def test_idempotent_on_generated_documents(seed):
    scrubber = Scrubber()
    once = scrubber.scrub(_random_document(random.Random(seed)))
    assert scrubber.scrub(once.text).findings == ()


def test_kinds_can_be_switched_off():
    only_email = Scrubber(ScrubConfig(kinds=frozenset({"email"}))).scrub(SOURCE, path="settings.py")
    assert only_email.counts() == {"secret": 0, "url": 0, "email": 1, "host": 0, "ip": 0, "name": 0}
    assert "AKIAQ3EGT2ZJW6PXMN4R" in only_email.text
    # without the url kind, the internal host inside a URL is still a host
    no_url = Scrubber(ScrubConfig(kinds=frozenset({"host"}))).scrub('S = "https://grafana.ops.internal/d"')
    assert no_url.text == 'S = "https://<HOST>/d"'


def test_placeholders_and_line_endings_are_kept_as_text():
    text = 'a = "<SECRET>"\r\nb = "10.0.0.7"\r\n'
    result = scrub_text(text)
    assert result.text == 'a = "<SECRET>"\r\n' + 'b = "<IP>"\r\n'
    assert [(f.kind, f.line, f.column, f.length) for f in result.findings] == [("ip", 2, 6, 8)]
    assert scrub_text("") == ScrubResult("", ())
    assert set(PLACEHOLDERS.values()) <= {"<SECRET>", "<URL>", "<EMAIL>", "<HOST>", "<IP>", "<NAME>"}


def test_a_pem_block_is_one_finding_spanning_lines():
    body = "MIIEowIBAAKCAQEAtqFzW7dQ4x9Lm2VbT8rNc1YwQe5HsJd0Af6GhKioP3kP9xLm"
    text = f'x = 1\nKEY = """-----BEGIN EC PRIVATE KEY-----\n{body}\n-----END EC PRIVATE KEY-----"""\n'
    result = scrub_text(text)
    assert result.text == 'x = 1\nKEY = """<SECRET>"""\n'
    (f,) = result.findings
    assert (f.kind, f.line, f.column) == ("secret", 2, 10)
    assert f.length == len(f"-----BEGIN EC PRIVATE KEY-----\n{body}\n-----END EC PRIVATE KEY-----")


def test_a_placeholder_does_not_shorten_a_name_list_into_a_new_name():
    # A token line that landed inside an __author__ tuple: the first pass replaces the token; the
    # second must not read "token" (cut short by <SECRET>) as a name.
    text = ('__author__ = ("Guido van Rossum <guido@python.org>, "\n'
            '    headers = {"Authorization": "token gho_AwQzqUe5WkLpVn2cW2dGZeSCpCTX5WQiMO4G"}\n'
            '              "Mark Russell <mark@x.io>")\n')
    scrubber = Scrubber()
    once = scrubber.scrub(text, path="io.py")
    assert "gho_" not in once.text and "Guido van Rossum" not in once.text
    assert scrubber.scrub(once.text, path="io.py").findings == ()
