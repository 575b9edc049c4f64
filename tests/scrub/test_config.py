"""umbra/scrub/config.py: defaults, normalisation, validation (ScrubConfigError, a ConfigError)."""

import dataclasses
import ipaddress

import pytest

from umbra.errors import ConfigError, UmbraError
from umbra.scrub import KINDS, ScrubConfig, ScrubConfigError


def test_defaults_state_the_position():
    config = ScrubConfig()
    assert config.kinds == frozenset(KINDS)
    assert ".internal" in config.internal_suffixes and ".home.arpa" in config.internal_suffixes
    assert config.ip_scope == "private"
    assert config.internal_domains == ()
    assert config.is_allowed_ip(ipaddress.ip_address("127.0.0.1"))
    assert config.is_allowed_ip(ipaddress.ip_address("0.0.0.0"))
    assert not config.is_allowed_ip(ipaddress.ip_address("10.0.0.1"))


def test_domains_are_normalised():
    config = ScrubConfig(internal_suffixes=(".Corp.",), internal_domains=("Acme.COM", ".northwind.io"))
    assert config.internal_suffixes == (".corp",)
    assert config.internal_domains == ("acme.com", "northwind.io")


def test_internal_host_rules():
    config = ScrubConfig(internal_domains=("acme.com",))
    assert config.is_internal_host("db01.prod.internal")
    assert config.is_internal_host("acme.com") and config.is_internal_host("wiki.eu.acme.com")
    assert not config.is_internal_host("notacme.com")
    assert not config.is_internal_host("github.com")
    assert not config.is_internal_host("internal")  # a suffix needs a name in front
    allowed = ScrubConfig(allow_domains=("corp",))
    assert not allowed.is_internal_host("db.corp")


@pytest.mark.parametrize("field, value, message", [
    ("kinds", frozenset({"secret", "phone"}), "unknown scrub kind"),
    ("ip_scope", "public", "ip_scope must be one of"),
    ("internal_domains", ("acme com",), "not a host name"),
    ("internal_suffixes", ("",), "not a host name"),
    ("allow_ips", ("10.0.0.0/33",), "not an IP address or network"),
    ("base64_entropy", 9.0, "base64_entropy must be a number in"),
    ("placeholder_hosts", ("bad_host",), "not a host name"),
])
def test_bad_fields_raise_a_config_error(field, value, message):
    with pytest.raises(ScrubConfigError, match=message) as info:
        ScrubConfig(**{field: value})
    assert isinstance(info.value, ConfigError) and isinstance(info.value, UmbraError)


def test_replace_validates_again():
    with pytest.raises(ScrubConfigError):
        dataclasses.replace(ScrubConfig(), ip_scope="everything")
    assert dataclasses.replace(ScrubConfig(), ip_scope="all").ip_scope == "all"
