#!/usr/bin/env bash
# Shared by scripts/demo and scripts/test: system packages, a virtualenv, the project.
# Usage: source scripts/bootstrap.sh [extras]   (extras: "" or "dev")
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

SYSTEM_PACKAGES=(gnome-keyring dbus dbus-x11 libsecret-tools)
# The test extras drive the language server from a real Neovim (tests/editors/test_neovim.py) and
# balance two cloud replicas with a real nginx (tests/server/test_replicas.py: foreground, files in a temp dir).
[ "${1:-}" = dev ] && SYSTEM_PACKAGES+=(neovim nginx)
# ... and build and test the VS Code extension with Node.js 20+ and npm (tests/vscode_extension):
# Debian's own packages when neither command is there (Debian 13 ships Node 20; an installed Node,
# e.g. NodeSource's, which bundles npm, is left alone).
if [ "${1:-}" = dev ] && ! { command -v node && command -v npm; } >/dev/null 2>&1; then
    SYSTEM_PACKAGES+=(nodejs npm)
fi
# Installs the packages of "$@" (after an optional --no-install-recommends) that are not installed yet.
apt_install_missing() {
    local options=()
    [ "${1:-}" = --no-install-recommends ] && { options+=("$1"); shift; }
    local missing=() pkg attempt SUDO=""
    for pkg in "$@"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
    done
    ((${#missing[@]})) || return 0
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    # A fresh Debian machine often has apt busy (unattended-upgrades, another bootstrap): wait for
    # the dpkg lock, and retry the lists update, which takes no lock timeout, for a few minutes.
    for attempt in 1 2 3 4 5 6; do
        $SUDO apt-get update -qq && break
        [ "$attempt" -lt 6 ] || exit 1
        sleep 30
    done
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -o DPkg::Lock::Timeout=600 -y -qq "${options[@]}" \
        "${missing[@]}" >/dev/null
}
apt_install_missing "${SYSTEM_PACKAGES[@]}"
# The real-editor test (tests/editors/test_code_server.py) drives code-server in Debian's chromium,
# headless; code-server's kerberos module builds against libkrb5-dev (with g++ and make). Without
# recommends: they would add a desktop stack the headless browser does not use.
[ "${1:-}" = dev ] && apt_install_missing --no-install-recommends chromium libkrb5-dev g++ make

if [ "${1:-}" = dev ]; then
    node_major="$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)"
    if [ "$node_major" -lt 20 ]; then
        echo "bootstrap: the VS Code extension's tests need Node.js 20 or newer (found: $(node --version 2>/dev/null || echo none));" \
             "install it (Debian 13: apt install nodejs npm; older Debian: NodeSource's nodejs 20) and run again" >&2
        exit 1
    fi
    # ... and code-server, puppeteer-core and the Node 24 code-server needs, from npm, once (cached).
    source "$ROOT/scripts/editors_env.sh"
fi

PY="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PY" -m venv .venv
# shellcheck disable=SC1091
. .venv/bin/activate
extras="${1:-}"
spec="."; [ -n "$extras" ] && spec=".[${extras}]"
pip install -q --disable-pip-version-check torch==2.13.0
pip install -q --disable-pip-version-check -e "$spec"
