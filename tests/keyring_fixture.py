"""A real Secret Service for the tests that touch the OS keyring (GNOME Keyring over D-Bus).

`secret_service` (session scope): if this process already reaches an unlocked Secret Service
(a desktop session), it is used as it is. Otherwise a private D-Bus session bus (without
service activation) and a `gnome-keyring-daemon --components=secrets` are started, the
daemon's login keyring created and unlocked with a random throwaway password (gnome-keyring
does not create a login keyring for an empty one) in a temporary XDG data directory, the
"default" alias pointed at the daemon's in-memory `session` collection (the same daemon and API
without rewriting a file at every change: _default_in_memory), and DBUS_SESSION_BUS_ADDRESS is
exported in os.environ so subprocesses (the `umbra` CLI under test) inherit it. Both daemons are
stopped and the directory removed at the end of the session. If that cannot work here the fixture FAILS and
names the Debian packages to install; it never skips.

`keystore` (function scope): a KeyStore over that service with a unique service name, emptied
after the test, so tests never touch a real user's "umbra" entries."""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from contextlib import closing
from pathlib import Path

import pytest

DEBIAN_PACKAGES = "dbus gnome-keyring"  # dbus-daemon, gnome-keyring-daemon
INSTALL_HINT = f"install the Debian packages: apt-get install -y {DEBIAN_PACKAGES}"
START_TIMEOUT_S = 60.0  # generous: CI machines can be heavily loaded


IN_MEMORY = "/org/freedesktop/secrets/collection/session"  # gnome-keyring's collection that is never written to disk

_BUS_CONFIG = """<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:dir={socket_dir}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
"""


def secret_service_usable() -> bool:
    """True if the session bus in os.environ has a Secret Service with an unlocked default
    collection. Never creates a collection (that would pop a prompt on a desktop)."""
    if not os.environ.get("DBUS_SESSION_BUS_ADDRESS"):
        return False
    try:
        import secretstorage
        from secretstorage.collection import Collection

        with closing(secretstorage.dbus_init()) as conn:
            if not secretstorage.check_service_availability(conn):
                return False
            return not Collection(conn).is_locked()  # the "default" alias
    except Exception:
        return False


class _PrivateSecretService:
    """dbus-daemon + gnome-keyring-daemon started for this test session."""

    def __init__(self):
        missing = [exe for exe in ("dbus-daemon", "gnome-keyring-daemon") if shutil.which(exe) is None]
        if missing:
            pytest.fail(f"no Secret Service reachable and {', '.join(missing)} not found; {INSTALL_HINT}", pytrace=False)
        self.dir = Path(tempfile.mkdtemp(prefix="umbra-keyring-"))
        self.dbus_pid: int | None = None
        self.keyring_proc: subprocess.Popen | None = None
        self.saved_address = os.environ.get("DBUS_SESSION_BUS_ADDRESS")
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> None:
        # Our own bus config: a session bus WITHOUT service activation. With the standard session
        # config, the first Secret Service call could D-Bus-activate a second, locked
        # gnome-keyring before ours claims the name ("another secret service is running").
        (self.dir / "bus").mkdir(mode=0o700)
        config = self.dir / "session-bus.conf"
        config.write_text(_BUS_CONFIG.format(socket_dir=self.dir / "bus"))
        out = subprocess.run(
            ["dbus-daemon", f"--config-file={config}", "--fork", "--print-address=1", "--print-pid=1"],
            capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL,
        )
        lines = out.stdout.split()
        if out.returncode != 0 or len(lines) < 2:
            pytest.fail(f"dbus-daemon --session failed ({out.stderr.strip()}); {INSTALL_HINT}", pytrace=False)
        address, self.dbus_pid = lines[0], int(lines[1])
        env = dict(os.environ, DBUS_SESSION_BUS_ADDRESS=address)
        for var in ("XDG_DATA_HOME", "XDG_RUNTIME_DIR", "XDG_CONFIG_HOME", "XDG_CACHE_HOME"):
            path = self.dir / var.lower()
            path.mkdir(mode=0o700)
            env[var] = str(path)
        log = open(self.dir / "gnome-keyring.log", "wb")
        self.keyring_proc = subprocess.Popen(
            ["gnome-keyring-daemon", "--foreground", "--unlock", "--components=secrets"],
            stdin=subprocess.PIPE, stdout=log, stderr=log, env=env,
        )
        log.close()
        self.keyring_proc.stdin.write(secrets.token_hex(16).encode())  # throwaway login password
        self.keyring_proc.stdin.close()
        os.environ["DBUS_SESSION_BUS_ADDRESS"] = address
        deadline = time.monotonic() + START_TIMEOUT_S
        while not secret_service_usable():
            if self.keyring_proc.poll() is not None or time.monotonic() > deadline:
                detail = (self.dir / "gnome-keyring.log").read_text(errors="replace").strip()
                pytest.fail(
                    f"gnome-keyring-daemon did not provide an unlocked Secret Service ({detail or 'no output'}); "
                    f"{INSTALL_HINT}",
                    pytrace=False,
                )
            time.sleep(0.1)
        self._default_in_memory()
        from keys.store import redetect_backend

        redetect_backend()  # keyring may have settled on the fail backend before the bus existed

    @staticmethod
    def _default_in_memory() -> None:
        """Point the "default" alias (what KeyStore and keyring use) at the daemon's in-memory
        `session` collection, before anything in this process opens a connection (Umbra's
        connection keeps the collection it resolved). gnome-keyring rewrites a file-backed
        collection's whole file at every change, and the tests write thousands of entries: on
        `login` 400 entries cost the daemon 10.6 CPU-s, on `session` 2.6; tests/securegate +
        tests/keys took 110.8 CPU-s on `login` and 79.3 on `session`, back to back (load 3-4).
        The daemon, its D-Bus API and every call are the same; only the throwaway file is gone."""
        import secretstorage
        from secretstorage.defines import SS_PATH, SS_PREFIX
        from secretstorage.util import DBusAddressWrapper

        with closing(secretstorage.dbus_init()) as conn:
            DBusAddressWrapper(SS_PATH, SS_PREFIX + "Service", conn).call("SetAlias", "so", "default", IN_MEMORY)

    def stop(self) -> None:
        if self.keyring_proc is not None and self.keyring_proc.poll() is None:
            self.keyring_proc.terminate()
            try:
                self.keyring_proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.keyring_proc.kill()
                self.keyring_proc.wait()
        if self.dbus_pid is not None:
            try:
                os.kill(self.dbus_pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        if self.saved_address is None:
            os.environ.pop("DBUS_SESSION_BUS_ADDRESS", None)
        else:
            os.environ["DBUS_SESSION_BUS_ADDRESS"] = self.saved_address
        shutil.rmtree(self.dir, ignore_errors=True)


_active: list[_PrivateSecretService] = []  # one per process even if several conftests import the fixture


def private_secret_service() -> bool:
    """True while this process's own throwaway Secret Service (started by `secret_service`) is the
    one in use: what the tests wrote into it is deleted with it at the end of the session."""
    return bool(_active)


@pytest.fixture(scope="session")
def secret_service():
    """Make sure an unlocked Secret Service is reachable; yields the bus address."""
    started = None
    if not secret_service_usable():
        started = _PrivateSecretService()
        _active.append(started)
    yield os.environ["DBUS_SESSION_BUS_ADDRESS"]
    if started is not None:
        _active.remove(started)
        started.stop()


def _fresh_keystore():
    """A KeyStore with a unique service name over the real Secret Service; emptied afterwards."""
    from keys import KeyStore

    store = KeyStore(service=f"umbra-test-{secrets.token_hex(6)}")
    yield store
    for name in store.list():
        store.delete(name)


@pytest.fixture
def keystore(secret_service):
    """A KeyStore with a unique service name over the real Secret Service; emptied afterwards."""
    yield from _fresh_keystore()


@pytest.fixture(scope="module")
def module_keystore(secret_service):
    """The same, shared by one test module (its bundles and servers outlive a single test)."""
    yield from _fresh_keystore()
