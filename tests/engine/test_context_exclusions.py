"""ContextExclusions: the extension's exclusion globs, the workspace's .gitignore files, the
scrubber's secrets, binary and huge documents each keep an open file out of the prompt."""

from __future__ import annotations

from umbra.engine.context_exclusions import DEFAULT_EXCLUDE, ContextExclusions, glob_regex

CODE = "def area(r):\n    return 3.14159 * r * r\n"


def test_default_globs_exclude_env_files_keys_and_certificates(tmp_path):
    rules = ContextExclusions(DEFAULT_EXCLUDE, root=str(tmp_path), secrets=False)
    for name in (".env", ".env.local", "prod.env", "server.key", "tls/cert.pem", ".ssh/config", "id_rsa.pub",
                 "a/b/store.jks", "ca.crt"):
        assert rules.reason(str(tmp_path / name), CODE) == "excluded", name
    for name in ("app.py", "env.py", "keys.go", "src/Main.java"):
        assert rules.reason(str(tmp_path / name), CODE) is None, name


def test_user_globs_match_names_anywhere_or_paths_inside_the_root(tmp_path):
    rules = ContextExclusions(("*.gen.go", "secrets/**", "/abs/only/**"), root=str(tmp_path), secrets=False)
    assert rules.excluded(str(tmp_path / "x" / "y" / "api.gen.go"))
    assert rules.excluded(str(tmp_path / "secrets" / "db.py"))
    assert not rules.excluded(str(tmp_path / "pkg" / "secrets" / "db.py"))  # anchored at the root
    assert rules.excluded("/abs/only/thing.py")
    assert not rules.excluded(str(tmp_path / "api.go"))


def test_glob_regex_semantics():
    assert glob_regex("**/a/*.py").match("x/y/a/b.py") and glob_regex("**/a/*.py").match("a/b.py")
    assert not glob_regex("*.py").match("dir/b.py")
    assert glob_regex("f?o[0-9].txt").match("foo1.txt") and not glob_regex("f?o[!0-9].txt").match("foo1.txt")


def test_gitignore_rules_of_every_folder_down_to_the_file(tmp_path):
    (tmp_path / ".gitignore").write_text("# build output\nbuild/\n*.log\n/generated.py\n!keep.log\n")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / ".gitignore").write_text("local_*.py\n")
    rules = ContextExclusions((), root=str(tmp_path), secrets=False)
    ignored = ("build/out.py", "pkg/build/x.py", "a/debug.log", "generated.py", "pkg/local_settings.py",
               ".git/config")
    kept = ("keep.log", "pkg/generated.py", "src/build.py", "local_x.py", "pkg/app.py")
    for name in ignored:
        assert rules.reason(str(tmp_path / name), CODE) == "gitignored", name
    for name in kept:
        assert rules.reason(str(tmp_path / name), CODE) is None, name
    assert rules.reason("/elsewhere/build/x.py", CODE) is None  # outside the workspace: no .gitignore
    assert rules.reason("untitled:Untitled-1", CODE) is None


def test_a_document_with_a_secret_is_never_used(tmp_path):
    rules = ContextExclusions((), root=str(tmp_path))
    leaked = CODE + 'AWS_ACCESS_KEY_ID = "AKIAIOSFODNN7EXAMPLE"\n'
    assert rules.reason(str(tmp_path / "settings.py"), leaked) == "secret"
    pem = "KEY = '''-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7bq\n-----END RSA PRIVATE KEY-----'''\n"
    assert rules.reason(str(tmp_path / "k.py"), pem) == "secret"
    assert rules.reason(str(tmp_path / "area.py"), CODE) is None


def test_binary_and_huge_documents_are_skipped(tmp_path):
    rules = ContextExclusions((), root=str(tmp_path), max_chars=1000)
    assert rules.reason(str(tmp_path / "blob.py"), "abc\x00def") == "binary"
    assert rules.reason(str(tmp_path / "big.py"), "x = 1\n" * 1000) == "too large"
    assert rules.reason(str(tmp_path / "latin.py"), "nom = 'caf\u00e9 \ufffd'\n") is None  # decoded with replacements: usable
