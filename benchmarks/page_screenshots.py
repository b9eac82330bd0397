"""Take the docs' pictures of the operator page (docs/images/page-*.png) from a running demo pipeline.

    .venv/bin/python -m benchmarks.page_screenshots [--size 2000] [--home DIR] [--out docs/images]

Runs ``ikkai demo --keep --no-chaos`` in its own home (a temporary one unless ``--home``) and drives the page
in headless Chromium (Debian's ``chromium`` and ``chromium-driver``, through Selenium), as a person would:

1. while the demo runs, on the page it serves and prints (``watch it live: <url> (log in with the token in
   <file>)``): the login with that token, which must land on the printed URL, then the **flow** view once
   every stage up to the receipts has records and decisions, half the payments' worth, still come
   (``page-flow.png``);
2. once the demo has ended (``--keep`` leaves the stack, both jobs and the receiver running, but its page
   stops with it), the same page (``demo.live_page.LivePage``, with the demo's bundle overrides) served
   again on the kept stack: the **bundles** view in sync with the demo's applies recorded
   (``page-bundles.png``), the **connectors** view with every connector RUNNING (``page-connectors.png``), the
   **health** view with the finished run judged (``page-health.png``); then a live connector's config
   changed through Connect's REST API (``payments-ingest.refunds``: ``on.unkeyable`` null-key → fail) and the
   **bundles** view drifted with its diff open (``page-bundles-drifted.png``); then the Connect worker killed
   (SIGKILL) and the **connectors** view shot as soon as it shows the worker unreachable
   (``page-connectors-worker-killed.png``);
3. with ``--watch-restart``, the worker started again, and each different thing the open connectors view says
   about Connect meanwhile printed (a starting worker's raw web page must never show);
4. ``ikkai stack --home <home>/demo down`` (it stops the kept jobs and receiver too), also after a failure.

The pictures are PNGs of the whole page in a window 1100 px wide (a page over twice the window's height, the
health view's, at ``LONG_SCALE``); Chrome's own capture crops and scales them (no image library). Prints what each
picture shows.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.harness import REPO
from demo.lineup import Lineup
from demo.live_page import LivePage
from deploy.connect_rest import ConnectClient
from ikkai.settings import jars_dir
from stack.local_stack import CONNECT, LocalStack

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
WIDTH, HEIGHT = 1100, 640  # the viewport: small pictures, wide enough for the tables
LONG_SCALE = 0.75  # a page over twice the window's height (the health view) is scaled down to stay small
DEMO_BUNDLES = ("payments-ingest", "outbox-sink")  # what the demo applies
DRIFTED = ("payments-ingest", "payments-ingest.refunds", "transforms.businessKey.on.unkeyable", "fail")
PAGE_LINE = re.compile(r"watch it live: (?P<url>\S+) \(log in with the token in (?P<token>\S+)\)")
RECEIVER_LINE = re.compile(r"reference receiver on (?P<url>http://\S+) ")
PARTITIONS = 2  # the demo's --partitions, passed to it: the page renders its bundles with the same
STAGES = ("ingest", "events", "decisions", "outbox", "receipts")


class Demo:
    """``ikkai demo`` as a child process: its stderr echoed to ours and kept, line by line."""

    def __init__(self, home: Path, size: int) -> None:
        command = [str(Path(sys.executable).parent / "ikkai"), "demo", "--keep", "--no-chaos", "--home", str(home),
                   "--size", str(size), "--partitions", str(PARTITIONS)]  # fmt: skip
        self.report = home / "demo-report.txt"
        with self.report.open("w") as out:
            self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.PIPE, text=True, cwd=REPO)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, name="demo-stderr", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            sys.stderr.write(f"demo | {line}")
            self.lines.append(line.rstrip("\n"))

    def find(self, pattern: re.Pattern[str], seconds: float) -> re.Match[str]:
        """The first line of the demo's stderr matching ``pattern``, waited for up to ``seconds``."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if found := pattern.search(line):
                    return found
            if self.process.poll() is not None and not self._reader.is_alive():
                break
            time.sleep(0.5)
        raise SystemExit(f"the demo never printed /{pattern.pattern}/ (within {seconds:.0f} s); see its lines above")

    def wait(self, seconds: float) -> int:
        code = self.process.wait(seconds)
        self._reader.join(10)
        return code


class Browser:
    """One headless Chromium; ``wait`` polls the page (it reloads itself) until a condition holds."""

    def __init__(self, out: Path) -> None:
        try:
            from selenium import webdriver
            from selenium.webdriver.chrome.service import Service
        except ImportError as exc:
            raise SystemExit(f"selenium is not installed ({exc}): pip install -e '.[test]'") from exc
        if not CHROMIUM.exists() or not CHROMEDRIVER.exists():
            raise SystemExit("no Chromium: apt-get install -y chromium chromium-driver")
        options = webdriver.ChromeOptions()
        options.binary_location = str(CHROMIUM)
        for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     f"--window-size={WIDTH},{HEIGHT}", "--hide-scrollbars"):  # fmt: skip
            options.add_argument(flag)
        self.driver: Any = webdriver.Chrome(options=options, service=Service(executable_path=str(CHROMEDRIVER)))
        self.out = out

    def text(self, css: str) -> str:
        from selenium.webdriver.common.by import By

        return " ".join(e.text for e in self.driver.find_elements(By.CSS_SELECTOR, css))

    def wait(self, seconds: float, condition: Callable[[], bool], what: str) -> None:
        from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
        from selenium.webdriver.support.ui import WebDriverWait

        try:
            waiting = WebDriverWait(self.driver, seconds, poll_frequency=0.5,
                                    ignored_exceptions=(StaleElementReferenceException,))  # fmt: skip
            waiting.until(lambda _: condition())
        except TimeoutException:
            said = self.text("main")[:1500]
            raise SystemExit(f"{what} did not show within {seconds:.0f} s; the page said: {said}") from None

    def log_in(self, url: str, token_file: Path) -> None:
        """Open ``url`` (a view), log in through the form it sends us to; we must land on ``url``."""
        from selenium.webdriver.common.by import By

        self.driver.get(url)
        self.wait(30, lambda: "/ui/login" in self.driver.current_url, "the login form")
        self.driver.find_element(By.ID, "token").send_keys(token_file.read_text().strip())
        self.driver.find_element(By.ID, "log-in").click()
        self.wait(60, lambda: "/ui/login" not in self.driver.current_url, "the view after the login")
        if self.driver.current_url != url:
            raise SystemExit(f"the login landed on {self.driver.current_url}, not on {url}")

    def shot(self, name: str) -> str:
        """``page-<name>.png`` of the whole page (scaled by ``LONG_SCALE`` when it is over twice the window's
        height): its size, for the log."""
        import base64

        width, height, seen = self.driver.execute_script(
            "const e = document.documentElement; return [e.clientWidth, e.scrollHeight, window.innerHeight]"
        )
        scale = LONG_SCALE if height > 2 * seen else 1.0
        clip = {"x": 0, "y": 0, "width": width, "height": height, "scale": scale}
        found = self.driver.execute_cdp_cmd(
            "Page.captureScreenshot", {"format": "png", "clip": clip, "captureBeyondViewport": True}
        )
        path = self.out / f"page-{name}.png"
        path.write_bytes(base64.b64decode(found["data"]))
        return f"{path} ({round(clip['width'] * scale)}x{round(clip['height'] * scale)}, {path.stat().st_size} bytes)"


def number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return -1.0


def shoot_flow(browser: Browser, url: str, size: int) -> None:
    """The flow view while records flow: every stage written, decisions for half the payments and still coming."""

    def flowing() -> bool:
        ends = {s: number(browser.text(f"tr.stage[data-stage='{s}'] .end")) for s in STAGES}
        deciding = number(browser.text("tr.stage[data-stage='decisions'] .rate")) > 0
        return min(ends.values()) > 0 and ends["decisions"] >= size / 2 and deciding

    browser.driver.get(url)
    browser.wait(1200, flowing, f"records in every stage, {size // 2} decisions and more coming")
    print("flow:", browser.shot("flow"), "|", browser.text("#stages tbody"), flush=True)


def shoot_kept(browser: Browser, page: LivePage, url: str, local: LocalStack) -> None:
    """The views of the finished run on the kept stack, then the drift and the worker's death."""
    base = url.rsplit("/", 1)[0]
    bundle, connector, key, value = DRIFTED
    browser.log_in(url, page.token_file)

    def bundles_read(state: str) -> Callable[[], bool]:
        def read() -> bool:
            browser.driver.get(f"{base}/bundles")  # no reload of its own once read: asked again
            states = {b: browser.text(f"tr.bundle[data-bundle='{b}'] .state") for b in DEMO_BUNDLES}
            applied = all(" by " in browser.text(f"tr.bundle[data-bundle='{b}'] .last-apply") for b in DEMO_BUNDLES)
            return applied and states == {b: state if b == bundle else "in sync" for b in DEMO_BUNDLES}

        return read

    browser.wait(120, bundles_read("in sync"), "the demo's bundles in sync")
    print("bundles:", browser.shot("bundles"), "|", browser.text("#bundles tbody"), flush=True)

    browser.driver.get(f"{base}/connectors")
    running = lambda: all(  # noqa: E731 - the demo's bundles (the page lists every bundle with values for dev)
        set(browser.text(f"#bundle-{b} .connector .state").split()) == {"RUNNING"} for b in DEMO_BUNDLES
    )
    browser.wait(120, running, "every connector RUNNING")
    print("connectors:", browser.shot("connectors"), flush=True)

    browser.driver.get(f"{base}/health")

    def judged() -> bool:
        values = browser.text("#events-judged .value"), browser.text("#requests-judged .value")
        return all(re.fullmatch(r"[1-9]\d* / 0 / \d+", v) for v in values)

    browser.wait(300, judged, "events and outbox requests judged, none in flight")
    print("health:", browser.shot("health"), "|", browser.text("#event-decisions-counts"), flush=True)

    client = ConnectClient(local.endpoints().connect_url)  # type: ignore[union-attr]
    config = client.connector_config(connector)
    client.put_connector_config(connector, {**config, key: value})
    browser.wait(120, bundles_read("drifted"), f"{bundle} drifted")
    from selenium.webdriver.common.by import By

    browser.driver.find_element(By.CSS_SELECTOR, "tr.diff summary").click()
    print("bundles drifted:", browser.shot("bundles-drifted"), "|", browser.text("tr.diff"), flush=True)
    client.put_connector_config(connector, config)

    browser.driver.get(f"{base}/connectors")
    browser.wait(120, running, "every connector RUNNING again")
    local.kill(CONNECT)
    killed = time.monotonic()
    browser.wait(30, lambda: "unreachable" in browser.text(".unreachable"), "Connect unreachable")
    taken = browser.shot("connectors-worker-killed")
    print(f"connectors, worker killed ({time.monotonic() - killed:.1f} s after the kill):", taken, flush=True)


def watch_restart(browser: Browser, local: LocalStack) -> None:
    """Start the killed worker again and print each different thing the open connectors view says about Connect
    until every connector runs: what a person watching it sees (never a raw web page of a starting worker)."""
    local.start(CONNECT)
    said: list[str] = []

    def back() -> bool:
        shown = " | ".join(t for t in (browser.text(".unreachable"), browser.text(".stale")) if t)
        if shown and shown not in said:
            said.append(shown)
            print(f"while the worker restarts, the connectors view says: {shown}", flush=True)
        return not shown and all(
            set(browser.text(f"#bundle-{b} .connector .state").split()) == {"RUNNING"} for b in DEMO_BUNDLES
        )

    browser.wait(300, back, "every connector RUNNING after the restart")
    raw = [s for s in said if "<html" in s.lower() or "<body" in s.lower()]
    print("a raw web page was shown: " + " ; ".join(raw) if raw else "no raw web page was shown", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=2000, help="the demo's --size (default 2000)")
    parser.add_argument("--home", type=Path, help="the demo's --home (default: a new temporary folder)")
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "images", help="where the PNGs go")
    restart = "after the pictures, start the worker again and print what the connectors view says meanwhile"
    parser.add_argument("--watch-restart", action="store_true", help=restart)
    args = parser.parse_args()
    home = args.home or Path(tempfile.mkdtemp(prefix="ikkai-page-screenshots-"))
    local = LocalStack(home / "demo", jars_dir())
    demo = Demo(home, args.size)
    browser: Browser | None = None
    page: LivePage | None = None
    try:
        browser = Browser(args.out)
        live = demo.find(PAGE_LINE, 1800)
        url = live["url"]
        browser.log_in(url, Path(live["token"]))
        print(f"login landed on the printed URL {url}", flush=True)
        shoot_flow(browser, url, args.size)
        receiver = demo.find(RECEIVER_LINE, 60)["url"]
        code = demo.wait(3600)
        print(f"demo exited {code} (report in {demo.report})", flush=True)
        endpoints = local.endpoints()
        assert endpoints is not None, f"no stack recorded in {local.home}"
        page = LivePage(home / "demo" / "run", endpoints)
        lineup = Lineup(page.run_dir, endpoints.bootstrap_servers, endpoints.connect_url, PARTITIONS, batch=100)
        for request in lineup.bundles(receiver, page.clusters_file):  # as the demo hands them to its page
            page.renders_as(request)
        shoot_kept(browser, page, page.start(), local)
        if args.watch_restart:
            watch_restart(browser, local)
    finally:
        if page is not None:
            page.stop()
        if browser is not None:
            browser.driver.quit()
        if demo.process.poll() is None:
            demo.process.terminate()
            demo.wait(120)
        subprocess.run([str(Path(sys.executable).parent / "ikkai"), "stack", "--home", str(home / "demo"), "down"],
                       check=False)  # fmt: skip


if __name__ == "__main__":
    main()
