"""`make serve`: the site at http://127.0.0.1:8000/ in seconds, and complete a minute later.

1. The port is checked before any work: if it is taken, the next free one is used, and said.
2. A quick build (``SITE_QUICK=1``, ``hooks/site_cache.py``): the pages, with their heavy parts
   (the figures, the data of the interactive views, the executed notebooks, the package's wheel
   and sdist) from the cache, or left for later. It is served at once.
3. Behind it, the whole build computes what the cache lacks, its progress on the terminal, and
   takes the quick one's place when it is done: the browser reloads by itself (MkDocs'
   live-reload server).
4. Then, as ``mkdocs serve`` does: a change to the pages, the package, the hooks, the figures or
   mkdocs.yml rebuilds the site and reloads the browser.

Each build is a ``mkdocs build`` of its own, in a process of its own, into a folder of its own;
the server serves one folder and moves to the next when it is ready.

    python scripts/serve.py [--host 127.0.0.1] [--port 8000]
    python3 scripts/serve.py --check-port [--port 8000]   # the standard library only

``--check-port`` runs before the install (``make serve``): it only says whether the port is taken,
and prints the one to use.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# What the site is built from: a change here rebuilds it.
WATCHED = ("docs", "mkdocs.yml", "hooks", "figures", "overrides", "src/transformer_np")
TRIES = 20  # ports after the one asked for, when it is taken


# --------------------------------------------------------------------------------------------
# The port


def port_is_free(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds it
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def choose_port(host: str, port: int) -> tuple[int, str | None]:
    """``port`` if it is free, else the next free one and a sentence that says so.

    Raises SystemExit with a message when the next ``TRIES`` are all taken too.
    """
    if port_is_free(host, port):
        return port, None
    for other in range(port + 1, port + TRIES + 1):
        if port_is_free(host, other):
            return other, f"port {port} is in use (another server?): serving on {other} instead"
    raise SystemExit(
        f"error: ports {port} to {port + TRIES} on {host} are all in use: stop the server on "
        f"{port}, or choose a port with PORT=<port>"
    )


# --------------------------------------------------------------------------------------------
# The builds


def fingerprint() -> str:
    """The names, sizes and times of the files the site is built from."""
    h = hashlib.sha256()
    for name in WATCHED:
        top = ROOT / name
        files = [top] if top.is_file() else sorted(p for p in top.rglob("*") if p.is_file())
        for path in files:
            if "__pycache__" in path.parts:
                continue
            stat = path.stat()
            h.update(f"{path.relative_to(ROOT)} {stat.st_size} {stat.st_mtime_ns}\n".encode())
    return h.hexdigest()


class Builds:
    """The builds of the site, one folder each, and the one being served."""

    def __init__(self, url: str, work: Path):
        self.url, self.work = url, work
        self.count = 0
        self.lock = threading.Lock()
        self.completing = False  # the whole build behind the quick one is running
        self.ready: tuple[Path, str] | None = None  # a whole build to serve, and its sources
        self.server = None
        self.processes: set[subprocess.Popen] = set()
        self.stopping = False  # Ctrl-C: the builds are stopped, not failed

    def folder(self) -> Path:
        with self.lock:
            self.count += 1
            return self.work / f"site-{self.count}"

    def build(self, folder: Path, *, quick: bool) -> bool:
        """``mkdocs build`` into ``folder``, its progress and warnings on this terminal."""
        env = {**os.environ, "SITE_URL": self.url, "SITE_PROGRESS": "1"}
        env.update(NO_MKDOCS_2_WARNING="1", PYTHONDONTWRITEBYTECODE="1")  # no .pyc to watch
        env.pop("SITE_QUICK", None)
        if quick:
            env["SITE_QUICK"] = "1"
        command = [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "--quiet",
            "-d",
            str(folder),
        ]
        # In a session of its own: Ctrl-C stops this script, which then stops the build.
        process = subprocess.Popen(command, cwd=ROOT, env=env, start_new_session=True)
        with self.lock:
            self.processes.add(process)
        try:
            return process.wait() == 0
        except BaseException:  # Ctrl-C while it builds: it stops too
            process.terminate()
            process.wait()
            raise
        finally:
            with self.lock:
                self.processes.discard(process)

    def stop(self) -> None:
        """Stop the builds still running."""
        with self.lock:
            self.stopping = True
            running = list(self.processes)
        for process in running:
            process.terminate()
        for process in running:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()

    def serve(self, folder: Path) -> None:
        """Serve ``folder`` from now on; the one served before is deleted."""
        old, self.server.root = self.server.root, str(folder)
        shutil.rmtree(old, ignore_errors=True)

    def complete(self, done: Path) -> None:
        """The whole build, behind the quick one; then the server takes it (``done``)."""
        start = time.perf_counter()
        say("completing the site: the figures, the views' data, the notebooks, the downloads")
        sources, folder = fingerprint(), self.folder()
        ok = self.build(folder, quick=False)
        with self.lock:
            self.completing = False
            if ok:
                self.ready = (folder, sources)
        if ok:
            say(f"the site is complete ({time.perf_counter() - start:.0f} s more)")
            done.write_text(str(time.time()))  # a watched file: the server calls rebuild()
        elif not self.stopping:
            say("the whole build failed (above): the quick site stays served")

    def rebuild(self) -> None:
        """What the server runs when a watched file changes, or when the whole build is done:
        serve that build if nothing changed since it started, else build again (a quick build
        while the whole one is still running)."""
        with self.lock:
            ready, self.ready, quick = self.ready, None, self.completing
        if ready is not None and ready[1] == fingerprint():
            self.serve(ready[0])
            say(f"serving the complete site at {self.url}: the browser reloads by itself")
            return
        if ready is not None:
            shutil.rmtree(ready[0], ignore_errors=True)
        say("a file changed: building the site again" + (" (quick)" if quick else ""))
        folder = self.folder()
        if self.build(folder, quick=quick):
            self.serve(folder)
            say(f"serving the site again at {self.url}")
        else:
            shutil.rmtree(folder, ignore_errors=True)
            say("that build failed (above): the site served is the one before")


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------
# The command


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument(
        "--check-port",
        action="store_true",
        help="only say whether the port is taken, and print the port to use",
    )
    args = parser.parse_args(argv)
    port, note = choose_port(args.host, args.port)
    if note:
        say(note)
    if args.check_port:
        print(port)  # for `make serve`, which passes it on
        return 0

    from mkdocs.livereload import LiveReloadServer  # (not needed by --check-port)

    def stop(signum, frame):  # `kill` stops it as Ctrl-C does: the builds and the folders go too
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)

    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    url = f"http://{args.host}:{port}/"
    work = Path(tempfile.mkdtemp(prefix="transformer-site-"))
    builds = Builds(url, work)
    try:
        start = time.perf_counter()
        say("building the pages (the figures, the views' data, the notebooks and the downloads "
            "come from the cache, or follow)")  # fmt: skip
        first = builds.folder()
        if not builds.build(first, quick=True):
            say("error: the site did not build (above)")
            return 1
        say(f"pages built in {time.perf_counter() - start:.0f} s")
        server = LiveReloadServer(
            builder=builds.rebuild, host=args.host, port=port, root=str(first)
        )
        builds.server = server

        def error_page(code):
            page = Path(server.root) / f"{code}.html"
            return page.read_bytes() if code == 404 and page.is_file() else None

        server.error_handler = error_page
        for name in WATCHED:
            server.watch(str(ROOT / name))
        signals = work / "signal"
        signals.mkdir()
        server.watch(str(signals))
        builds.completing = True
        threading.Thread(target=builds.complete, args=(signals / "done",), daemon=True).start()
        say(f"serving the site at {url} (Ctrl-C stops)")
        server.serve_thread.daemon = True  # the end of this script never waits for it
        try:
            server.serve()
        except KeyboardInterrupt:
            say("stopped")
        except OSError as exc:  # the port was taken during the build
            say(f"error: cannot serve on {args.host}:{port}: {exc}")
            return 1
        finally:
            stopping = threading.Thread(target=server.shutdown, daemon=True)
            stopping.start()
            stopping.join(timeout=5)
    except KeyboardInterrupt:  # during the first build
        say("stopped")
    finally:
        builds.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
