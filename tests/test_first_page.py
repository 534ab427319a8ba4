"""The docs' first page, followed as a new user would (issue #35, "Done
when"): its numbered steps (the code blocks of docs/addon.md captioned
"Step N, ..."), run as they are written, in order, in one shell: a wheel
built from this checkout installed into a fresh virtualenv, a fresh
`scrapy startproject`, the one ADDONS line, the page's spider, and a crawl
of a JSON document and a PDF from a server on 127.0.0.1, whose bodies must
come back whole. Nothing is added to the steps but the server's port (the
page's example says 127.0.0.1:8000); the Redis is the embedded one the
page's project gets, stopped by the page's last step."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from crawler.embedded import find_redis_server
from tests.servers import ROOT, files_server as serve_files

PAGE = ROOT / "docs" / "addon.md"
#: what `python -m build` needs of a checkout (tests/test_scrapyd.py's list)
CHECKOUT = ("setup.py", "pyproject.toml", "README.md", "LICENSE", "MANIFEST.in", "CHANGELOG.md", "crawler", "lua")
#: the page's example server, replaced by the test's
EXAMPLE = "127.0.0.1:8000"

# larger than billion's page cap (250 kB), of kinds billion skips: the addon must not
BODIES = {
    "/report.json": ("application/json",
                     json.dumps({"rows": [{"n": n, "pad": "x" * 40} for n in range(8000)]}).encode()),
    "/report.pdf": ("application/pdf", b"%PDF-1.4\n" + bytes(range(256)) * 1600 + b"\n%%EOF\n"),
}

_BLOCK = re.compile(r"^```\{code-block\} (\w+)\n:caption: (Step (\d+), [^\n]+)\n\n(.*?)^```$", re.M | re.S)


def steps(page: str) -> list[tuple[int, str, str]]:
    """(number, caption, code) of each step of the page, in order."""
    found = [(int(m.group(3)), m.group(2), m.group(4)) for m in _BLOCK.finditer(page)]
    assert [n for n, _, _ in found] == list(range(1, len(found) + 1)), "steps numbered 1, 2, ... in order"
    return found


def script(page: str, server: str) -> str:
    """The steps as one shell script: a shell step as it is, a file step as
    the file written (or appended to) with exactly the block's text."""
    lines = ["set -e"]
    for number, caption, code in steps(page):
        new, end = re.search(r"a new file (\S+)$", caption), re.search(r"at the end of (\S+)$", caption)
        if new or end:
            assert "STEP_EOF" not in code
            lines += [f"# step {number}", f"cat {'>' if new else '>>'} {(new or end).group(1)} <<'STEP_EOF'",
                      code.rstrip("\n"), "STEP_EOF"]
        else:
            assert "in a shell" in caption, f"step {number}: a shell step or a file step? {caption!r}"
            lines += [f"# step {number}", code.replace(EXAMPLE, server).rstrip("\n")]
    return "\n".join(lines) + "\n"


@pytest.fixture
def files_server() -> Iterator[str]:
    with serve_files(BODIES) as where:
        yield f"{where}"


def test_the_page_has_the_steps_a_new_user_needs() -> None:
    page = PAGE.read_text()
    assert page.startswith("# Add to an existing Scrapy project\n")
    index = (ROOT / "docs" / "index.md").read_text()
    assert index.split("```{toctree}", 1)[1].split("\n\n", 1)[1].startswith("addon\n")  # the first page
    found = steps(page)
    text = script(page, "127.0.0.1:1")
    assert "pip install polite_crawler-*.whl" in text and "scrapy startproject" in text
    assert 'ADDONS = {"crawler.addon.Addon": 100}' in text and "scrapy crawl documents" in text
    assert found[-1][2].strip() == "python -m crawler.embedded stop"


@pytest.mark.timeout(900)
def test_the_first_page_followed_step_by_step(files_server: str, tmp_path: Path) -> None:
    # a wheel built from this checkout (a copy: the build writes beside the sources)
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    for name in CHECKOUT:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, checkout / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, checkout / name)
    work = tmp_path / "work"
    built = subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--skip-dependency-check",
                            "--outdir", str(work), str(checkout)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    assert len(list(work.glob("polite_crawler-*.whl"))) == 1

    # a new user's shell: this suite's Python as `python3`, a redis-server on
    # PATH, none of this checkout's virtualenv or settings
    shims = tmp_path / "bin"
    shims.mkdir()
    (shims / "python3").symlink_to(getattr(sys, "_base_executable", sys.executable))
    venv_bin = str(ROOT / ".venv" / "bin")
    path = [str(shims), str(Path(find_redis_server()).parent),
            *(p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p != venv_bin)]
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SCRAPY_", "PYTHON", "CRAWLER_", "REDIS_", "VIRTUAL_ENV"))}
    env["PATH"] = os.pathsep.join(path)

    steps_sh = work / "steps.sh"
    steps_sh.write_text(script(PAGE.read_text(), files_server))
    project = work / "myproject"
    try:
        done = subprocess.run(["bash", str(steps_sh)], cwd=work, env=env, capture_output=True, text=True,
                              timeout=780)
    finally:  # the page's last step stops the embedded Redis; again, in case a step before it failed
        if (project / ".scrapy").exists():
            subprocess.run([str(work / "venv" / "bin" / "python"), "-m", "crawler.embedded", "stop"],
                           cwd=project, env=env, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]

    # every body whole: the JSON document and the PDF, from 127.0.0.1
    items = [json.loads(line) for line in (project / "documents.jsonl").read_text().splitlines()]
    got = {i["url"].removeprefix(f"http://{files_server}"): (i["type"], i["bytes"], i["sha256"]) for i in items}
    assert got == {path: (kind, len(body), hashlib.sha256(body).hexdigest())
                   for path, (kind, body) in BODIES.items()}
    assert len(items) == 2
    # through the addon: what it changed said once, the frontier on the embedded Redis, which step 6 stopped
    said = [line for line in done.stderr.splitlines() if "Addon: changes " in line]
    assert len(said) == 1 and "SCHEDULER" in said[0], done.stderr[-3000:]
    assert re.search(r"Frontier crawler:\{documents:0\} opened on Redis at unix://", done.stderr), done.stderr[-3000:]
    assert "crawler/skipped" not in done.stderr and "crawler/truncated" not in done.stderr
    assert done.stdout.count('"sha256"') == 2  # step 5's `cat documents.jsonl`
    status = subprocess.run([str(work / "venv" / "bin" / "python"), "-m", "crawler.embedded", "status"],
                            cwd=project, env=env, capture_output=True, text=True, timeout=60)
    assert status.stdout.startswith("stopped: unix://"), status.stdout + status.stderr
