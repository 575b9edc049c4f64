#!/usr/bin/env bash
# The federation extra (Flower) in its own environment: `.venv-federation`, an overlay on `.venv`.
# Flower pins fastapi/starlette/uvicorn/rich/typer/packaging below what Umbra runs with, so it
# must not go into `.venv`. The overlay's site-packages come first and `.venv`'s after them (a
# .pth line), so torch, umbra (editable) and the rest come from `.venv` and only Flower and the
# versions it pins come from here. Source after scripts/bootstrap.sh; prints nothing.
# Usage: source scripts/federation_env.sh   (then .venv-federation/bin/python, flwr, flower-*)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BASE_SITE="$("$ROOT/.venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
if [ ! -x "$ROOT/.venv-federation/bin/pip" ]; then
    "$ROOT/.venv/bin/python" -m venv "$ROOT/.venv-federation"
    # its own old setuptools would shadow .venv's (torch wants a newer one)
    "$ROOT/.venv-federation/bin/python" -m pip uninstall -q -y setuptools >/dev/null 2>&1 || true
fi
FED_SITE="$("$ROOT/.venv-federation/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
echo "import site; site.addsitedir('$BASE_SITE')" > "$FED_SITE/zz_umbra_base.pth"
# the pin lives in pyproject.toml's `federation` extra. The overlay's own pip sees .venv's packages
# (through the .pth line) and installs into the overlay only what Flower needs at other versions.
FLWR_PIN="$("$ROOT/.venv/bin/python" - "$ROOT/pyproject.toml" <<'PY'
import sys, tomllib
print(" ".join(tomllib.load(open(sys.argv[1], "rb"))["project"]["optional-dependencies"]["federation"]))
PY
)"
# installed and at the pinned version (the pin's extras, e.g. [simulation] for Ray, stripped to compare)
"$ROOT/.venv-federation/bin/python" -c 'import flwr, ray' 2>/dev/null && \
    [ "$("$ROOT/.venv-federation/bin/python" -c 'from importlib.metadata import version; print("flwr==" + version("flwr"))')" = "$(echo "$FLWR_PIN" | sed 's/\[[^]]*\]//')" ] || \
    "$ROOT/.venv-federation/bin/python" -m pip install -q --disable-pip-version-check $FLWR_PIN 2>&1 \
        | { grep -v "^WARNING: Location" || true; }
