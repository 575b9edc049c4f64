"""server.launch: the real service as a subprocess (python -m server) over TLS with a one-time
token, and the `umbra cloud serve/cert` command line."""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import ssl
import subprocess
import sys
import time

import httpx
import pytest

from cloud_helpers import auth
from server.launch import local_cloud
from server.serve import add_serve_args, settings_from_args
from umbra.cli.main import main
from umbra.model.loader import Checkpoint
from umbra.model.parts import SplitPlan

MIDDLE = re.compile(r"^model\.layers\.(\d+)\.")


async def test_local_cloud_subprocess_tls_partition_and_shutdown(model_dir):
    plan = SplitPlan(2, 1)
    async with local_cloud(model_dir, plan, tls=True, settings={"debug_routes": True, "torch_threads": 1}) as cloud:
        base_url, token = cloud
        assert base_url.startswith("https://127.0.0.1:") and cloud.process.poll() is None
        assert cloud.token not in (cloud.workdir / "tokens.json").read_text()
        ctx = ssl.create_default_context(cafile=str(cloud.verify))
        async with httpx.AsyncClient(base_url=base_url, verify=ctx) as http:
            assert (await http.get("/healthz")).status_code == 200
            assert (await http.get("/v1/info")).status_code == 401
            loaded = (await http.get("/v1/debug/loaded", headers=auth(token))).json()
        async with httpx.AsyncClient(base_url=base_url) as untrusting:  # system CAs only
            with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                await untrusting.get("/healthz")
        process, workdir = cloud.process, cloud.workdir
    # what the cloud process holds: the middle blocks [2, 5) of 6 and nothing else
    assert loaded["layers"] == [2, 5]
    expected = {k for k in Checkpoint(model_dir).files if MIDDLE.match(k) and 2 <= int(MIDDLE.match(k)[1]) < 5}
    assert set(loaded["read_keys"]) == expected and len(loaded["state_dict"]) == len(expected)
    assert process.poll() is not None and not workdir.exists()  # stopped, private dir removed


def test_cert_command_and_serve_flags(tmp_path, capsys, monkeypatch):
    assert main(["cloud", "cert", "--out-dir", str(tmp_path), "--host", "cloud.example", "--host", "10.0.0.5"]) == 0
    assert "certificate:" in capsys.readouterr().out
    from cryptography import x509

    cert = x509.load_pem_x509_certificate((tmp_path / "cert.pem").read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["cloud.example"]
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["10.0.0.5"]
    assert oct((tmp_path / "key.pem").stat().st_mode & 0o777) == "0o600"

    monkeypatch.setenv("UMBRA_CLOUD_MAX_SEQ_LEN", "99")
    parser = argparse.ArgumentParser()
    add_serve_args(parser)
    args = parser.parse_args(["--model-dir", str(tmp_path), "--port", "0", "--tls-cert", str(tmp_path / "cert.pem"),
                              "--tls-key", str(tmp_path / "key.pem"), "--kv-budget-bytes", "1000"])
    s = settings_from_args(args)
    assert (s.port, s.kv_budget_bytes, s.max_seq_len, s.tls_key) == (0, 1000, 99, tmp_path / "key.pem")


def test_a_self_started_cloud_exits_when_its_launcher_is_killed(model_dir, tmp_path):
    """SIGKILL gives the launcher no chance to stop its cloud; the cloud notices it was re-parented."""
    script = tmp_path / "launcher.py"
    script.write_text(
        "import json, sys, time\n"
        "from server.launch import local_cloud_sync\n"
        f"with local_cloud_sync({str(model_dir)!r}, settings={{'torch_threads': 1}}) as cloud:\n"
        "    print(json.dumps({'pid': cloud.process.pid, 'url': cloud.base_url}), flush=True)\n"
        "    time.sleep(600)\n")
    launcher = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                                cwd=os.getcwd(), env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        info = json.loads(launcher.stdout.readline())
        assert httpx.get(info["url"] + "/healthz").status_code == 200
        launcher.send_signal(signal.SIGKILL)
        launcher.wait()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                os.kill(info["pid"], 0)
            except ProcessLookupError:
                break
            time.sleep(0.2)
        else:
            os.kill(info["pid"], signal.SIGKILL)
            pytest.fail("the cloud outlived its launcher by 30 s")
    finally:
        launcher.kill()
