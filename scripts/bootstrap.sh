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
missing=()
for pkg in "${SYSTEM_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

PY="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PY" -m venv .venv
# shellcheck disable=SC1091
. .venv/bin/activate
extras="${1:-}"
spec="."; [ -n "$extras" ] && spec=".[${extras}]"
pip install -q --disable-pip-version-check torch==2.13.0
pip install -q --disable-pip-version-check -e "$spec"
