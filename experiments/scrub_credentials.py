"""The scrubber benchmark's credential canaries (experiments/scrub_canaries.py gathers them with the
others): cloud and service tokens in their real formats (AWS, GitHub, Slack, Stripe), generic hex
and base64 tokens, JWTs, PEM keys, passwords in code and in config files, connection strings —
each a seeded generator rendering a realistic line of Python, Java or Go (or a config file) around
a random value, with the values it planted."""

from __future__ import annotations

import base64
import json
import string

from experiments.scrub_lines import (ALNUM, B64, COMPANIES, FIRST, HEX, ROLES, Canary, assign, call_kwarg, comment,
                                     internal_host_name, mapping, rand)


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
