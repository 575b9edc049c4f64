"""What the cloud services of server/launch.py tell the test suite: the 5xx each answered
(tests/no_server_errors.py fails a test whose services answered one).

Every service started through launch's helpers counts in `LIVE` while it runs and, when `WATCH`
is on (the test suite), reports the 5xx it answered (`LocalCloud.server_errors()`) into
`SHUTDOWN_REPORTS` as it stops. A service started by another process of the suite (`umbra
serve`, the language server: their self-started clouds) announces itself in the directory named
by `REPORTS_ENV` (its URL and token file, never a token) and, as it stops, writes the 5xx it
answered there (the suite reads them)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from server.launch import LocalCloud

_FIVE_XX = re.compile(r'umbra_cloud_errors_total\{status="5\d\d"\} (\S+)')
READER = "127.0.0.9"  # the source address of the 5xx read: its own slots at the edge, whatever a test holds


def count_5xx(metrics_text: str) -> int:
    """The 5xx answered, from a cloud's /metrics text."""
    return int(sum(float(v) for v in _FIVE_XX.findall(metrics_text)))


WATCH = False  # set by the test suite (tests/no_server_errors.py): read each stopping service's 5xx
REPORTS_ENV = "UMBRA_TEST_SERVICE_REPORTS"  # set by the suite: where services of its child processes report
LIVE: dict[int, LocalCloud] = {}  # serial -> every service of this process's helpers, while it runs
SHUTDOWN_REPORTS: list[tuple[int, str, int]] = []  # (serial, base URL, 5xx answered) of each stopped service


def report(cloud: LocalCloud) -> None:
    """Read the stopping service's 5xx count into SHUTDOWN_REPORTS, or into its report file in a
    child process of the suite (unknown counts are left out)."""
    LIVE.pop(cloud.serial, None)
    path = report_file(cloud)
    if not WATCH and path is None:
        return
    count = cloud.server_errors(issue_token=True)
    if WATCH and count is not None:
        SHUTDOWN_REPORTS.append((cloud.serial, cloud.base_url, count))
    elif path is not None:
        write_report(path, cloud, count)


def report_file(cloud: LocalCloud) -> Path | None:
    """Where a subprocess service of a child process of the suite reports (None: not one)."""
    directory = os.environ.get(REPORTS_ENV)
    if WATCH or not directory or cloud.process is None or not Path(directory).is_dir():
        return None
    return Path(directory) / f"{os.getpid()}-{cloud.serial}.json"


def write_report(path: Path, cloud: LocalCloud, stopped_count: int | None = None, stopped: bool = True) -> None:
    info = {"base_url": cloud.base_url, "pid": cloud.process.pid, "verify": str(cloud.verify) if cloud.verify else None,
            "token_file": str(cloud.token_file or cloud.workdir / "tokens.json"),
            "stopped": stopped, "count": stopped_count}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(info))
    os.replace(tmp, path)  # whole, never half-written
