"""The scrubber benchmark's canaries (experiments/scrubber.py): one seeded generator per form the
scrubber claims (GENERATORS: the credentials of experiments/scrub_credentials.py, and here e-mail
addresses, IPs, internal hosts and URLs, names) and per form it does not (OUTSIDE), each rendering
a realistic line of Python, Java or Go (or a config file) around a random value, with the values it
planted."""

from __future__ import annotations

import string
from collections.abc import Callable

from experiments.scrub_credentials import (aws_access_key_id, aws_secret_key, connection_string, generic_base64,
                                           generic_hex, github_token, jwt, password_code, password_config,
                                           password_value, pem_key, slack_token, stripe_key)
from experiments.scrub_lines import (ALNUM, COMPANIES, ENVS, FIRST, HEX, LAST, ORG_DOMAIN, ROLES, TLDS, Canary,
                                     assign, call_kwarg, comment, internal_host_name, rand)


# ---------------------------------------------------------------- e-mail addresses, IPs, hosts, URLs, names


def email_address(rng, lang):
    first, last = rng.choice(FIRST).lower(), rng.choice(LAST).lower()
    first = first.encode("ascii", "ignore").decode() or "x"
    last = "".join(c for c in last if c.isascii() and c.isalpha()) or "y"
    local = rng.choice((f"{first}.{last}", f"{first[0]}{last}", f"{first}_{last}{rng.randrange(100)}",
                        f"{first}+alerts", rng.choice(("oncall", "security", "billing-team"))))
    domain = rng.choice((f"{rng.choice(COMPANIES)}.{rng.choice(TLDS)}", ORG_DOMAIN, f"mail.{rng.choice(COMPANIES)}.com"))
    v = f"{local}@{domain}"
    form = rng.randrange(3)
    if form == 0:
        line = comment(lang, f"Contact: {v} for access")
    elif form == 1:
        line = assign(lang, ["alert", "email"], v, rng)
    else:
        line = call_kwarg(lang, "send_mail", "to", v)
    return Canary("e-mail address", [line], [v], "email")


def private_ipv4(rng) -> str:
    net = rng.randrange(4)
    if net == 0:
        return f"10.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(1, 255)}"
    if net == 1:
        return f"172.{rng.randrange(16, 32)}.{rng.randrange(256)}.{rng.randrange(1, 255)}"
    if net == 2:
        return f"192.168.{rng.randrange(256)}.{rng.randrange(1, 255)}"
    return f"100.{rng.randrange(64, 128)}.{rng.randrange(256)}.{rng.randrange(1, 255)}"


def ipv4(rng, lang):
    v = private_ipv4(rng)
    form = rng.randrange(4)
    if form == 0:
        line = assign(lang, ["db", "host"], v, rng)
    elif form == 1:
        line = assign(lang, ["metrics", "addr"], f"{v}:{rng.choice((8080, 9090, 5432, 6379))}", rng)
    elif form == 2:
        line = comment(lang, f"bastion is {v}, ask ops for a tunnel")
    else:
        line = assign(lang, ["allowed", "cidr"], f"{v}/32", rng)
    return Canary("private IPv4", [line], [v], "ip")


def ipv6(rng, lang):
    if rng.random() < 0.7:
        groups = ["fd" + rand(rng, HEX, 2)] + [rand(rng, HEX, 4) for _ in range(2)]
        tail = [rand(rng, HEX, rng.randrange(1, 5)) for _ in range(rng.randrange(1, 4))]
        v = ":".join(groups) + "::" + ":".join(tail) if rng.random() < 0.7 else \
            ":".join(groups + [rand(rng, HEX, 4) for _ in range(5)])
    else:
        v = "fe80::" + ":".join(rand(rng, HEX, 4) for _ in range(rng.randrange(1, 5)))
    form = rng.randrange(3)
    if form == 0:
        line = assign(lang, ["node", "addr"], v, rng)
    elif form == 1:
        line = assign(lang, ["endpoint"], f"[{v}]:{rng.choice((443, 8443, 9000))}", rng)
    else:
        line = comment(lang, f"peer {v} is the standby")
    return Canary("private IPv6", [line], [v], "ip")


def internal_host(rng, lang):
    v = internal_host_name(rng)
    if rng.random() < 0.1:
        v = v.upper()
    form = rng.randrange(3)
    if form == 0:
        line = assign(lang, ["cache", "host"], v, rng)
    elif form == 1:
        line = comment(lang, f"runs nightly on {v} (see runbook)")
    else:
        line = {"python": f'    sock.connect(("{v}", 6379))', "java": f'        Socket s = new Socket("{v}", 6379);',
                "go": f'\tconn, err := net.Dial("tcp", "{v}:6379")'}[lang]
    return Canary("internal host", [line], [v], "host")


def internal_url(rng, lang):
    form = rng.randrange(4)
    path = "/" + "/".join(rand(rng, string.ascii_lowercase, rng.randrange(3, 9)) for _ in range(rng.randrange(1, 4)))
    if form == 0:
        v = f"https://{internal_host_name(rng)}{path}"
    elif form == 1:
        v = f"http://{private_ipv4(rng)}:{rng.choice((80, 8080, 9000))}{path}"
    elif form == 2:
        v = f"http://{rng.choice(('jenkins', 'grafana', 'kibana', 'nexus', 'gitlab', 'sonar'))}:{rng.choice((3000, 8080, 9000))}{path}"
    else:
        v = f"https://wiki.{ORG_DOMAIN}{path}?id={rng.randrange(10 ** 5)}"
    line = assign(lang, ["status", "url"], v, rng) if rng.random() < 0.6 else comment(lang, f"design doc: {v}")
    return Canary("internal URL", [line], [v], "url")


def person(rng) -> str:
    name = f"{rng.choice(FIRST)} {rng.choice(LAST)}"
    if rng.random() < 0.2:
        parts = name.split(" ", 1)
        name = f"{parts[0]} {rng.choice(string.ascii_uppercase)}. {parts[1]}"
    return name


def name_author(rng, lang):
    v = person(rng)
    form = rng.randrange(4)
    if form == 0 or lang == "java":
        line = f" * @author {v}"
    elif form == 1 and lang == "python":
        line = f'__author__ = "{v}"'
    elif form == 2:
        line = comment(lang, f"Author: {v}")
    else:
        line = comment(lang, f"Signed-off-by: {v} <{rng.choice(FIRST).lower()[:1]}x@{ORG_DOMAIN}>")
    return Canary("name (author tag)", [line], [v], "name")


def name_copyright(rng, lang):
    v = person(rng)
    year = rng.randrange(1995, 2026)
    text = rng.choice((f"Copyright (c) {year} {v}", f"Copyright {year}-{year + 2} {v}. All rights reserved.",
                       f"Copyright (C) {year} {v} <{rng.choice(COMPANIES)}@{ORG_DOMAIN}>",
                       f"Copyright © {year}, {v}"))
    return Canary("name (copyright)", [comment(lang, text)], [v], "name")


def name_todo(rng, lang):
    first, last = rng.choice(FIRST), rng.choice(LAST)
    handle = "".join(c for c in (first[0] + last).lower() if c.isascii() and c.isalnum())
    v = rng.choice((handle, first.lower().encode("ascii", "ignore").decode() or handle, f"{handle}{rng.randrange(10)}"))
    tag = rng.choice(("TODO", "FIXME", "XXX"))
    return Canary("name (TODO)", [comment(lang, f"{tag}({v}): handle the retry path")], [v], "name")


# ---------------------------------------------------------------- (5) outside the claims (expected misses)

def positional_token(rng, lang):
    v = rand(rng, HEX, 32)
    line = {"python": f'client = Client("{v}")', "java": f'        Client c = new Client("{v}");',
            "go": f'\tc := NewClient("{v}")'}[lang]
    return Canary("token passed positionally, no credential name", [line], [v], "secret")


def unnamed_password(rng, lang):
    v = password_value(rng)
    return Canary("password in a variable not named like one", [assign(lang, rng.choice((["pw"], ["db", "creds"],
                                                                                         ["login", "word"])), v, rng)],
                  [v], "secret")


def split_key(rng, lang):
    v = "AKIA" + rand(rng, string.ascii_uppercase + "234567", 16)
    line = {"python": f'KEY = "{v[:10]}" + "{v[10:]}"', "java": f'    static final String KEY = "{v[:10]}" + "{v[10:]}";',
            "go": f'const key = "{v[:10]}" + "{v[10:]}"'}[lang]
    return Canary("AWS key id split across two literals", [line], [v[:10], v[10:]], "secret")


def short_token(rng, lang):
    v = rand(rng, ALNUM, rng.randrange(8, 16))
    return Canary("token shorter than 16 characters", [assign(lang, ["api", "token"], v, rng)], [v], "secret")


def bare_label_host(rng, lang):
    v = f"{rng.choice(ROLES)}-{rng.choice(ENVS)}-{rng.randrange(1, 40)}"
    return Canary("one-label host outside a URL", [assign(lang, ["db", "host"], v, rng)], [v], "host")


def prose_name(rng, lang):
    v = person(rng)
    return Canary("name in free prose", [comment(lang, f"ask {v} before changing the retry policy")], [v], "name")


def public_ip(rng, lang):
    v = f"{rng.choice((34, 35, 52, 54, 104, 151))}.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(1, 255)}"
    return Canary("the organization's public IP (kept by design)", [assign(lang, ["gateway", "ip"], v, rng)], [v], "ip")


OUTSIDE: dict[str, Callable] = {
    "token passed positionally, no credential name": positional_token,
    "password in a variable not named like one": unnamed_password,
    "AWS key id split across two literals": split_key,
    "token shorter than 16 characters": short_token,
    "one-label host outside a URL": bare_label_host,
    "name in free prose": prose_name,
    "the organization's public IP (kept by design)": public_ip,
}


GENERATORS: dict[str, Callable] = {
    "AWS access key id": aws_access_key_id, "AWS secret access key": aws_secret_key, "GitHub token": github_token,
    "Slack token / webhook": slack_token, "Stripe key": stripe_key, "generic hex token": generic_hex,
    "generic base64 token": generic_base64, "JWT": jwt, "PEM private key": pem_key, "password in code": password_code,
    "password in config": password_config, "connection string": connection_string, "e-mail address": email_address,
    "private IPv4": ipv4, "private IPv6": ipv6, "internal host": internal_host, "internal URL": internal_url,
    "name (author tag)": name_author, "name (copyright)": name_copyright, "name (TODO)": name_todo,
}
