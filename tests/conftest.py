"""Shared fixtures: a seeded random generator (``rng``), PyTorch for the reference tests
(``torch``), the built site (built once per test session) and a local server for it.

Shared helpers that are not fixtures are in helpers.py.
"""

from __future__ import annotations

import functools
import http.server
import os
import shutil
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


def once_per_run(tmp_path_factory, name: str, make) -> Path:
    """The folder ``name``, filled by ``make(folder)`` once per test run: under pytest-xdist the
    first worker that asks makes it (the others wait on a file lock) and every worker reuses it."""
    from filelock import FileLock

    folder = run_folder(tmp_path_factory) / name
    made = folder.with_name(f"{name}.made")
    with FileLock(f"{folder}.lock"):
        if not made.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            make(folder)
            made.touch()
    return folder


def run_folder(tmp_path_factory) -> Path:
    """The temporary folder of this test run, shared by its pytest-xdist workers."""
    root = tmp_path_factory.getbasetemp()
    return root.parent if "PYTEST_XDIST_WORKER" in os.environ else root


@pytest.fixture(scope="session")
def dists(tmp_path_factory) -> Path:
    """The package's wheel and sdist, built as `make site` builds them (python -m build), once
    per test run: the site's tests check them, the notebooks' kernels import the wheel."""

    def build(out: Path) -> None:
        proc = subprocess.run(
            [sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)],
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    return once_per_run(tmp_path_factory, "dists", build)


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
def built_site(site_port, tmp_path_factory) -> BuiltSite:
    """``mkdocs build --strict`` of the whole site into test-artifacts/site.

    The base URL is the address the browser tests serve it at, as on a real deployment: Material's
    language switcher matches the sitemap's addresses against the page's own. Under pytest-xdist
    the site's tests run on one worker (the group "site"); a second worker that would build it
    again, into the same folder and for another address, fails instead.
    """
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    builder = run_folder(tmp_path_factory) / "site-built-by"
    if builder.exists() and builder.read_text() != worker:
        pytest.fail(
            f"the site was built by worker {builder.read_text()}, and {worker} needs it too: "
            "the site's tests must run on one worker (--dist loadgroup, group 'site')"
        )
    builder.write_text(worker)
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
# so the site is built once and the chapter notebooks start their kernels once; the wheel, which
# both groups use, is built once per run (once_per_run).
SITE_FIXTURES = {"built_site", "dists"}
NOTEBOOK_FIXTURES = {"chapter_runs", "installed_package"}


def pytest_itemcollected(item):
    # (at collection, before pytest-xdist reads the groups in pytest_collection_modifyitems)
    names = set(getattr(item, "fixturenames", ()))
    if names & NOTEBOOK_FIXTURES or item.get_closest_marker("notebooks"):
        item.add_marker(pytest.mark.notebooks)
        item.add_marker(pytest.mark.xdist_group("notebooks"))
    elif names & SITE_FIXTURES:
        item.add_marker(pytest.mark.site)
        item.add_marker(pytest.mark.xdist_group("site"))


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
