"""umbra/scrub/patterns.py (with literals.py): e-mail addresses, IPs, internal hosts and URLs —
found with their exact span, and the look-alikes left alone."""

import pytest

from umbra.scrub import ScrubConfig
from umbra.scrub.literals import LiteralMap, is_code

from tests.scrub.helpers import found

ORG = ScrubConfig(internal_domains=("acme.com",))


@pytest.mark.parametrize("line, value", [
    ("# Contact: jane.doe@globex.io for access", "jane.doe@globex.io"),
    ('ALERTS = "oncall+pager@mail.initech.co.uk"', "oncall+pager@mail.initech.co.uk"),
    ('OWNER = "jane.doe@acme.example"', "jane.doe@acme.example"),  # the reserved TLDs are not allowed
    ("    * @author <a href=\"mailto:pholser@alumni.rice.edu\">", "pholser@alumni.rice.edu"),
])
def test_emails(line, value):
    assert found(line) == [("email", value)]


@pytest.mark.parametrize("line", [
    'EMAIL = "someone@example.com"',
    'REMOTE = "git@github.com:org/repo.git"',  # an scp-style remote, not an address
    "y = x@self.weight",  # a matrix product
    "@functools.lru_cache(maxsize=None)",
    'PS1 = "user@"',
    'src = "import pytest\\n@pytest.fixture\\ndef f(): pass"',
    "npm install left-pad@1.3.0",
])
def test_email_lookalikes(line):
    assert [k for k, _ in found(line)] == []


def test_credentials_in_a_url_are_a_secret_not_an_email():
    assert found('URL = "https://bob:Xk29fLq0pZ@files.globex.io/x"') == [("secret", "bob:Xk29fLq0pZ")]


@pytest.mark.parametrize("line, value", [
    ('DB_HOST = "10.20.30.40"', "10.20.30.40"),
    ('addr = "172.31.255.1:5432"', "172.31.255.1"),
    ("# bastion is 192.168.7.12, ask ops", "192.168.7.12"),
    ('CGNAT = "100.64.1.2"', "100.64.1.2"),
    ('LINK = "169.254.169.254"', "169.254.169.254"),
    ('NODE = "fd12:3456:789a::1"', "fd12:3456:789a::1"),
    ('PEER = "[fe80::1c2d:3e4f]:8443"', "fe80::1c2d:3e4f"),
    ('MAPPED = "::ffff:10.0.0.1"', "::ffff:10.0.0.1"),
    ('ALLOW = "10.1.0.0/16"', "10.1.0.0"),
    ('v6 = "fd00:1:2:3:4:5:6:7"', "fd00:1:2:3:4:5:6:7"),
])
def test_private_ips(line, value):
    assert found(line) == [("ip", value)]


@pytest.mark.parametrize("line", [
    'DNS = "8.8.8.8"', 'v6 = "2001:4860:4860::8888"',  # public: kept in the default scope
    'HOST = "127.0.0.1"', 'bind = "0.0.0.0"', 'lo = "::1"', 'doc = "192.0.2.10"', 'doc6 = "2001:db8::1"',
    'version = "10.0.0.1"', "__version__ = '10.1.2.3'", 'RELEASE = "192.168.1.1"',
    'bad = "10.0.0.256"', 'zeros = "010.000.000.001"', 'OID = "1.2.840.113549.1.1.1"',
    'mac = "00:1b:44:11:3a:b7"', 'ts = "12:30:45"', "x = a[1::2]", "ver = v10.1.2.3",
])
def test_ip_lookalikes_and_kept_addresses(line):
    assert found(line) == []


def test_all_scope_takes_public_addresses_but_not_the_allow_list():
    config = ScrubConfig(ip_scope="all")
    assert found('DNS = "8.8.8.8"', config=config) == [("ip", "8.8.8.8")]
    assert found('HOST = "127.0.0.1"', config=config) == []
    assert found('version = "1.2.3.4"', config=config) == []


@pytest.mark.parametrize("line, value", [
    ('STATUS = "https://grafana.ops.internal/d/abc?x=1"', "https://grafana.ops.internal/d/abc?x=1"),
    ('M = "http://10.2.3.4:9000/metrics"', "http://10.2.3.4:9000/metrics"),
    ("# see http://jenkins:8080/job/deploy/.", "http://jenkins:8080/job/deploy/"),  # the full stop stays
    ('W = "https://wiki.acme.com/page?id=7"', "https://wiki.acme.com/page?id=7"),
    ('V6 = "http://[fd00::5]:8080/x"', "http://[fd00::5]:8080/x"),
    ('DB = "postgresql://app:Xk29fLq0pZ@db.prod.internal:5432/orders"',
     "postgresql://app:Xk29fLq0pZ@db.prod.internal:5432/orders"),  # one <URL>, credentials inside
    ('J = "jdbc:mysql://db.corp:3306/billing"', "jdbc:mysql://db.corp:3306/billing"),
])
def test_internal_urls_are_replaced_whole(line, value):
    assert found(line, config=ORG) == [("url", value)]


@pytest.mark.parametrize("line", [
    '# https://github.com/python/cpython/issues/12345',
    'URL = "https://pypi.org/simple/"',
    'URL = "http://localhost:8080/api"',
    'URL = "https://example.com/x"',
    'DOC = "http://host:port/path"',  # a documentation placeholder
    'BUCKET = "s3://billing-exports/2024/"',
    'P = "https://docs.python.org/3/library/threading.local"',  # a host-like path of a public URL
])
def test_public_and_placeholder_urls_are_kept(line):
    assert found(line, config=ORG) == []


@pytest.mark.parametrize("line, path, value", [
    ('CACHE_HOST = "redis-3.prod.internal"', "a.py", "redis-3.prod.internal"),
    ("# runs nightly on build01.corp (see runbook)", "a.py", "build01.corp"),
    ('        Socket s = new Socket("ldap.eu.acme.com", 636);', "A.java", "ldap.eu.acme.com"),
    ('HOST = "DB01.PROD.INTERNAL"', "a.py", "DB01.PROD.INTERNAL"),
    ("  host: nas.home.arpa", "config.yaml", "nas.home.arpa"),
    ("ssh bastion.lan uptime", "run.sh", "bastion.lan"),
])
def test_internal_hosts(line, path, value):
    assert found(line, path, config=ORG) == [("host", value)]


def test_an_address_at_an_internal_host_is_one_email():
    assert found("ssh deploy@bastion.lan uptime", "run.sh") == [("email", "deploy@bastion.lan")]


@pytest.mark.parametrize("line, path", [
    ("tl = threading.local()", "a.py"),
    ("class Ctx(threading.local):", "a.py"),
    ("if options.local:", "a.py"),  # code, not a string or comment
    ("\tif n.local {", "a.go"),
    ("import jdk.internal.misc.Unsafe;", "A.java"),
    ("package com.acme.billing.internal;", "A.java"),
    (" * @xerces.internal", "A.java"),
    ("x = Outer.Internal", "a.py"),
    ('"""Returns a ``py.path.local`` object."""', "a.py"),
    ("# the local network", "a.py"),
    ("# uses threading.local for state", "a.py"),
])
def test_host_lookalikes(line, path):
    assert found(line, path, config=ORG) == []


def test_literal_map_and_code_files():
    text = 'a = b.local  # db.corp\ns = """\nx.internal\n"""\n'
    literals = LiteralMap(text)
    assert not literals.contains(text.index("b.local"))
    assert literals.contains(text.index("db.corp"))
    assert literals.contains(text.index("x.internal"))
    assert is_code("a.py") and is_code(None) and not is_code("values.yaml")
    assert found(text) == [("host", "db.corp"), ("host", "x.internal")]
