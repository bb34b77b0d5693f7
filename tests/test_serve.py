"""scripts/serve.py, what `make serve` runs: the port, checked before any work.

The server itself, its quick build and the complete site behind it are in test_site_setup.py.
"""

from __future__ import annotations

import socket
import subprocess
import sys

from doctools import ROOT

SERVE = ROOT / "scripts" / "serve.py"


def check_port(port: int) -> subprocess.CompletedProcess:
    # -S: without site-packages, as `make serve` runs it before the install (no MkDocs)
    return subprocess.run(
        [sys.executable, "-S", str(SERVE), "--check-port", "--port", str(port)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_free_port_is_used_without_a_word():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    run = check_port(port)
    assert run.returncode == 0, run.stderr
    assert (run.stdout, run.stderr) == (f"{port}\n", "")


def test_a_busy_port_is_said_and_the_next_free_one_is_used():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        run = check_port(port)
    assert run.returncode == 0, run.stderr
    chosen = int(run.stdout)
    assert port < chosen <= port + 20
    assert run.stderr == f"port {port} is in use (another server?): serving on {chosen} instead\n"
