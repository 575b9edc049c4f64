"""The scrubber benchmark's canaries (experiments/scrubber.py): one seeded generator per form the
scrubber claims (GENERATORS) and per form it does not (OUTSIDE), each rendering a realistic line
of Python, Java or Go (or a config file) around a random value, with the values it planted."""

from __future__ import annotations

import base64
import json
import string
from collections.abc import Callable

from experiments.scrub_lines import (ALNUM, B64, COMPANIES, ENVS, FIRST, HEX, LAST, ORG_DOMAIN, ROLES, SUFFIXES, TLDS, Canary, assign,
                         call_kwarg, comment, mapping, rand)


# ---------------------------------------------------------------- canary generators (one per kind)

def aws_access_key_id(rng, lang):
    v = rng.choice(("AKIA", "ASIA")) + rand(rng, string.ascii_uppercase + "234567", 16)
    form = rng.randrange(3)
    if form == 0:
        line = assign(lang, ["aws", "access", "key", "id"], v, rng)
    elif form == 1:
        line = call_kwarg(lang, "boto3.client", "aws_access_key_id", v)
    else:
        line = comment(lang, f"deploy user key {v} (rotate quarterly)")
    return Canary("AWS access key id", [line], [v], "secret")


def aws_secret_key(rng, lang):
    v = rand(rng, ALNUM + "/+", 40)
    form = rng.randrange(3)
    if form == 0:
        line = assign(lang, ["aws", "secret", "access", "key"], v, rng)
    elif form == 1:
        line = call_kwarg(lang, "boto3.client", "aws_secret_access_key", v)
    else:
        line = assign(lang, rng.choice([["secret", "key"], ["s3", "secret"], ["aws", "secret"]]), v, rng)
    return Canary("AWS secret access key", [line], [v], "secret")


def github_token(rng, lang):
    if rng.random() < 0.7:
        v = rng.choice(("ghp_", "gho_", "ghs_")) + rand(rng, ALNUM, 36)
    else:
        v = "github_pat_" + rand(rng, ALNUM, 22) + "_" + rand(rng, ALNUM, 59)
    form = rng.randrange(3)
    if form == 0:
        line = assign(lang, ["github", "token"], v, rng)
    elif form == 1:
        line = mapping(lang, "Authorization", f"token {v}")
    else:
        line = assign(lang, ["repo", "url"], f"https://{v}@github.com/northwind/billing.git", rng)
    return Canary("GitHub token", [line], [v], "secret")


def slack_token(rng, lang):
    if rng.random() < 0.75:
        v = f"xox{rng.choice('bpa')}-{rand(rng, string.digits, 12)}-{rand(rng, string.digits, 13)}-{rand(rng, ALNUM, 24)}"
    else:
        v = f"https://hooks.slack.com/services/T{rand(rng, string.ascii_uppercase + string.digits, 8)}/" \
            f"B{rand(rng, string.ascii_uppercase + string.digits, 10)}/{rand(rng, ALNUM, 24)}"
    return Canary("Slack token / webhook", [assign(lang, rng.choice([["slack", "token"], ["slack", "webhook"],
                                                                       ["alerts", "hook"]]), v, rng)], [v], "secret")


def stripe_key(rng, lang):
    v = rng.choice(("sk_live_", "rk_live_")) + rand(rng, ALNUM, rng.choice((24, 24, 99)))
    line = assign(lang, ["stripe", "api", "key"], v, rng) if rng.random() < 0.6 else call_kwarg(
        lang, "stripe.Client", "api_key", v)
    return Canary("Stripe key", [line], [v], "secret")


CREDENTIAL_NAMES = (["api", "token"], ["auth", "token"], ["client", "secret"], ["secret", "key"], ["access", "token"],
                    ["session", "secret"], ["signing", "key"], ["webhook", "secret"], ["private", "token"],
                    ["api", "key"], ["refresh", "token"], ["service", "token"], ["app", "secret"])


def generic_hex(rng, lang):
    v = rand(rng, HEX, rng.choice((32, 40, 48, 64)))
    return Canary("generic hex token", [assign(lang, rng.choice(CREDENTIAL_NAMES), v, rng)], [v], "secret")


def generic_base64(rng, lang):
    n = rng.choice((24, 32, 40, 44, 64))
    v = rand(rng, ALNUM + rng.choice(("+/", "-_")), n)
    if rng.random() < 0.3:
        v = v[:-1] + "="
    return Canary("generic base64 token", [assign(lang, rng.choice(CREDENTIAL_NAMES), v, rng)], [v], "secret")


def jwt(rng, lang):
    def b64(obj) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj, separators=(",", ":")).encode()).rstrip(b"=").decode()
    header = b64({"alg": rng.choice(("HS256", "RS256")), "typ": "JWT"})
    payload = b64({"sub": rand(rng, string.digits, 8), "name": rng.choice(FIRST), "iat": rng.randrange(1_600_000_000, 1_800_000_000)})
    v = f"{header}.{payload}.{rand(rng, ALNUM + '-_', 43)}"
    line = assign(lang, ["id", "token"], v, rng) if rng.random() < 0.5 else mapping(lang, "Authorization", f"Bearer {v}")
    return Canary("JWT", [line], [v], "secret")


def pem_key(rng, lang):
    label = rng.choice(("RSA PRIVATE KEY", "PRIVATE KEY", "EC PRIVATE KEY", "OPENSSH PRIVATE KEY",
                        "ENCRYPTED PRIVATE KEY"))
    body = [rand(rng, B64, 64) for _ in range(rng.randrange(4, 12))] + [rand(rng, B64, rng.randrange(8, 60)) + "=="]
    pem = [f"-----BEGIN {label}-----", *body, f"-----END {label}-----"]
    if lang == "python":
        lines = ['PRIVATE_KEY = """' + pem[0], *pem[1:-1], pem[-1] + '"""']
    elif lang == "java":
        lines = ['    private static final String KEY =',
                 *[f'        "{p}\\n" +' for p in pem[:-1]], f'        "{pem[-1]}\\n";']
    else:
        lines = ["const privateKey = `" + pem[0], *pem[1:-1], pem[-1] + "`"]
    return Canary("PEM private key", lines, body, "secret")


def password_value(rng) -> str:
    form = rng.randrange(3)
    if form == 0:
        return rng.choice(("Summer", "Winter", "Dragon", "Monkey", "Shadow", "Falcon")) + str(rng.randrange(1970, 2030)) \
            + rng.choice("!#$%&*")
    if form == 1:
        return rand(rng, ALNUM + "!@#%^&*-_", rng.randrange(10, 24))
    return "-".join(rng.choice(("correct", "horse", "battery", "staple", "orbit", "lemon", "tiger")) for _ in range(3)) \
        + str(rng.randrange(10, 99))


def password_code(rng, lang):
    v = password_value(rng)
    form = rng.randrange(4)
    if form == 0:
        line = assign(lang, rng.choice((["db", "password"], ["password"], ["admin", "pass"], ["smtp", "pwd"])), v, rng)
    elif form == 1:
        line = call_kwarg(lang, "psycopg2.connect", "password", v)
    elif form == 2:
        line = mapping(lang, "password", v) if lang != "go" else f'\tlogin := Credentials{{User: "svc", Password: "{v}"}}'
    else:
        line = {"python": f'def connect(user: str = "svc", password: str = "{v}"):',
                "java": f'    public static final String DB_PASSWORD = "{v}";',
                "go": f'\tdbPassword := "{v}"'}[lang]
    return Canary("password in code", [line], [v], "secret")


CONFIG_FORMATS = ("env", "yaml", "properties", "ini", "toml")


def password_config(rng, _lang):
    v = password_value(rng)
    fmt = rng.choice(CONFIG_FORMATS)
    line = {"env": f"DB_PASSWORD={v}", "yaml": f"  password: {v}", "properties": f"spring.datasource.password={v}",
            "ini": f"password = {v}", "toml": f'password = "{v}"'}[fmt]
    return Canary("password in config", [line], [v], "secret")


def connection_string(rng, lang):
    user = rng.choice(("app", "svc_billing", "admin", "etl", "report_ro", "root"))
    pw = rand(rng, ALNUM, rng.randrange(10, 20)) + rng.choice(("", "!", "-x", "_9"))
    internal = rng.random() < 0.5
    host = internal_host_name(rng) if internal else \
        f"{rng.choice(ROLES)}-{rng.randrange(1, 20)}.{rng.choice(COMPANIES)}.{rng.choice(('com', 'io', 'net'))}"
    form = rng.randrange(7)
    if form == 0:
        v, secret = f"postgresql://{user}:{pw}@{host}:5432/orders", f"{user}:{pw}"
    elif form == 1:
        v, secret = f"mysql://{user}:{pw}@{host}:3306/shop?charset=utf8mb4", f"{user}:{pw}"
    elif form == 2:
        v, secret = f"mongodb+srv://{user}:{pw}@{host}/events?retryWrites=true", f"{user}:{pw}"
    elif form == 3:
        v, secret = f"redis://:{pw}@{host}:6379/0", pw
    elif form == 4:
        v, secret = f"jdbc:mysql://{host}:3306/billing?user={user}&password={pw}&useSSL=true", pw
    elif form == 5:
        v, secret = f"jdbc:sqlserver://{host}:1433;databaseName=crm;user={user};password={pw};encrypt=true", pw
    else:
        v, secret = f"Server={host};Database=crm;User Id={user};Password={pw};", pw
        internal = False  # no URL: the password alone is replaced
    return Canary("connection string", [assign(lang, ["database", "url"], v, rng)], [secret],
                  "url" if internal else "secret")


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


def internal_host_name(rng) -> str:
    role = f"{rng.choice(ROLES)}{rng.choice(('', '-' + str(rng.randrange(1, 40)), str(rng.randrange(1, 9))))}"
    if rng.random() < 0.25:
        return f"{role}.{rng.choice(ENVS)}.{ORG_DOMAIN}"
    middle = rng.choice(("", rng.choice(ENVS) + ".", rng.choice(ENVS) + "." + rng.choice(COMPANIES) + "."))
    return f"{role}.{middle}{rng.choice(SUFFIXES)}"


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
