"""How well the scrubber (umbra/scrub/) finds what it claims, and what else it takes.

    python experiments/scrubber.py [--per-kind 200] [--seed 0] [--corpus data/corpus] [--quick]

(1) Recall on planted canaries. For every kind of thing the scrubber claims, `--per-kind` random
values (seeded) are written into a realistic line of the host file's language — assignments,
call arguments, dicts, struct fields, comments, Javadoc, config files — and the line is inserted
into a window of `--window` lines of an ordinary code file of the corpus test split
(`data/corpus/test/*.jsonl`; python, java, go). A canary is *caught* when its whole value is gone
from the scrubbed text and the expected placeholder stands where it was (one finding of the
expected kind covers it); *gone* when the value is gone under any placeholder(s). Each scrubbed
window is scrubbed again: a second pass must find nothing (idempotence).

(2) False positives on ordinary code: findings per 1,000 lines, per kind, on the whole corpus test
split. Public code holds real personal data (authors' names and e-mails in license headers and
Javadoc) and test fixtures shaped like credentials (`scott:tiger@`), so these are findings, not
all errors; docs/scrubber.md says which are which.

(3) Look-alikes: seeded families of strings that resemble what the scrubber takes but are not
(hashes, UUIDs, version strings, base64 test vectors, localhost, example.com, decorators,
`user@` prompts, public IPs, attribute chains, ...), each line scrubbed alone: fraction flagged.

(4) The SecureGate evaluation's own canaries (umbra.evaluation.canaries, planted in the test split):
fraction whose value is gone under the oracle's placeholder.

Prints markdown (docs/scrubber.md)."""

from __future__ import annotations

import argparse
import base64
import random
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: `benchmarks`, `experiments`

from benchmarks.machine import describe  # noqa: E402
from experiments.scrub_canaries import GENERATORS, OUTSIDE  # noqa: E402
from experiments.scrub_credentials import CONFIG_FORMATS  # noqa: E402
from experiments.scrub_lines import ALNUM, B64, COMPANIES, FIRST, HEX, LANGS, ORG_DOMAIN, Canary, rand  # noqa: E402
from umbra.data.corpus import Document, read_split  # noqa: E402
from umbra.evaluation.canaries import CanaryConfig, plant_canaries  # noqa: E402
from umbra.paths import repo_root  # noqa: E402
from umbra.scrub import KINDS, ScrubConfig, Scrubber  # noqa: E402
from umbra.scrub.findings import line_starts, offset_of  # noqa: E402

# ---------------------------------------------------------------- (1) recall

def windows_of(docs: list[Document], size: int, rng: random.Random) -> Callable[[str], list[str]]:
    by_lang = defaultdict(list)
    for d in docs:
        lines = d.text.split("\n")
        if len(lines) > size:
            by_lang[d.lang].append(lines)

    def draw(lang: str) -> list[str]:
        lines = rng.choice(by_lang[lang])
        start = rng.randrange(len(lines) - size)
        return lines[start:start + size]
    return draw


def config_window(fmt: str, rng: random.Random) -> tuple[list[str], str]:
    """A small config file of the format (ordinary keys) and its name."""
    keys = [("log_level", "info"), ("port", str(rng.randrange(1024, 65535))), ("workers", str(rng.randrange(1, 32))),
            ("region", "eu-west-1"), ("timeout", "30s"), ("feature_flags", "search,export")]
    rng.shuffle(keys)
    if fmt == "env":
        return [f"{k.upper()}={v}" for k, v in keys], ".env"
    if fmt == "yaml":
        return ["service:"] + [f"  {k}: {v}" for k, v in keys], "config.yaml"
    if fmt == "properties":
        return [f"app.{k}={v}" for k, v in keys], "application.properties"
    if fmt == "ini":
        return ["[server]"] + [f"{k} = {v}" for k, v in keys], "settings.ini"
    return ["[server]"] + [f'{k} = "{v}"' for k, v in keys], "pyproject.toml"


def recall(scrubber: Scrubber, docs: list[Document], per_kind: int, window: int, seed: int,
           generators: dict[str, Callable]) -> tuple[list, int]:
    rng = random.Random(seed)
    draw = windows_of(docs, window, rng)
    ext = {"python": "py", "java": "java", "go": "go"}
    rows, not_idempotent = [], 0
    for kind, gen in generators.items():
        caught = gone = still = 0
        for i in range(per_kind):
            lang = LANGS[i % 3]
            canary = gen(rng, lang)
            if kind == "password in config":
                host_lines, name = config_window(CONFIG_FORMATS[i % len(CONFIG_FORMATS)], rng)
                name = canary_config_name(canary, name)
            else:
                host_lines, name = draw(lang), f"file.{ext[lang]}"
            at = rng.randrange(len(host_lines) + 1)
            text = "\n".join(host_lines[:at] + canary.lines + host_lines[at:]) + "\n"
            result = scrubber.scrub(text, path=name)
            if scrubber.scrub(result.text, path=name).findings:
                not_idempotent += 1
            ok_exact, ok_any = judge(text, canary, at, host_lines, result)
            caught += ok_exact
            gone += ok_any
            still += any(v in result.text for v in canary.values)
        rows.append((kind, per_kind, caught, gone, still))
    return rows, not_idempotent


def canary_config_name(canary: Canary, default: str) -> str:
    line = canary.lines[0]
    if line.startswith("DB_PASSWORD="):
        return ".env"
    if line.startswith("  password:"):
        return "config.yaml"
    if line.startswith("spring."):
        return "application.properties"
    if line.startswith("password = \""):
        return "pyproject.toml"
    return "settings.ini"


def judge(text: str, canary: Canary, at: int, host_lines: list[str], result) -> tuple[bool, bool]:
    """(caught: every value covered by one finding of the expected kind and gone from the output;
    gone: every value covered by findings of any kind and gone from the output)."""
    starts = line_starts(text)
    spans = [(offset_of(f, starts), offset_of(f, starts) + f.length, f.kind) for f in result.findings]
    block_start = sum(len(line) + 1 for line in host_lines[:at])
    block = "\n".join(canary.lines)
    exact = anyk = True
    for value in canary.values:
        pos = block.find(value)
        while pos != -1:
            a, b = block_start + pos, block_start + pos + len(value)
            exact &= any(s <= a and b <= e and k == canary.expected for s, e, k in spans)
            covered = sorted((s, e) for s, e, _ in spans if e > a and s < b)
            reach = a
            for s, e in covered:
                if s <= reach:
                    reach = max(reach, e)
            anyk &= reach >= b
            pos = block.find(value, pos + 1)
        if value in result.text:
            exact = anyk = False
    return exact, anyk


# ---------------------------------------------------------------- (2) findings on ordinary code

def corpus_findings(scrubber: Scrubber, docs: list[Document]) -> tuple[Counter, Counter, int]:
    per_kind, files_with = Counter(), Counter()
    lines = 0
    for d in docs:
        lines += d.text.count("\n") + 1
        counts = scrubber.scrub(d.text, path=d.path).counts()
        per_kind.update(counts)
        files_with.update(k for k, n in counts.items() if n)
    return per_kind, files_with, lines


# ---------------------------------------------------------------- (3) look-alikes

def lookalikes(rng: random.Random, n: int) -> dict[str, list[tuple[str, str]]]:
    """family -> [(line, file name)]: things the scrubber must leave alone."""
    fams: dict[str, Callable[[], tuple[str, str]]] = {
        "git SHA / sha256 / md5 in code": lambda: (rng.choice((
            f'COMMIT = "{rand(rng, HEX, 40)}"', f'sha256 = "{rand(rng, HEX, 64)}"',
            f'self.assertEqual(h.hexdigest(), "{rand(rng, HEX, 32)}")', f"# fixed in {rand(rng, HEX, 40)}",
            f'want := "{rand(rng, HEX, 64)}"', f'expected_digest = "{rand(rng, HEX, 40)}"')), "f.py"),
        "UUID": lambda: (rng.choice((f'request_id = "{uuid(rng)}"', f'NAMESPACE = UUID("{uuid(rng)}")',
                                     f'String id = "{uuid(rng)}";')), "f.py"),
        "version strings": lambda: (rng.choice((
            f'version = "{rng.randrange(1, 20)}.{rng.randrange(20)}.{rng.randrange(20)}.{rng.randrange(99)}"',
            f'__version__ = "10.{rng.randrange(10)}.{rng.randrange(10)}.{rng.randrange(1, 9)}"',
            f"VERSION = ({rng.randrange(1, 20)}, {rng.randrange(9)}, {rng.randrange(9)})",
            f'release = "v{rng.randrange(1, 12)}.{rng.randrange(20)}.{rng.randrange(20)}"',
            f"requires = ['pkg>={rng.randrange(1, 5)}.{rng.randrange(20)}.{rng.randrange(20)}']")), "f.py"),
        "base64 test vectors": lambda: (rng.choice((
            f'expected = "{base64.b64encode(rand(rng, ALNUM, 30).encode()).decode()}"',
            f'self.assertEqual(base64.b64encode(data), b"{base64.b64encode(rand(rng, ALNUM, 24).encode()).decode()}")',
            f'ICON_PNG = "iVBORw0KGgo{rand(rng, B64, 60)}"',
            f'{{in: "{rand(rng, ALNUM, 12)}", out: "{base64.b64encode(rand(rng, ALNUM, 18).encode()).decode()}"}},')),
            "f.py"),
        "localhost / loopback / 0.0.0.0": lambda: (rng.choice((
            f'URL = "http://localhost:{rng.randrange(1024, 9999)}/api"', 'HOST = "127.0.0.1"', 'bind = "0.0.0.0"',
            f'addr = "[::1]:{rng.randrange(1024, 9999)}"', 'if host in ("localhost", "127.0.0.1", "::1"):')), "f.py"),
        "example.com names": lambda: (rng.choice((
            f'EMAIL = "{rng.choice(FIRST).lower()}@example.com"', 'url = "https://example.org/path"',
            'host = "api.example.net"', '# see https://www.example.com/docs')), "f.py"),
        "decorators and annotations": lambda: (rng.choice((
            "@property", "@pytest.fixture(scope=\"module\")", "    @Override", "@functools.lru_cache(maxsize=None)",
            "@SuppressWarnings(\"unchecked\")", "{@link java.util.List}", "@dataclass(frozen=True)")), "f.py"),
        "user@ prompts, matrix products, package pins": lambda: (rng.choice((
            'PS1 = "user@"', 'prompt = "root@host:~# "', "y = x @ self.weight", "z = a@b.T",
            'npm install left-pad@1.3.0', 'REMOTE = "git@github.com:org/repo.git"')), "f.py"),
        "public IPs and documentation ranges": lambda: (rng.choice((
            'DNS = "8.8.8.8"', 'RESOLVER = "1.1.1.1"', f'TEST_NET = "192.0.2.{rng.randrange(1, 255)}"',
            f'addr = "203.0.113.{rng.randrange(1, 255)}"', 'v6 = "2001:4860:4860::8888"', 'doc = "2001:db8::1"',
            'OID = "1.2.840.113549.1.1.1"', 'mac = "00:1b:44:11:3a:b7"', 'ts = "12:30:45"')), "f.py"),
        "attribute chains and Java packages": lambda: (rng.choice((
            "tl = threading.local()", "if options.local:", "import jdk.internal.misc.Unsafe;",
            "package com.acme.billing.internal;", "return self.local", "class Ctx(threading.local):",
            "x = obj.private")), rng.choice(("f.py", "F.java"))),
        "public URLs": lambda: (rng.choice((
            "# https://github.com/python/cpython/issues/12345", 'URL = "https://pypi.org/simple/"',
            '// See https://go.dev/issue/1234', 'DOCS = "https://docs.python.org/3/library/os.html"')), "f.py"),
        "secret-named non-secrets": lambda: (rng.choice((
            'password = os.environ["DB_PASSWORD"]', 'password = getpass.getpass("Password: ")',
            'TOKEN_TYPE = "bearer"', 'SECRET_NAME = "prod/db/credentials"', 'password_field = "password"',
            'if not password:', 'String pw = System.getenv("PW");', 'token := os.Getenv("TOKEN")',
            'API_KEY_HEADER = "X-Api-Key"')), "f.py"),
        "organisations in copyright lines": lambda: (rng.choice((
            "// Copyright 2009 The Go Authors. All rights reserved.",
            " * Copyright (c) 1997, 2021, Oracle and/or its affiliates. All rights reserved.",
            "# Copyright (c) 2001-2023 Python Software Foundation", "# Copyright 2020 Google LLC",
            "# Copyright (c) Twisted Matrix Laboratories.", "# @generated by protoc")), "f.py"),
        # Known false-positive modes, kept in the table on purpose: what the rules take by design.
        "known FP modes: credential-named fixtures, cache keys, message ids, one-label URLs, property names": lambda: (
            rng.choice((
                f'self.client.login(username="admin", password="{rng.choice(("secret", "password", "pw123"))}")',
                f'cache_key = "{rand(rng, HEX, 32)}"',
                f'MSG_ID = "<{uuid(rng)}@mail.{rng.choice(COMPANIES)}.com>"',
                f'PROXY = "http://{rng.choice(("buildbox", "squid", "devbox"))}:3128"',
                '        String prop = "spring.cache.local";')), "f.py"),
    }
    return {name: [make() for _ in range(n)] for name, make in fams.items()}


def uuid(rng: random.Random) -> str:
    h = rand(rng, HEX, 32)
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-a{h[17:20]}-{h[20:]}"


# ---------------------------------------------------------------- (4) the SecureGate evaluation's canaries

def evaluation_canaries(scrubber: Scrubber, docs: list[Document], seed: int) -> list[tuple]:
    """Per canary kind: (planted occurrences, occurrences covered by a span of the oracle's kind)."""
    planted = plant_canaries(docs, CanaryConfig(seed=seed))
    kind_of = {"api_key": "secret", "host": "host", "email": "email"}
    by_path = {d.path: d for d in planted.documents}
    by_kind = defaultdict(lambda: [0, 0])
    for canary in planted.canaries:
        for path in canary.files:
            text = by_path[path].text
            spans = scrubber.spans(text, path=path)
            pos = text.find(canary.value)
            while pos != -1:
                end = pos + len(canary.value)
                by_kind[canary.kind][0] += 1
                by_kind[canary.kind][1] += any(s.start <= pos and end <= s.end and s.kind == kind_of[canary.kind]
                                               for s in spans)
                pos = text.find(canary.value, end)
    return [(kind, n, ok) for kind, (n, ok) in sorted(by_kind.items())]


# ---------------------------------------------------------------- main

def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpus", type=Path, default=repo_root() / "data" / "corpus")
    p.add_argument("--per-kind", type=int, default=200, help="canaries per kind")
    p.add_argument("--window", type=int, default=40, help="lines of ordinary code around each canary")
    p.add_argument("--lookalikes", type=int, default=200, help="strings per look-alike family")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="30 canaries per kind, 30 look-alikes, 20 test files")
    args = p.parse_args(argv)
    if args.quick:
        args.per_kind, args.lookalikes = 30, 30
    t0 = time.time()
    docs = read_split(args.corpus, "test", LANGS)
    scrubber = Scrubber(ScrubConfig(internal_domains=(ORG_DOMAIN,)))
    rows, not_idempotent = recall(scrubber, docs, args.per_kind, args.window, args.seed, GENERATORS)
    outside_rows, _ = recall(scrubber, docs, args.per_kind, args.window, args.seed + 2, OUTSIDE)
    fp_docs = docs[:20] if args.quick else docs
    per_kind, files_with, n_lines = corpus_findings(scrubber, fp_docs)
    looks = lookalikes(random.Random(args.seed + 1), args.lookalikes)
    look_rows = []
    for family, items in looks.items():
        kinds = Counter()
        flagged = 0
        for line, name in items:
            found = scrubber.scrub(line + "\n", path=name).findings
            flagged += bool(found)
            kinds.update(f.kind for f in found)
        look_rows.append((family, len(items), flagged, kinds))
    eval_rows = evaluation_canaries(scrubber, docs if not args.quick else docs[:60], args.seed)
    elapsed = time.time() - t0

    print(describe())
    print(f"\nSeed {args.seed}; {args.per_kind} canaries per kind, each in a {args.window}-line window of a corpus "
          f"test-split file (python, java, go in turn; config files for passwords in config); "
          f"config: defaults + internal_domains=({ORG_DOMAIN!r},); {elapsed:.0f} s.\n")
    print("| kind | canaries | caught (right placeholder) | gone (any placeholder) | value left in output |")
    print("|---|---:|---:|---:|---:|")
    tot = [0, 0, 0, 0]
    for kind, n, caught, gone, still in rows:
        print(f"| {kind} | {n} | {caught / n:.1%} | {gone / n:.1%} | {still} |")
        tot = [tot[0] + n, tot[1] + caught, tot[2] + gone, tot[3] + still]
    print(f"| **all** | {tot[0]} | {tot[1] / tot[0]:.1%} | {tot[2] / tot[0]:.1%} | {tot[3]} |")
    print(f"\nIdempotence: {not_idempotent} of {tot[0]} scrubbed windows gave findings when scrubbed again.\n")
    print(f"Findings on ordinary code: corpus test split, {len(fp_docs)} files, {n_lines:,} lines.\n")
    print("| kind | findings | per 1,000 lines | files with one |")
    print("|---|---:|---:|---:|")
    for kind in KINDS:
        print(f"| {kind} | {per_kind[kind]} | {1000 * per_kind[kind] / n_lines:.2f} | {files_with[kind]} |")
    total = sum(per_kind[k] for k in KINDS)
    print(f"| **all** | {total} | {1000 * total / n_lines:.2f} | |")
    print("\nLook-alikes: each line scrubbed alone; flagged = any finding.\n")
    print("| family | lines | flagged | kinds found |")
    print("|---|---:|---:|---|")
    all_n = all_f = 0
    for family, n, flagged, kinds in look_rows:
        all_n, all_f = all_n + n, all_f + flagged
        found = ", ".join(f"{k} {c}" for k, c in sorted(kinds.items())) or "—"
        print(f"| {family} | {n} | {flagged / n:.1%} | {found} |")
    print(f"| **all** | {all_n} | {all_f / all_n:.1%} | |")
    print("\nOutside the claims: forms the scrubber does not promise to catch, planted the same way (seed "
          f"{args.seed + 2}); these rows show its limits.\n")
    print("| planted form | canaries | caught | gone (any placeholder) |")
    print("|---|---:|---:|---:|")
    for kind, n, caught, gone, _ in outside_rows:
        print(f"| {kind} | {n} | {caught / n:.1%} | {gone / n:.1%} |")
    print("\nThe SecureGate evaluation's canaries (umbra.evaluation.canaries, seed "
          f"{args.seed}, planted in the test split): value gone, the oracle's placeholder in its place.\n")
    print("| canary kind | planted occurrences | scrubbed like the oracle |")
    print("|---|---:|---:|")
    for kind, n, ok in eval_rows:
        print(f"| {kind} | {n} | {ok / n:.1%} |")


if __name__ == "__main__":
    main()
