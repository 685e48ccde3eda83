"""The documentation site, checked as a reader would meet it.

``mkdocs build --strict`` (mkdocs.yml at the repository root, pages in docs/, the committed report made into pages
by docs/hooks/results.py) must build without a warning: a broken link, a missing anchor or a page left out of the
nav fails it. Then every built page is opened in a real headless browser (Debian's ``chromium``, driven over the
DevTools protocol on a pipe, the pages served by ``http.server`` on 127.0.0.1): each page must load with its
title and content, every image must be decoded by the browser (``naturalWidth`` > 0) and be a valid PNG file of
the site, nothing may be loaded from outside the site (it works offline), and every link inside the site must name
a built page, and its ``#anchor`` an element of that page.
"""
from __future__ import annotations

import functools
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

REPO = Path(__file__).resolve().parents[1]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _build(config: Path, site: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
                          cwd=REPO, capture_output=True, text=True, timeout=600, env=env)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = _build(REPO / "mkdocs.yml", out)
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return out


def test_site_builds_in_strict_mode_with_every_nav_page(site):
    import yaml

    class Loader(yaml.SafeLoader):   # mkdocs.yml may hold !!python tags; the nav does not
        pass

    Loader.add_multi_constructor("", lambda loader, suffix, node: None)
    nav = yaml.load((REPO / "mkdocs.yml").read_text(), Loader=Loader)["nav"]

    def pages(item):
        if isinstance(item, str):
            yield item
        elif isinstance(item, list):
            for x in item:
                yield from pages(x)
        elif isinstance(item, dict):
            for v in item.values():
                yield from pages(v)

    listed = list(pages(nav))
    assert len(listed) > 40, listed
    for page in listed:
        generated = page == "reference/dataset-options.md"   # written at build time by docs/hooks/tables.py
        assert generated or (REPO / "docs" / page).is_file(), f"mkdocs.yml's nav names {page}, not in docs/"
        assert (site / page.replace(".md", ".html")).is_file(), page
    # the generated pages: the committed report, section by section, with its figures, and the dataset options
    results = sorted(p.name for p in (site / "results").glob("*.html"))
    assert "index.html" in results and any(n.startswith("table-1") for n in results), results
    table1 = next((site / "results").glob("table-1*.html")).read_text()
    assert "Where these cells come from" in table1    # one commit, or cells of several, each named
    assert re.search(r"Measured at commit <code>[0-9a-f]{7}|Cells of \d+ commits in this table</strong>: "
                     r"<code>[0-9a-f]{7}", table1), table1[:3000]
    committed_pngs = {p.name for p in (REPO / "results" / "figures").glob("*.png")}
    assert committed_pngs and committed_pngs == {p.name for p in (site / "results" / "figures").glob("*.png")}
    options = (site / "reference" / "dataset-options.html").read_text()
    assert "dataset=custom" in options and "dataset=maskbench" in options


def test_strict_build_fails_on_a_dead_link(tmp_path):
    """The strict build is a real check: the same site with one dead link does not build."""
    docs = tmp_path / "docs"
    shutil.copytree(REPO / "docs", docs, ignore=shutil.ignore_patterns("hooks"))
    page = docs / "index.md"
    page.write_text(page.read_text() + "\n[a page that is not there](no-such-page.md)\n")
    config = (REPO / "mkdocs.yml").read_text().replace("docs_dir: docs", f"docs_dir: {docs}")
    config = re.sub(r"- docs/hooks/(\w+)\.py", lambda m: f"- {REPO / 'docs' / 'hooks' / m.group(1)}.py", config)
    (tmp_path / "mkdocs.yml").write_text(config)
    done = _build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert done.returncode != 0
    assert "no-such-page.md" in done.stdout + done.stderr


class Browser:
    """Headless chromium driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``: the browser
    reads NUL-terminated JSON commands on fd 3 and writes replies and events on fd 4)."""

    def __init__(self, exe: str):
        self.profile = tempfile.mkdtemp(prefix="gcdbench-chromium-")
        r_in, self._w = os.pipe()
        self._r, w_out = os.pipe()

        def fds():
            os.dup2(r_in, 3)
            os.dup2(w_out, 4)

        self.proc = subprocess.Popen(
            [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
             "--remote-debugging-pipe", f"--user-data-dir={self.profile}", "about:blank"],
            preexec_fn=fds, pass_fds=(3, 4), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(r_in)
        os.close(w_out)
        self._buf, self._id = b"", 0
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]

    def call(self, method: str, session: str | None = None, timeout: float = 60, **params):
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        end = time.monotonic() + timeout
        while True:
            while b"\0" in self._buf:
                raw, self._buf = self._buf.split(b"\0", 1)
                reply = json.loads(raw)
                if reply.get("id") == self._id:
                    if "error" in reply:
                        raise RuntimeError(f"{method}: {reply['error']}")
                    return reply["result"]
            if time.monotonic() > end:
                raise TimeoutError(f"chromium did not answer {method} in {timeout} s")
            chunk = os.read(self._r, 1 << 16)
            if not chunk:
                raise RuntimeError(f"chromium closed its pipe (exit {self.proc.poll()})")
            self._buf += chunk

    def evaluate(self, expression: str):
        got = self.call("Runtime.evaluate", self.session, expression=expression, returnByValue=True,
                        awaitPromise=True)
        if "exceptionDetails" in got:
            raise RuntimeError(f"{expression[:60]}...: {got['exceptionDetails']}")
        return got["result"].get("value")

    def open(self, url: str) -> dict:
        nav = self.call("Page.navigate", self.session, url=url)
        assert not nav.get("errorText"), f"{url}: {nav['errorText']}"
        end = time.monotonic() + 30
        while self.evaluate("document.readyState") != "complete" or not self.evaluate(
                "Array.from(document.images).every(i => i.complete)"):
            assert time.monotonic() < end, f"{url} did not finish loading in 30 s"
            time.sleep(0.05)
        return self.evaluate("""({
            title: document.title,
            h1: (document.querySelector('article h1') || {}).textContent || '',
            images: Array.from(document.querySelectorAll('article img')).map(i => [i.src, i.naturalWidth]),
            links: Array.from(document.querySelectorAll('a[href]')).map(a => a.href),
            ids: Array.from(document.querySelectorAll('[id]')).map(e => e.id),
            external: Array.from(document.querySelectorAll('link[href], script[src], img[src]'))
                .map(e => e.href || e.src).filter(u => !u.startsWith(location.origin)),
        })""")

    def close(self):
        try:
            self.call("Browser.close", timeout=10)
            self.proc.wait(10)
        except (RuntimeError, TimeoutError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait(10)
        finally:
            os.close(self._w)
            os.close(self._r)
            shutil.rmtree(self.profile, ignore_errors=True)


@pytest.fixture(scope="module")
def served(site):
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):   # one line per request otherwise
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


def test_every_page_loads_shows_its_figures_and_links_nowhere_dead(site, served):
    exe = shutil.which("chromium")
    if exe is None:
        pytest.skip("no chromium on PATH (.ci/run installs Debian's chromium: apt-get install -y chromium)")
    pages = sorted(p.relative_to(site).as_posix() for p in site.rglob("*.html") if p.name != "404.html")
    browser = Browser(exe)
    try:
        browser.call("Page.enable", browser.session)
        seen, links = {}, []
        for page in pages:
            got = browser.open(served + page)
            assert got["title"] and got["h1"].strip(), f"{page}: no title or heading (did the page load?)"
            # a stylesheet, script or image from elsewhere (Google Fonts: theme.font) breaks the site offline
            assert not got["external"], f"{page} loads from outside the site: {got['external']}"
            for src, width in got["images"]:
                assert width > 0, f"{page}: the browser shows no image for {src}"
                path = site / unquote(urlsplit(src).path).lstrip("/")
                assert path.is_file() and path.read_bytes()[:8] == PNG_MAGIC, f"{page}: {src} is not a PNG file"
            seen[page] = set(got["ids"])
            links += [(page, href) for href in got["links"]]
    finally:
        browser.close()
    assert len(seen) > 40
    figures = [p for p in pages if p.startswith("results/")]
    assert figures, "no results pages were built"
    dead = []
    for page, href in links:
        if not href.startswith(served):
            continue   # an external link: not followed (no network in CI)
        parts = urlsplit(href)
        target = unquote(parts.path)[1:] or "index.html"
        if target.endswith("/"):
            target += "index.html"
        if not (site / target).is_file():
            dead.append(f"{page} -> {href} (no such file)")
        elif parts.fragment and target.endswith(".html") and target in seen \
                and unquote(parts.fragment) not in seen[target]:
            dead.append(f"{page} -> {href} (no element with that id)")
    assert not dead, "dead links:\n" + "\n".join(sorted(set(dead))[:50])
