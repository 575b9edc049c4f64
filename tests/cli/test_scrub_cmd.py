"""`umbra scrub PATH... --out DIR [--report FILE] [--internal-domain D]` end to end through the CLI's
own entry point: scrubbed mirror, summary and report without a found value, one-line errors."""

import json

from umbra.cli.main import main

SOURCE = '''# @author Jane Doe
API_TOKEN = "9f3b2c7d1e8a4f6b0c5d2e9a7b1c3d4e"
WIKI = "https://wiki.northwind.io/runbooks/db"
PUBLIC = "https://github.com/northwind/tools"
OWNER = "jane.doe@globex.io"
'''
RAW = ["Jane Doe", "9f3b2c7d1e8a4f6b0c5d2e9a7b1c3d4e", "wiki.northwind.io", "jane.doe@globex.io"]


def test_scrub_writes_the_mirror_the_summary_and_the_report(tmp_path, capsys):
    src = tmp_path / "repo"
    (src / "app").mkdir(parents=True)
    (src / "app" / "settings.py").write_text(SOURCE)
    out, report = tmp_path / "masked", tmp_path / "reports" / "scrub.json"
    rc = main(["scrub", str(src), "--out", str(out), "--report", str(report), "--internal-domain", "northwind.io"])
    assert rc == 0
    assert (src / "app" / "settings.py").read_text() == SOURCE
    assert (out / "repo" / "app" / "settings.py").read_text() == (
        '# @author <NAME>\nAPI_TOKEN = "<SECRET>"\nWIKI = "<URL>"\n'
        'PUBLIC = "https://github.com/northwind/tools"\nOWNER = "<EMAIL>"\n')
    printed = capsys.readouterr().out
    assert "secret 1  url 1  email 1  host 0  ip 0  name 1" in printed
    data = json.loads(report.read_text())
    assert data["files"][0]["path"] == "repo/app/settings.py"
    assert data["totals"] == {"secret": 1, "url": 1, "email": 1, "host": 0, "ip": 0, "name": 1}
    for value in RAW:
        assert value not in printed and value not in report.read_text()


def test_the_report_defaults_to_the_output_directory(tmp_path, capsys):
    src = tmp_path / "one.py"
    src.write_text('H = "10.9.8.7"\n')
    assert main(["scrub", str(src), "--out", str(tmp_path / "o")]) == 0
    assert json.loads((tmp_path / "o" / "scrub-report.json").read_text())["totals"]["ip"] == 1
    # without --internal-domain the organization's domain is public: the URL is kept
    (tmp_path / "two.py").write_text('W = "https://wiki.northwind.io/x"\n')
    assert main(["scrub", str(tmp_path / "two.py"), "--out", str(tmp_path / "p")]) == 0
    assert (tmp_path / "p" / "two.py").read_text() == 'W = "https://wiki.northwind.io/x"\n'
    capsys.readouterr()


def test_bad_input_is_one_line_on_stderr_and_a_failing_status(tmp_path, capsys):
    src = tmp_path / "repo"
    src.mkdir()
    (src / "a.py").write_text("x = 1\n")
    cases = [
        (["scrub", str(tmp_path / "nope"), "--out", str(tmp_path / "o")], "no such file or directory"),
        (["scrub", str(src), "--out", str(src / "masked")], "lies inside the input"),
        (["scrub", str(src), "--out", str(tmp_path / "o"), "--internal-domain", "not a domain"], "not a host name"),
    ]
    for argv, message in cases:
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("umbra: error: ") and message in err and err.count("\n") == 1
    assert not (src / "masked").exists()
