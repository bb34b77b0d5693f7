"""Shared fixtures: a seeded random generator (``rng``), PyTorch for the reference tests
(``torch``), the built site (built once per test session) and a local server for it.

Shared helpers that are not fixtures are in helpers.py.
"""

from __future__ import annotations

import functools
import http.server
import os
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts"


def worker_threads() -> int:
    """The threads a test process may keep busy: all the cores, or under pytest-xdist with N
    workers its share of them (at least 1)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    return max(1, (cores or 1) // workers)


def pytest_configure(config):
    # Two workers on two cores, each with a BLAS of two threads, would oversubscribe the cores:
    # OpenBLAS's threads wait for work by spinning, and a product that shares a core with another
    # process's spinning threads slows down many times over. Each worker's BLAS keeps its share.
    # (The package's own threads are left alone: its threaded kernels run as they do anywhere.)
    if "PYTEST_XDIST_WORKER_COUNT" in os.environ:
        from threadpoolctl import threadpool_limits

        config.blas_limits = threadpool_limits(limits=worker_threads(), user_api="blas")


@pytest.fixture
def rng():
    """A NumPy random generator with a fixed seed, new for every test."""
    return np.random.default_rng(1234)


@pytest.fixture(scope="session")
def torch():
    """PyTorch, the numerical reference of the ``reference (PyTorch)`` sections; a test that
    asks for it is skipped when PyTorch is not installed."""
    torch = pytest.importorskip("torch")
    torch.set_num_threads(min(torch.get_num_threads(), worker_threads()))
    return torch


@dataclass(frozen=True)
class BuiltSite:
    path: Path
    returncode: int
    log: str


@pytest.fixture(scope="session")
def site_port() -> int:
    """A free port on 127.0.0.1 for the test server (the site is built for that address)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def built_site(site_port) -> BuiltSite:
    """``mkdocs build --strict`` of the whole site into test-artifacts/site.

    The base URL is the address the browser tests serve it at, as on a real deployment: Material's
    language switcher matches the sitemap's addresses against the page's own.
    """
    site = ARTIFACTS / "site"
    # (MPLBACKEND is left alone: notebook kernels need their inline backend to show plots.)
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    env.pop("MPLBACKEND", None)
    env["SITE_URL"] = f"http://127.0.0.1:{site_port}/"
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--clean", "-d", str(site)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    log = proc.stdout + proc.stderr
    (ARTIFACTS / "mkdocs-build.log").write_text(log)  # whole, for when a check on it fails
    return BuiltSite(path=site, returncode=proc.returncode, log=log)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - signature of the base class
        pass


@pytest.fixture(scope="session")
def site_url(built_site, site_port):
    """The built site served on 127.0.0.1 (a free port), for the browser tests."""
    if built_site.returncode != 0:
        pytest.fail(f"the site did not build:\n{built_site.log[-5000:]}")
    handler = functools.partial(_QuietHandler, directory=str(built_site.path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", site_port), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


# The lanes. `make test-fast` runs the unit tests and every page block and leaves out what builds
# the site or the package's wheel (`site`), runs notebooks in Jupyter kernels (`notebooks`) or opens
# a browser (`browser`). Under pytest-xdist (`-n 2 --dist loadgroup`), a group runs on one worker,
# so the site is built once and the chapter notebooks start their kernels once.
SITE_FIXTURES = {"built_site", "dists"}
NOTEBOOK_FIXTURES = {"chapter_runs", "installed_package"}


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(items):
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if names & SITE_FIXTURES:
            item.add_marker(pytest.mark.site)
            item.add_marker(pytest.mark.xdist_group("site"))
        if names & NOTEBOOK_FIXTURES or item.get_closest_marker("notebooks"):
            item.add_marker(pytest.mark.notebooks)
            item.add_marker(pytest.mark.xdist_group("notebooks"))


def pytest_terminal_summary(terminalreporter):
    shots = ARTIFACTS / "screenshots"
    ran_browser = any(
        "test_browser.py" in report.nodeid
        for reports in terminalreporter.stats.values()
        for report in reports
        if hasattr(report, "nodeid")
    )
    if ran_browser and shots.is_dir() and any(shots.rglob("*.png")):
        n = sum(1 for _ in shots.rglob("*.png"))
        terminalreporter.write_line(f"browser screenshots ({n} pages): {shots}")
