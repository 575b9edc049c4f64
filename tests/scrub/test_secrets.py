"""umbra/scrub/secrets.py (with filetypes.py): what counts as a secret, and exactly which characters
are replaced. Secret values below are random, made for these tests; none is real."""

import pytest

from umbra.scrub import ScrubConfig
from umbra.scrub.findings import resolve
from umbra.scrub.secrets import SecretFinder

AWS_ID = "AKIAQ3EGT2ZJW6PXMN4R"
AWS_SECRET = "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"
GHP = "ghp_R8xkT2mQ9vLp4Zs7Wn1Yb6Hc3Jd5Fg0Ka2Eu"
JWT = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiI4ODIxNDQwMyIsImlhdCI6MTcwMDAwMDAwMH0"
       ".Qm9vN3Rz_xR2-Lq8ZkT1vW4yH6nJ0cP5aB3dE7fG9hI")


def secrets_in(text: str, path: str | None = "app.py", **config) -> list[str]:
    finder = SecretFinder(ScrubConfig(**config))
    return [text[s.start:s.end] for s in resolve(finder.find(text, path))]


@pytest.mark.parametrize("line, value", [
    (f'AWS_ACCESS_KEY_ID = "{AWS_ID}"', AWS_ID),
    (f'    client = boto3.client("s3", aws_access_key_id="{AWS_ID}")', AWS_ID),
    (f"# deploy key {AWS_ID} (rotate)", AWS_ID),
    (f'aws_secret_access_key = "{AWS_SECRET}"', AWS_SECRET),
    (f'GITHUB_TOKEN = "{GHP}"', GHP),
    (f'REPO = "https://{GHP}@github.com/acme/billing.git"', GHP),
    ('token = "github_pat_11ABCDEFG0123456789abc_' + "x" * 20 + "Y7" * 20 + '"',
     "github_pat_11ABCDEFG0123456789abc_" + "x" * 20 + "Y7" * 20),
    ('SLACK = "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"',
     "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"),
    ('HOOK = "https://hooks.slack.com/services/T0ABCDEF1/B0ABCDEFGH/AbCdEfGhIjKlMnOpQrStUvWx"',
     "https://hooks.slack.com/services/T0ABCDEF1/B0ABCDEFGH/AbCdEfGhIjKlMnOpQrStUvWx"),
    # longer than the 24 characters detect-secrets' regex asks for: the whole key goes
    ('STRIPE_KEY = "sk_live_' + "aB3" * 20 + '"', "sk_live_" + "aB3" * 20),
    (f'ID_TOKEN = "{JWT}"', JWT),  # the signature too (the plugin's regex stops before it)
    (f'headers = {{"Authorization": "Bearer {JWT}"}}', JWT),
])
def test_formats_are_found_with_their_exact_span(line, value):
    assert secrets_in(line) == [value]


@pytest.mark.parametrize("line", [
    'API_TOKEN = "9f3b2c7d1e8a4f6b0c5d2e9a7b1c3d4e"',
    "    self.client_secret = 'Zk3Lq9Vx2Pm7Rt5Wn8Ys1Hb4'",
    'signing_key: str = "pQ7vR2xZ9kL3mN8tY1wB5cH6jF4dG0sA"',
    'webhookSecret := "4c2f8a9e7b1d3f5a6c8e0b2d4f6a8c0e2b4d6f8a"',
    '    private static final String SESSION_SECRET = "DkAmwKYjxTKHjgqJUGkuSPKU";',
])
def test_generic_tokens_count_where_the_line_names_a_credential(line):
    value = line.split('"')[1] if '"' in line else line.split("'")[1]
    assert secrets_in(line, "x.java" if "private static" in line else "x.py") == [value]


@pytest.mark.parametrize("line", [
    'COMMIT = "3f786850e387550fdab836ed7e6dc881de23001b"',
    'sha256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"',
    'expected = "SGVsbG8sIFdvcmxkISBUaGlzIGlzIGEgdGVzdCB2ZWN0b3Iu"',
    'request_id = "123e4567-e89b-12d3-a456-426614174000"',
    'api_key_sha1 = "a94a8fe5ccb19ba61c4c0873d391e987982fbbd3"',  # a hash of a key is not the key
    'ICON = "iVBORw0KGgoAAAANSUhEUgAAABAAAAAQCAYAAAAf8/9hAAAAGXRFWHRTb2Z0d2FyZQBBZG9iZQ"',
])
def test_hashes_uuids_and_data_are_not_secrets(line):
    assert secrets_in(line) == []


def test_without_context_every_high_entropy_string_counts():
    line = 'COMMIT = "3f786850e387550fdab836ed7e6dc881de23001b"'
    assert secrets_in(line, entropy_needs_context=False) == ["3f786850e387550fdab836ed7e6dc881de23001b"]


@pytest.mark.parametrize("line, path, value", [
    ('password = "hunter22"', "a.py", "hunter22"),
    ('def connect(user: str = "svc", password: str = "Falcon2017$"):', "a.py", "Falcon2017$"),
    ('    conn = psycopg2.connect(host=h, password="correct-horse-42")', "a.py", "correct-horse-42"),
    ('    ADMIN_PASS = "Dragon2007#"', "a.py", "Dragon2007#"),
    ('        props.setProperty("password", "Monkey2018$");', "A.java", "Monkey2018$"),
    ('        String dbPassword = "k6#hbl-bCq";', "A.java", "k6#hbl-bCq"),
    ('\tlogin := Credentials{User: "svc", Password: "Winter2014$"}', "a.go", "Winter2014$"),
    ('\tadminPass := "staple-correct-lemon53"', "a.go", "staple-correct-lemon53"),
    ('    data = {"username": "svc", "password": "s3cr3t!x"}', "a.py", "s3cr3t!x"),
    ("DB_PASSWORD=^VGnjCMH&gY&rnN", ".env", "^VGnjCMH&gY&rnN"),
    ("export SMTP_PASS=hunter22", "deploy.sh", "hunter22"),
    ("  password: ^few1v%0vZiJDsA6x@Cf", "config.yaml", "^few1v%0vZiJDsA6x@Cf"),
    ("spring.datasource.password=!lZnCmT^K1M", "application.properties", "!lZnCmT^K1M"),
    ("password = %rjD2MALsuJTnsV_1oAUWxx", "settings.ini", "%rjD2MALsuJTnsV_1oAUWxx"),
])
def test_passwords_in_code_and_config(line, path, value):
    assert secrets_in(line, path) == [value]


@pytest.mark.parametrize("line, path", [
    ('password = os.environ["DB_PASSWORD"]', "a.py"),
    ('password = getpass.getpass("Password: ")', "a.py"),
    ("\tpassword = cfg.Password", "a.go"),
    ('TOKEN_TYPE = "bearer"', "a.py"),
    ('SECRET_NAME = "prod/db/credentials"', "a.py"),
    ('password_prompt = "Enter your password:"', "a.py"),
    ('password = "${DB_PASSWORD}"', "a.py"),
    ("DB_PASSWORD=${DB_PASSWORD}", ".env"),
    ('field_order = ["old_password", "new_password1", "new_password2"]', "a.py"),
    ('password = "<SECRET>"', "a.py"),  # a placeholder is not a secret: scrubbing twice changes nothing
    ("if line == '-----BEGIN RSA PRIVATE KEY-----':", "a.py"),  # a parser, not a key
])
def test_credential_shaped_code_that_is_not_a_credential(line, path):
    assert secrets_in(line, path) == []


@pytest.mark.parametrize("line, value", [
    ('DB = "postgresql://app:Xk29fLq0pZ@db.acme.io:5432/orders"', "app:Xk29fLq0pZ"),
    ('CACHE = "redis://:Xk29fLq0pZ@cache.acme.io:6379/0"', "Xk29fLq0pZ"),
    ('URL = "mongodb+srv://etl:Pq8-zzR3@cluster0.abcd.mongodb.net/events"', "etl:Pq8-zzR3"),
    ('JDBC = "jdbc:mysql://db.acme.io:3306/billing?user=svc&password=Xk29fLq0pZ&useSSL=true"', "Xk29fLq0pZ"),
    ('JDBC = "jdbc:sqlserver://db.acme.io:1433;databaseName=crm;user=sa;password=Xk29f!Lq0pZ;encrypt=true"',
     "Xk29f!Lq0pZ"),
    ('CONN = "Server=db.acme.io;Database=crm;User Id=sa;Password=Xk29fLq0pZ;"', "Xk29fLq0pZ"),
])
def test_connection_string_credentials(line, value):
    assert secrets_in(line) == [value]


def test_templated_connection_strings_are_not_credentials():
    assert secrets_in('URL = "postgresql://%s:%s@%s/%s" % parts') == []
    assert secrets_in('URL = f"postgresql://{user}:{password}@{host}/db"') == []


def test_authorization_values():
    assert secrets_in('h = {"Authorization": "Basic dXNlcjpodW50ZXIyMg=="}') == ["dXNlcjpodW50ZXIyMg=="]
    assert secrets_in('h = {"Authorization": "Basic notbase64credentials"}') == []


PEM_BODY = ["MIIEowIBAAKCAQEAtqFzW7dQ4x9Lm2VbT8rNc1YwQe5HsJd0Af6GhKioP3kP9xLm",
            "2VbT8rNc1YwQe5HsJd0Af6GhKioU7Zq3kP9xLm2VbT8rNc1YwQe5HsJd0Af6Gh==" ]


def test_a_pem_private_key_is_replaced_whole():
    block = "-----BEGIN RSA PRIVATE KEY-----\n" + "\n".join(PEM_BODY) + "\n-----END RSA PRIVATE KEY-----"
    text = f'import os\nKEY = """{block}"""\nprint(KEY)\n'
    assert secrets_in(text) == [block]


def test_a_pem_key_in_escaped_concatenated_strings_is_replaced_whole():
    lines = ["-----BEGIN PRIVATE KEY-----", *PEM_BODY, "-----END PRIVATE KEY-----"]
    java = "    static final String KEY =\n" + " +\n".join(f'        "{p}\\n"' for p in lines) + ";\n"
    (found,) = secrets_in(java, "Key.java")
    assert found.startswith("-----BEGIN PRIVATE KEY-----") and found.endswith("-----END PRIVATE KEY-----")
    assert all(p in found for p in PEM_BODY)


def test_a_truncated_pem_key_goes_through_its_body():
    text = "-----BEGIN OPENSSH PRIVATE KEY-----\n" + "\n".join(PEM_BODY) + "\nrest = 1\n"
    assert secrets_in(text, "notes.txt") == ["-----BEGIN OPENSSH PRIVATE KEY-----\n" + "\n".join(PEM_BODY)]
