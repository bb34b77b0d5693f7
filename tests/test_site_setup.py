"""The site as `make serve` serves it (scripts/serve.py), and the setup page's commands against it.

The server runs on a free port until it says the site is complete. Then, in each language:

- every link and address of the setup page (the wheel and the sdist among them) answers;
- the page's commands, copied from the served page as a reader copies them, run one after the
  other in a fresh shell (bash, no environment active, the project's .venv off the PATH): the
  commands that install from a copy of the repository (``pip install -e``) in a copy of it, the
  others in an empty folder, where the chapter notebook that ``jupyter notebook`` opens is the one
  the chapter's button downloads. After each install the page's Python blocks run with ``python``
  and print what the page shows, and in the folder of the site's wheel every demo a chapter runs
  with ``python -m transformer_np.examples...`` answers ``--help``.

These tests install packages from the package index (into their own environments), as a reader
does: they are the site's tests, left out of ``make test-fast``.
"""

from __future__ import annotations

import html
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import pytest

from doctools import (
    DOCS,
    LANGUAGES,
    ROOT,
    fences,
    load_hook,
    page_url_path,
    pages,
    python_blocks,
    read_page,
)

pytestmark = [pytest.mark.site, pytest.mark.xdist_group("site")]

COMPLETE = "serving the complete site at "
CODE_BLOCK = re.compile(r'<div class="highlight">(?:<span class="filename">.*?</span>)?<pre>'
                        r".*?<code>(?P<code>.*?)</code>", re.S)  # fmt: skip
DEMO = re.compile(r"python -m (transformer_np\.examples\.\w+)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fetch(url: str, timeout: float = 60) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, b""


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """scripts/serve.py on a free port, once it says the site is complete: (url, its output)."""
    port = _free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "scripts" / "serve.py"), "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    complete = threading.Event()

    def read():
        for line in process.stdout:
            lines.append(line.rstrip("\n"))
            if line.startswith(COMPLETE):
                complete.set()

    threading.Thread(target=read, daemon=True).start()
    deadline = time.monotonic() + 1800
    while not complete.wait(1):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail("the server did not complete the site:\n" + "\n".join(lines[-40:]))
    try:
        yield f"http://127.0.0.1:{port}/", lines
    finally:
        process.send_signal(signal.SIGINT)  # Ctrl-C
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()


def test_the_pages_are_served_before_the_site_is_complete(served):
    url, lines = served
    first = next(i for i, ln in enumerate(lines) if ln.startswith(f"serving the site at {url}"))
    done = next(i for i, ln in enumerate(lines) if ln.startswith("the site is complete"))
    assert first < done, lines


def setup_page(url: str, lang: str) -> str:
    status, body = fetch(url + page_url_path(lang, "setup.md"))
    assert status == 200
    return body.decode("utf-8")


def shell_blocks(page_html: str, lang: str, url: str) -> list[str]:
    """The setup page's shell blocks as the served page shows them (what its copy button copies),
    in page order. The served blocks are matched, one for one, with the page's fences as the site
    renders them (hooks/downloads.py fills the addresses): the info string says which are shell."""
    served = [
        html.unescape(re.sub(r"<[^>]+>", "", m["code"])).rstrip("\n")
        for m in CODE_BLOCK.finditer(page_html)
    ]
    downloads = load_hook("downloads.py")
    source = downloads.fill(read_page(DOCS / lang / "setup.md"), url, "")
    written = fences(source)
    assert [f.body.rstrip("\n") for f in written] == served, "the page shows other code"
    return [f.body.rstrip("\n") for f in written if f.info == "bash"]


@pytest.mark.parametrize("lang", LANGUAGES)
def test_every_link_and_address_of_the_setup_page_answers(served, lang):
    url, _ = served
    page_url = url + page_url_path(lang, "setup.md")
    page = setup_page(url, lang)
    links = {urljoin(page_url, h) for h in re.findall(r'(?:href|src)="([^"#]+)', page)}
    addresses = set(re.findall(re.escape(url) + r"[^\s\"'<>]+", html.unescape(page)))
    assert any(a.endswith(".whl") for a in addresses) and any(
        a.endswith(".tar.gz") for a in addresses
    )
    broken = [
        f"{link}: HTTP {status}"
        for link in sorted(links | addresses)
        if urlsplit(link).netloc == urlsplit(url).netloc and (status := fetch(link)[0]) != 200
    ]
    assert not broken, broken


def fresh_shell_env(home: Path) -> dict[str, str]:
    """The environment of a new terminal: no virtual environment active, the project's .venv
    off the PATH, no browser to open (jupyter notebook would start one), and as root Jupyter's
    leave to run as root."""
    venv = str(ROOT / ".venv")
    drop = {"VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "SITE_URL", "SITE_QUICK", "SITE_PROGRESS"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    path = env.get("PATH", "").split(os.pathsep)
    env["PATH"] = os.pathsep.join(p for p in path if not p.startswith(venv))
    env["BROWSER"] = "true"
    env["JUPYTER_RUNTIME_DIR"] = str(home / "jupyter-runtime")
    if os.geteuid() == 0:  # (CI runs as root, and Jupyter's server refuses root unless told)
        config = home / "jupyter-config"
        config.mkdir()
        (config / "jupyter_server_config.json").write_text('{"ServerApp": {"allow_root": true}}')
        env["JUPYTER_CONFIG_DIR"] = str(config)
    return env


def run_in_a_shell(lines: list[str], cwd: Path, env: dict, log: Path) -> None:
    """``lines`` typed one after the other into one bash, which stops at the first that fails."""
    script = cwd / "typed.sh"
    script.write_text("set -ex\n" + "\n".join(lines) + "\n", encoding="utf-8")
    with log.open("a", encoding="utf-8") as out:
        proc = subprocess.run(
            ["bash", "--noprofile", "--norc", str(script)],
            cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=1800,
        )  # fmt: skip
    assert proc.returncode == 0, log.read_text(encoding="utf-8")[-6000:]


def python_checks(lang: str, folder: Path) -> tuple[list[str], list[tuple[Path, str]]]:
    """Shell lines that run each Python block of the setup page with ``python``, and what each
    must print (the output the page shows)."""
    lines, expected = [], []
    for k, block in enumerate(python_blocks(read_page(DOCS / lang / "setup.md"))):
        source, out = folder / f"block-{k}.py", folder / f"block-{k}.out"
        source.write_text(block.code, encoding="utf-8")
        lines.append(f"python {source.name} > {out.name}")
        if block.expected_output is not None:
            expected.append((out, block.expected_output))
    return lines, expected


def demos() -> list[str]:
    """Every ``python -m transformer_np.examples...`` that a page of the site runs."""
    found = set()
    for lang in LANGUAGES:
        for path in pages(lang):
            found.update(DEMO.findall(path.read_text(encoding="utf-8")))
    return sorted(found)


def check_outputs(expected: list[tuple[Path, str]]) -> None:
    for out, shown in expected:
        printed = out.read_text(encoding="utf-8").strip("\n").split("\n")
        assert [ln.rstrip() for ln in printed] == [
            ln.rstrip() for ln in shown.strip("\n").split("\n")
        ], out


def copy_of_the_repository(target: Path) -> Path:
    """The files a copy of the repository installs from (its metadata and the package)."""
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc")
    for name in ("pyproject.toml", "README.md"):
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, target / name)
    shutil.copytree(ROOT / "src", target / "src", ignore=ignore)
    return target


def open_in_jupyter(folder: Path, log: Path, notebook: str) -> None:
    """The notebook server that `jupyter notebook <file>` started answers with that notebook."""
    url = None
    for _ in range(240):
        text = log.read_text(encoding="utf-8", errors="replace")
        m = re.search(r"(http://(?:localhost|127\.0\.0\.1):\d+/)\S*\?token=(\w+)", text)
        if m:
            url = m
            break
        time.sleep(0.5)
    assert url, f"jupyter notebook did not start:\n{log.read_text()[-3000:]}"
    base, token = url[1], url[2]
    status, body = fetch(f"{base}api/contents/{notebook}?token={token}")
    assert status == 200 and b'"cells"' in body, (status, body[:300])
    status, _ = fetch(f"{base}notebooks/{notebook}?token={token}")
    assert status == 200


@pytest.mark.parametrize("lang", LANGUAGES)
def test_the_setup_commands_work_as_written(served, lang, tmp_path):
    url, _ = served
    blocks = [b for b in shell_blocks(setup_page(url, lang), lang, url) if "git clone" not in b]
    assert blocks, "no command on the setup page"
    env = fresh_shell_env(tmp_path)
    # 1. From a copy of the repository: the blocks that install from it, then Python.
    repo = copy_of_the_repository(tmp_path / "repo")
    from_repo = [b for b in blocks if "pip install -e" in b]
    assert from_repo, "no command installs from a copy of the repository"
    checks, expected = python_checks(lang, repo)
    run_in_a_shell([*from_repo, *checks], repo, env, tmp_path / "repo.log")
    check_outputs(expected)
    # 2. From the site: every other block in page order, in an empty folder; the notebook that
    # `jupyter notebook` opens is first downloaded with the chapter's button.
    reader = tmp_path / "reader"
    reader.mkdir()
    lines = []
    for block in (b for b in blocks if b not in from_repo):
        for line in block.split("\n"):
            if line.startswith("jupyter notebook "):
                notebook = line.split()[2]
                chapter = page_url_path(lang, notebook.replace(".ipynb", ".md"))
                status, body = fetch(url + chapter + notebook)
                assert status == 200, f"{url + chapter + notebook}: HTTP {status}"
                (reader / notebook).write_bytes(body)
                line = f"{line} > jupyter.log 2>&1 & echo $! > jupyter.pid"  # it runs until stopped
            lines.append(line)
        if block.startswith("python3 -m venv"):  # installed: the page's Python, the demos
            checks, expected = python_checks(lang, reader)
            lines += checks
    lines += [f"python -m {demo} --help > /dev/null" for demo in demos()]
    try:
        run_in_a_shell(lines, reader, env, tmp_path / "reader.log")
        check_outputs(expected)
        if (reader / "jupyter.pid").is_file():
            open_in_jupyter(reader, reader / "jupyter.log", notebook)
    finally:
        pid = reader / "jupyter.pid"
        if pid.is_file():
            subprocess.run(["pkill", "-TERM", "-P", pid.read_text().strip()], check=False)
            try:
                os.kill(int(pid.read_text()), signal.SIGTERM)
            except (ProcessLookupError, ValueError):
                pass
