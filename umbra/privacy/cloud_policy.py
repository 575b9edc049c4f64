"""Private by default (DESIGN invariant 6): the one rule that decides whether a client may send
its states to a cloud. `umbra/connect.py` applies it when a link starts, before anything is
sent, for `umbra complete`, `umbra tune`, `umbra lsp` and `umbra serve` alike.

    mode = mode_in_force(mode_of(model), url, allow=config.allow_undefended_remote_cloud)

* A cloud on this machine may receive anything: the cloud the client starts itself (`url` None),
  or a URL whose host is a loopback address literal (127.0.0.0/8, ::1, an IPv4-mapped loopback)
  or the name `localhost` (RFC 6761 reserves it for loopback). Other names count as NOT on this
  machine even when they resolve to loopback now: the check would need a lookup, and the HTTP
  client resolves again when it connects, so a name's answer at check time (DNS rebinding, a
  changed hosts file) is no promise about where the states go. So there are no lookups at all.
  A loopback URL is trusted to be this machine: a tunnel or proxy listening on loopback that
  forwards to another machine is the user's own choice of where states go.
* Any other cloud receives only a mode that is `offered` (umbra/privacy/mode.py): `defended`
  (measured, every attack, an adaptive one among them, within a point of the frequency baseline)
  and measured to complete above the client-blocks-alone control — a defended mode below it gives
  the user nothing for the cloud that client-only mode (no cloud at all) would not do better —
  unless the user opted in: the flag
  `--allow-undefended-remote-cloud`, the environment variable UMBRA_ALLOW_UNDEFENDED_REMOTE_CLOUD=1,
  the LSP initialization option `allowUndefendedRemoteCloud` (UMBRA_LOCAL_ALLOW_UNDEFENDED_REMOTE_CLOUD
  for `umbra serve`), or the VS Code setting `umbra.allowUndefendedRemoteCloud`. Otherwise the link
  is refused with UndefendedCloudRefused, naming the mode, why, and the opt-in. With the opt-in,
  the mode in force says so ("none — sent undefended by your setting"; a defended mode below the
  control: "… — sent by your setting")."""

from __future__ import annotations

import ipaddress
import os
from dataclasses import replace
from urllib.parse import urlsplit

from umbra.errors import ConfigError
from umbra.privacy.mode import PrivacyMode

OPT_IN_FLAG = "--allow-undefended-remote-cloud"
OPT_IN_ENV = "UMBRA_ALLOW_UNDEFENDED_REMOTE_CLOUD"
OPT_IN_OPTION = "allowUndefendedRemoteCloud"  # LSP initializationOptions (lsp/options.py)
OPT_IN_VSCODE = "umbra.allowUndefendedRemoteCloud"
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("", "0", "false", "no", "off")


class UndefendedCloudRefused(ConfigError):
    """A cloud not on this machine, a privacy mode that is not `offered` (not defended, or defended
    but completing below the client-blocks-alone control), and no opt-in."""


def on_this_machine(url: str | None) -> bool:
    """True for the self-started cloud (None) and for a URL whose host is a loopback literal or
    `localhost`; False for every other URL, names that resolve to loopback included (no lookups)."""
    if url is None:
        return True
    try:
        host = urlsplit(url.strip()).hostname
    except ValueError:
        return False
    if not host:
        return False
    host = host.rstrip(".").lower()
    if host == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])  # an IPv6 zone id names no other machine
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


def opted_in(setting: bool = False, environ: dict | None = None) -> bool:
    """The user's opt-in: the setting (flag, option), or UMBRA_ALLOW_UNDEFENDED_REMOTE_CLOUD=1 in
    the environment (1/true/yes/on; 0/false/no/off or unset: no; anything else a ConfigError)."""
    if setting:
        return True
    value = (os.environ if environ is None else environ).get(OPT_IN_ENV, "").strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ConfigError(f"{OPT_IN_ENV} must be 1 or 0, got {value!r}")


def mode_in_force(mode: PrivacyMode, url: str | None, allow: bool = False,
                  environ: dict | None = None) -> PrivacyMode:
    """The mode the link runs under: `mode` itself on this machine or when offered; marked
    `opted_in` when the user allowed sending it elsewhere anyway; else UndefendedCloudRefused."""
    if on_this_machine(url) or mode.offered:
        return mode
    if opted_in(allow, environ):
        return replace(mode, opted_in=True)
    raise UndefendedCloudRefused(_refusal(mode, url))


def _refusal(mode: PrivacyMode, url: str) -> str:
    """Why `mode` may not go to `url`, and the ways out: client-only mode, the cloud on this
    machine, or the opt-in."""
    m = mode.measured
    if mode.defended and m.below_control:
        verdict = (f"is not worth sending (it holds every attack measured but completes below the client-blocks-alone "
                   f"control, {m.top1:.1f} % vs {m.client_alone_top1:.1f} % next-token top-1: the client's own "
                   f"blocks complete better with no cloud at all")
    elif mode.defended:
        verdict = ("is not worth sending (it holds every attack measured, but its completions were not measured "
                   "against the client's blocks alone")
    elif m is None:
        verdict = "is not defended (nothing measured for it"
    else:
        by = f", by {m.strongest[0]}" if m.attacks else ""
        verdict = f"is not defended (the attack tables measured: {mode.summary.split(' · ', 1)[-1]}{by}"
    return (f"refusing to send hidden states to {url}, a cloud not on this machine: the privacy mode {mode.label!r} "
            f"{verdict}; docs/privacy/mode.md). Use client-only mode (--client-only, the VS Code setting "
            f"umbra.clientOnly), leave the cloud URL unset to run the cloud on this machine, or opt in to sending "
            f"the states anyway with {OPT_IN_FLAG}, {OPT_IN_ENV}=1, the option {OPT_IN_OPTION} or the VS Code "
            f"setting {OPT_IN_VSCODE}")
