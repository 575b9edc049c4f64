"""organizations.py: an organizations file becomes each organization's settings (paths relative to
the file, the command line's options as defaults) and each one's SuperNode node config, which
client_app.node_settings reads back."""

from __future__ import annotations

import json
import os

import pytest

from umbra.errors import ConfigError
from umbra.federation.client_app import dp_settings, node_settings
from umbra.federation.organizations import DEFAULT_DP_EPSILON, OrgSettings, read_organizations


def test_an_organizations_file_with_defaults_becomes_node_configs(tmp_path):
    for d in ("acme/src", "acme/lib", "globex", "bundles/g", "model"):
        (tmp_path / d).mkdir(parents=True)
    (tmp_path / "orgs.json").write_text(json.dumps([
        {"name": "acme", "data": ["acme/src", "acme/lib"], "internal_domains": "acme.com", "dp_epsilon": 4},
        {"name": "globex", "data": "globex", "bundle": "bundles/g", "service": "umbra-test", "threads": 2,
         "dp_epsilon": 0},
        {"name": "initech", "data": "globex"},
    ]))
    orgs = read_organizations(tmp_path / "orgs.json", OrgSettings(data=(), threads=1, dp_batch=16))
    assert list(orgs) == ["acme", "globex", "initech"]
    acme, globex, initech = (orgs[n].node_config(tmp_path / "model") for n in orgs)
    assert dp_settings(initech).epsilon == DEFAULT_DP_EPSILON == 8.0  # DP unless an organization opts out
    assert acme["data"] == os.pathsep.join(str(tmp_path / p) for p in ("acme/src", "acme/lib"))
    assert acme["internal-domains"] == "acme.com" and acme["threads"] == 1 and "bundle" not in acme
    dp = dp_settings(acme)
    assert (dp.epsilon, dp.expected_batch) == (4, 16)  # the default's batch, the file's ε
    assert globex["bundle"] == str(tmp_path / "bundles/g") and globex["keyring-service"] == "umbra-test"
    assert globex["threads"] == 2 and "dp-epsilon" not in globex and dp_settings(globex) is None
    back = node_settings(globex)
    assert back.bundle == tmp_path / "bundles/g" and back.keyring_service == "umbra-test" and back.threads == 2
    assert back.model == tmp_path / "model" and back.data == (tmp_path / "globex",)


def test_bad_organization_settings_are_refused(tmp_path):
    (tmp_path / "acme").mkdir()
    with pytest.raises(ConfigError, match="needs its code"):
        OrgSettings(data=()).node_config(tmp_path)
    with pytest.raises(ConfigError, match=">= 0"):
        OrgSettings(data=(str(tmp_path / "acme"),), dp_epsilon=-1).node_config(tmp_path)
    (tmp_path / "orgs.json").write_text(json.dumps([{"name": "a", "data": "acme", "threads": 1.5}]))
    with pytest.raises(ConfigError, match="threads must be a whole number"):
        read_organizations(tmp_path / "orgs.json")


def test_a_dp_setting_the_code_cannot_meet_is_refused_up_front():
    org = OrgSettings(data=("acme",), dp_batch=8, dp_delta=1e-3)
    org.check_dp(8)
    with pytest.raises(ConfigError, match=r"acme has 7 files.*--dp-batch.*--dp-epsilon 0"):
        org.check_dp(7, "acme")
    with pytest.raises(ConfigError, match=r"δ = 0.001 must be below 1/1000.*--dp-epsilon 0"):
        OrgSettings(data=("acme",), dp_batch=2, dp_delta=1e-3).check_dp(1000)
    OrgSettings(data=("acme",), dp_epsilon=0).check_dp(0)  # without DP any size goes
