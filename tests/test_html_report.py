"""verify_bundle.py --html: REPORT.md as one self-contained, inert page (issue 31).

The page is parsed for what could run or fetch anything (script, handlers, frames, forms, any
URL that is not ``data:``), compared with the verified records (the same claims and verdicts as
claims.json), and opened in a real headless Chromium (Playwright driving Debian's chromium):
no request leaves the file, no script runs, and a screenshot is taken."""
from __future__ import annotations

import json
import shutil
import tarfile
from html.parser import HTMLParser
from pathlib import Path

import pytest
from click.testing import CliRunner

from kbrepro import verify_bundle
from kbrepro.bundle.html_report import CSP, render_html
from corpus import make_corpus as mc

ROOT = Path(__file__).resolve().parents[1]
FULL = ROOT / "examples" / "pointwise-fusion-ftz-full-20261201T124959.tar"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


class _Page(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags, self.urls, self.handlers, self.text, self.rows = [], [], [], [], []
        self._row = None

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        for k, v in attrs:
            if k.startswith("on"):
                self.handlers.append(k)
            if k in ("src", "href", "action", "formaction", "srcset", "poster", "data", "background"):
                self.urls.append(v or "")
        if tag == "tr":
            self._row = []

    def handle_endtag(self, tag):
        if tag == "tr" and self._row is not None:
            self.rows.append(self._row)
            self._row = None

    def handle_data(self, data):
        self.text.append(data)
        if self._row is not None and data.strip():
            self._row.append(data.strip())


def _page(path: Path) -> _Page:
    p = _Page()
    p.feed(path.read_text(encoding="utf-8"))
    return p


def _claims(path: Path) -> dict[str, str]:
    with tarfile.open(path) as tf:
        doc = json.loads(next(tf.extractfile(m).read() for m in tf if m.name.endswith("/data/claims.json")))
    return {c["id"]: c["verdict"] for c in doc["claims"]}


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("html") / "report.html"
    res = CliRunner().invoke(verify_bundle.main, [str(FULL), "--level", "static", "--check-renderings", "--html", str(out)])
    assert res.exit_code == 0, res.output
    assert res.stdout.rstrip().splitlines()[-1].startswith("VERDICT PASS (exit 0)")  # still the last line
    return out


def test_the_page_holds_nothing_that_runs_or_fetches(page):
    p = _page(page)
    assert not {"script", "iframe", "frame", "object", "embed", "form", "link", "base", "meta"} & set(p.tags) - {"meta"}
    assert p.handlers == []
    assert p.urls and all(u.startswith("data:image/png;base64,") for u in p.urls), p.urls[:3]
    text = page.read_text(encoding="utf-8")
    assert f'content="{CSP}"' in text and "default-src 'none'" in CSP


def test_the_page_says_what_claims_json_says(page):
    verdicts = _claims(FULL)
    rows = {r[0]: r[1] for r in _page(page).rows if r and r[0] in verdicts}
    assert rows == verdicts  # every claim, with the verdict the verifier derived again
    assert "VERDICT PASS (exit 0): 12 of 14 claims hold; fails: C10, C11" in page.read_text(encoding="utf-8")


def test_raw_html_and_links_of_a_report_are_text_and_figures_need_their_pixels_compared():
    md = ("# t\n\n<script>alert(1)</script>\n\n<img src=x onerror=alert(1)>\n\n[site](https://example.com) and "
          "<b onclick=x>b</b>\n\n![fig](../renderings/fig.png)\n\n<details><summary>More</summary>\n\n| a |\n|---|\n| 1 |\n"
          "\n</details>\n")
    p = _Page()
    page = render_html(md, title="t", verdict="PASS", verdict_line="VERDICT PASS", digest="0" * 64).decode()
    p.feed(page)
    assert "script" not in p.tags and "img" not in p.tags and "a" not in p.tags and p.handlers == [] and p.urls == []
    assert "&lt;script&gt;" in page and "details" in p.tags and "summary" in p.tags
    assert "[figure fig: not embedded" in page
    p = _Page()
    p.feed(render_html(md, title="t", verdict="PASS", verdict_line="v", digest=None, figures={"fig": b"\x89PNG"}).decode())
    assert p.tags.count("img") == 1 and p.urls == ["data:image/png;base64,iVBORw=="]


def test_a_line_break_in_a_table_cell_is_a_line_break_and_nothing_else_is_markup():
    """REPORT.md's timing tables break lines inside a cell with <br>: shown as a line break (the
    page showed a literal "<br>"), while any other inline tag, even one dressed as a break, stays text."""
    md = "| arms |\n|---|\n| eager: 1<br>torchscript: 2<BR/>x<br onclick=alert(1)><b>y</b> |\n"
    page = render_html(md, title="t", verdict="PASS", verdict_line="v", digest=None).decode()
    p = _Page()
    p.feed(page)
    assert "eager: 1<br>torchscript: 2<br>x&lt;br onclick=alert(1)&gt;&lt;b&gt;y&lt;/b&gt;" in page
    assert p.tags.count("br") == 2 and p.handlers == [] and "b" not in p.tags


def test_html_is_refused_at_level_fast_and_not_written_for_a_failing_bundle(tmp_path):
    res = CliRunner().invoke(verify_bundle.main, [str(FULL), "--level", "fast", "--html", str(tmp_path / "r.html")])
    assert res.exit_code == 2 and not (tmp_path / "r.html").exists()
    g = mc.load_good(FULL)
    files = dict(g.files)
    files["data/REPORT.md"] = files["data/REPORT.md"].replace(b"| C10 | **fails**", b"| C10 | **holds**")
    bad = tmp_path / "bad.tar"
    bad.write_bytes(mc.repack(g, files))  # manifests recomputed: tier 5 finds the report is not the data's
    res = CliRunner().invoke(verify_bundle.main, [str(bad), "--html", str(tmp_path / "r.html")])
    assert res.exit_code == 1 and not (tmp_path / "r.html").exists()
    assert "not written: the bundle failed verification" in res.stderr


def test_a_headless_browser_opens_the_page_without_any_request_or_script(page, tmp_path):
    if CHROMIUM is None:
        pytest.skip("no Chromium here (.ci/run installs Debian's chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    requests, consoles = [], []
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
            "--disable-component-update", "--disable-sync"])
        try:
            ctx = browser.new_context(java_script_enabled=True, viewport={"width": 1280, "height": 1600})
            web = ctx.new_page()
            web.on("request", lambda r: requests.append(r.url))
            web.on("console", lambda m: consoles.append(m.text))
            web.goto(page.as_uri())
            web.wait_for_load_state("load")
            shot = tmp_path / "report.png"
            web.screenshot(path=str(shot), full_page=False)
            scripts = web.evaluate("document.scripts.length")
            heading = web.inner_text("h1")
            cells = web.eval_on_selector_all("table tr td:first-child", "els => els.map(e => e.innerText)")
        finally:
            browser.close()
    assert requests == [page.as_uri()]  # the file itself, nothing else (data: images are not requests)
    assert scripts == 0 and consoles == []
    assert heading == FULL.stem
    assert set(_claims(FULL)) <= set(cells)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000


@pytest.mark.parametrize("md", [
    "text\n\n<details><summary>All claims verified</summary>\n\nthe rest of the page\n",  # never closed
    "- <details><summary>x</summary>\n- </details>\n",  # inside a list
    "</details>\n\n<details><summary>x</summary>\n",  # closed before opened
    "<details><summary>a</summary>\n\n<details><summary>b</summary>\n\n</details>\n\n</details>\n",  # nested
])
def test_folds_that_do_not_balance_are_shown_as_text(md):
    """An unclosed <details> would fold the rest of the page under a summary of someone's
    choosing: only balanced, top-level, one-line folds become tags (red team, issue 31)."""
    p = _Page()
    p.feed(render_html(md, title="t", verdict="PASS", verdict_line="v", digest=None).decode())
    assert "details" not in p.tags and "summary" not in p.tags


def test_the_header_class_is_the_verdict_only():
    page = render_html("x", title="t", verdict='PASS" onmouseover="x', verdict_line="v", digest=None).decode()
    assert '<header class="unknown">' in page and "onmouseover" not in page.split("<header", 1)[1].split(">", 1)[0]
    assert render_html("a\ud800b", title="\udcff", verdict="FAIL", verdict_line="v", digest=None)  # no exception
