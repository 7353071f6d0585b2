"""A real browser against a live `streamlit run` on the embedded SmolLM2: the demo path end to end.

Headless Chromium (Debian's /usr/bin/chromium) driven by Playwright's sync API: open the app,
load the model, compute saliency, move the sparsity slider with the keyboard and check that the
allocation chart changed (timing key press -> chart update), prune, and measure before/after
perplexity on a tiny token budget. Screenshots go to assets/screenshots/; step timings are
written to assets/screenshots/timings.json (measured on whatever machine runs the test).
Also: a fresh server whose very first request is a deep link (/allocation) renders it inside the
router and the sidebar frame (see ui/routing.py), and every page answers at its URL. And the flows
of issue 43: the Allocation page's live text follows the slider (timed, in timings.json); the
Evidence page's recommendation for a tolerance sets the Allocation sliders; a bad sweep entry gets a
message, not a traceback; the formulas of the explanations render (KaTeX, no error).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
import warnings
from pathlib import Path

import pytest

from ui.routing import MENU

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
SHOTS = ROOT / "assets" / "screenshots"
CHROME_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="needs /usr/bin/chromium (apt-get install -y chromium)"),
]

# Reads the y values of trace `trace` of the plotly chart whose title contains `title`.
TRACE_Y = """([title, trace]) => {
  for (const div of document.querySelectorAll('.js-plotly-plot')) {
    const t = div.layout && div.layout.title && div.layout.title.text;
    if (t && t.includes(title) && div.data && div.data[trace]) {
      return JSON.stringify(Array.from(div.data[trace].y));
    }
  }
  return null;
}"""


SERVER_PIDS: dict[str, int] = {}  # "127.0.0.1:port" -> the streamlit process serving it
SERVER_LOGS: dict[str, Path] = {}  # "127.0.0.1:port" -> its log (stdout and stderr)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(url: str, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"streamlit exited with code {proc.returncode}")
        with contextlib.suppress(OSError):
            if urllib.request.urlopen(url + "/_stcore/health", timeout=2).read().strip() == b"ok":
                return
        time.sleep(0.3)
    raise TimeoutError("streamlit did not become healthy")


@contextlib.contextmanager
def _streamlit(folder: Path, smollm2_dir):
    """`streamlit run app.py` on loopback, on the embedded default model and a score cache in `folder`; yields
    its URL. Only /_stcore/health is requested before the test's own first request."""
    cache = folder / "cache"
    (cache / "models").mkdir(parents=True)
    # The converted SmolLM2 is reused (the GGUF conversion is not what this test measures).
    (cache / "models" / "smollm2-135m").symlink_to(Path(smollm2_dir), target_is_directory=True)
    port = _free_port()
    env = {**os.environ, "NIRVANA_CACHE_DIR": str(cache), "PYTHONUNBUFFERED": "1"}
    env.pop("NIRVANA_APP_MODEL", None)
    log = (folder / "streamlit.log").open("w")  # closed after the server stops
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "streamlit",
            "run",
            "app.py",
            "--server.headless",
            "true",
            "--server.address",
            "127.0.0.1",
            "--server.port",
            str(port),
            "--browser.gatherUsageStats",
            "false",
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    SERVER_PIDS[f"127.0.0.1:{port}"] = proc.pid
    SERVER_LOGS[f"127.0.0.1:{port}"] = folder / "streamlit.log"
    try:
        _wait_healthy(url, proc)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        print((folder / "streamlit.log").read_text()[-3000:])


@pytest.fixture
def server(tmp_path, smollm2_dir):
    """A fresh server for this test alone, with a fresh score cache: its first request and its first scoring are
    this test's."""
    with _streamlit(tmp_path, smollm2_dir) as url:
        yield url


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory, smollm2_dir):
    """One server for the tests that only need a working app: each opens its own browser session (its own
    session state); the loaded model and the score cache on disk carry over, as on a demo machine."""
    with _streamlit(tmp_path_factory.mktemp("shared-server"), smollm2_dir) as url:
        yield url


def _server_log(url: str) -> str:
    return SERVER_LOGS[url.removeprefix("http://")].read_text()


# Console errors after which streamlit's page gives up its connection for good (DISCONNECTED_FOREVER): the page
# freezes with its elements greyed, whatever the user does. .streamlit/config.toml turns the message cache off
# because of the first one (seen when a burst of slider key presses reran the Allocation fragment).
FATAL_CONSOLE = ("Cached ForwardMsg MISS", "Websocket connection encountered fatal error")
FATAL_SEEN: dict[int, list[str]] = {}  # id(page) -> those errors, as logged


def _new_page(playwright):
    """A page of a fresh headless Debian Chromium, at the size the screenshots are taken, whose fatal console
    errors are kept (`_no_traceback` fails on them; a failure message shows them)."""
    browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROME_ARGS, headless=True)
    page = browser.new_page(viewport={"width": 1500, "height": 1250})
    seen = FATAL_SEEN.setdefault(id(page), [])
    page.on("console", lambda m: seen.append(m.text[:300]) if any(f in m.text for f in FATAL_CONSOLE) else None)
    return page


def _nav(page, label: str) -> None:
    page.get_by_role("link", name=label).first.click()


def _trace_y(page, title: str, trace: int):
    return page.evaluate(TRACE_Y, [title, trace])


def _idle(page, timeout: float = 30_000) -> None:
    """Wait until the script run finished: streamlit's status widget disappears, and no element is stale (a
    fragment's rerun, e.g. after a slider move on the Allocation page, shows no status widget: its elements are
    marked stale until they are drawn again)."""
    page.wait_for_timeout(150)
    page.wait_for_selector('[data-testid="stStatusWidget"]', state="detached", timeout=timeout)
    page.wait_for_function(
        """() => !document.querySelector('[data-testid="stElementContainer"][data-stale="true"]')""", timeout=timeout
    )


# The Allocation page's live text (ui/live_text.py): the dense and the pruned continuation, each a <code> (line
# breaks as <br>) in its column under a bold header ("Dense (...)", "Pruned at 25% (...)"); null until both are
# drawn. The pruned text grows token by token while it is generated; its header says "(generating)" meanwhile.
# textContent only (never innerText): this runs on every DOM mutation and every poll, and innerText forces a
# layout of the whole page (plotly charts included) each time.
LIVE_TEXT = """() => {
  const out = {};
  const main = document.querySelector('[data-testid="stMain"]');
  for (const pre of main ? main.querySelectorAll('[data-testid="stColumn"] code') : []) {
    const col = pre.closest('[data-testid="stColumn"]');
    const first = col && col.querySelector('[data-testid="stMarkdownContainer"]');
    const head = first ? first.textContent.trim() : '';
    if (head.startsWith('Dense')) out.dense = pre.textContent;
    if (head.startsWith('Pruned at')) {
      out.pruned = pre.textContent;
      out.marks = pre.querySelectorAll('mark').length;
      out.header = head;
    }
  }
  return out.dense === undefined || out.pruned === undefined ? null : out;
}"""
# Logs, in the page's clock, the last key press and every change of the pruned text (to time key -> new text);
# the log starts with the text shown when it is installed.
LOG_LIVE_TEXT = f"""() => {{
  const read = {LIVE_TEXT};
  const first = read();
  window.__lastKey = null;
  window.__liveLog = first ? [{{t: performance.now(), pruned: first.pruned}}] : [];
  if (!window.__keyListener) {{
    window.__keyListener = () => {{ window.__lastKey = performance.now(); }};
    document.addEventListener('keydown', window.__keyListener, true);
  }}
  const main = document.querySelector('[data-testid="stMain"]');
  if (window.__liveObserver) window.__liveObserver.disconnect();  // installed once per move: one observer at a time
  window.__liveObserver = new MutationObserver(() => {{
    const now = read();
    const log = window.__liveLog;
    if (now && (!log.length || log[log.length - 1].pruned !== now.pruned)) {{
      log.push({{t: performance.now(), pruned: now.pruned}});
    }}
  }});
  window.__liveObserver.observe(main, {{subtree: true, childList: true, characterData: true}});
}}"""


POLL_MS = 250  # how often a wait re-reads the live text (playwright's default polls on every animation frame)


def _live_text(page, timeout: float = 120_000) -> dict:
    page.wait_for_function(f"() => ({LIVE_TEXT})() !== null", timeout=timeout, polling=POLL_MS)
    return page.evaluate(LIVE_TEXT)


def _page_state(page) -> str:
    """What the page shows of the live text and the script run, for a failure message: streamlit's own view of
    the run and of its connection (`data-test-script-state`, `data-test-connection-state` on the app's root),
    the status widget's text, and how long one round trip into the page takes (a swamped renderer answers late)."""
    start = time.perf_counter()
    app = page.evaluate(
        """() => {
          const root = document.querySelector('[data-test-script-state]');
          const conn = document.querySelector('[data-test-connection-state]');
          const status = document.querySelector('[data-testid="stStatusWidget"]');
          return {script: root && root.getAttribute('data-test-script-state'),
                  connection: conn && conn.getAttribute('data-test-connection-state'),
                  status: status ? status.textContent.trim() : null};
        }"""
    )
    round_trip = time.perf_counter() - start
    shown = page.evaluate(LIVE_TEXT)
    thumbs = page.locator('[data-testid="stSliderThumbValue"]').all_inner_texts()
    stale = page.locator('[data-stale="true"]').count()
    return (
        f"{shown}; sliders {thumbs}; {stale} stale elements; script {app['script']}, connection "
        f"{app['connection']}, status widget {app['status']!r}; page round trip {round_trip:.2f} s; "
        f"fatal console errors {FATAL_SEEN.get(id(page), [])}"
    )


OUR_CODE = ("/nirvana/", "/ui/", "/pages/", "app.py", "script_runner.py")


def _dump_server_stacks(page) -> str:
    """Ask the server to write every thread's stack to its log (app.py registers SIGUSR1 with faulthandler), so a
    stuck run says where it is; returns the threads that run the app's script (their frames in our code and
    streamlit's script runner), or says that no script run is in progress on the server."""
    where = page.url.split("/")[2]
    pid, log = SERVER_PIDS.get(where), SERVER_LOGS.get(where)
    if pid is None or log is None or not hasattr(signal, "SIGUSR1"):
        return "server stacks: not available here"
    size = log.stat().st_size
    os.kill(pid, signal.SIGUSR1)
    time.sleep(1)
    dump = log.read_text(errors="replace")[size:]
    busy = []
    for block in dump.split("\n\n"):
        frames = [line.strip() for line in block.splitlines() if any(mark in line for mark in OUR_CODE)]
        if frames:
            busy.append(" <- ".join(frames[:6]))
    if not busy:
        return "server stacks: no script run in progress (no thread in the app's code or streamlit's script runner)"
    return "server stacks: " + " | ".join(busy)


def _wait_live_text(page, condition: str, arg, timeout: float, nudge=None) -> str | None:
    """Wait until `condition(now, arg)` (JS; `now` is LIVE_TEXT's answer, never null) holds; on a timeout, say
    what the page shows (and the server's stacks, in its log).

    `nudge` (optional): what a user would do when the page seems stuck (move the slider away and back). Streamlit
    1.67 rarely loses a slider's last value when a burst of key presses lands during a fragment run (seen once in
    CI: the thumb at 0.25, the text of 0.49 drawn and never replaced in 420 s). With `nudge`, a first
    timeout records the state, nudges, waits again and returns what it recorded (the test warns with it); the
    second timeout fails."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    script = f"(arg) => {{ const now = ({LIVE_TEXT})(); return now !== null && ({condition})(now, arg); }}"
    try:
        page.wait_for_function(script, arg=arg, timeout=timeout, polling=POLL_MS)
        return None
    except PlaywrightTimeout:
        state = f"{_page_state(page)}; {_dump_server_stacks(page)}"
        if nudge is None:
            raise AssertionError(f"live text not as expected: {state}") from None
    try:
        nudge()
        page.wait_for_function(script, arg=arg, timeout=timeout, polling=POLL_MS)
    except PlaywrightTimeout:
        raise AssertionError(
            f"live text not as expected, before and after a nudge: {state}; then {_page_state(page)}; "
            f"{_dump_server_stacks(page)}"
        ) from None
    return state


def _slider_value(page, key: str) -> str:
    """The value a slider shows on its thumb (`st-key-<key>` is the widget's element container)."""
    return page.locator(f'.st-key-{key} [data-testid="stSliderThumbValue"]').first.inner_text().strip()


def _move_slider(page, key: str, steps: int) -> None:
    """`steps` arrow-key presses on the slider of `key` (negative: to the left), the way a user moves it."""
    page.locator(f".st-key-{key}").get_by_role("slider").first.focus()
    for _ in range(abs(steps)):
        page.keyboard.press("ArrowRight" if steps > 0 else "ArrowLeft")


def _nudge(page, key: str) -> None:
    """One step right, wait for that run, one step back (what a user does when a slider's page seems stuck)."""
    _move_slider(page, key, 1)
    _idle(page, timeout=240_000)
    _move_slider(page, key, -1)


def _no_traceback(page) -> None:
    assert not FATAL_SEEN.get(id(page)), f"the page lost its connection for good: {FATAL_SEEN[id(page)]}"
    exceptions = page.locator('[data-testid="stException"]')
    assert exceptions.count() == 0, exceptions.all_inner_texts()
    assert page.get_by_text("Traceback").count() == 0


def _load_and_score(page, server: str) -> None:
    """Open the app, load the embedded SmolLM2 and score it (N=2 x T=64, as the demo path does)."""
    from playwright.sync_api import expect

    page.goto(server)
    expect(page.get_by_text("The three ideas")).to_be_visible(timeout=60_000)
    _nav(page, "1 · Model")
    expect(page.get_by_text("Layers L")).to_be_visible(timeout=120_000)
    _idle(page, timeout=60_000)
    _nav(page, "2 · Saliency")
    for label, value in (("N sequences", "2"), ("T tokens", "64")):
        box = page.get_by_label(label)
        box.fill(value)
        box.press("Enter")
        _idle(page, timeout=60_000)
    page.get_by_role("button", name="Compute saliency").click()
    page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot').length >= 3", timeout=300_000)
    _idle(page, timeout=60_000)


# Records, from the first paint on, the label of every menu link that ever appears in the sidebar (the app's own
# menu of st.page_link, and streamlit's built-in menu, which must never show), and whether the built-in one did.
RECORD_MENU = """
window.__menuSeen = [];
window.__builtinMenu = false;
new MutationObserver(() => {
  if (document.querySelector('[data-testid="stSidebarNav"]')) window.__builtinMenu = true;
  const links = '[data-testid="stSidebarNav"] a, [data-testid="stSidebar"] [data-testid="stPageLink-NavLink"]';
  for (const a of document.querySelectorAll(links)) {
    const label = a.innerText.trim().split('\\n').pop().trim();
    if (label && !window.__menuSeen.includes(label)) window.__menuSeen.push(label);
  }
}).observe(document, {subtree: true, childList: true, characterData: true});
"""
MENU_LINKS = '[data-testid="stSidebar"] [data-testid="stPageLink-NavLink"]'
MENU_LABELS = f"""() => Array.from(document.querySelectorAll('{MENU_LINKS}'))
  .map(a => a.innerText.trim().split('\\n').pop().trim())"""


def _heading(entry) -> str:
    return "NIRVANA Explorer" if entry is MENU[0] else entry.title


def _assert_routed(page, entry) -> None:
    """The page is shown inside the router: its heading, the app's menu and the sidebar frame, no traceback."""
    from playwright.sync_api import expect

    main = page.locator('[data-testid="stMain"]')
    expect(main.locator("h1").first).to_have_text(_heading(entry), timeout=90_000)
    expect(page.locator('[data-testid="stSidebar"]').get_by_text("This session")).to_be_visible(timeout=30_000)
    _idle(page, timeout=90_000)
    # The menu is redrawn with each script run; under load it can be briefly empty after the run ends.
    page.wait_for_function(f"() => ({MENU_LABELS})().length >= {len(MENU)}", timeout=30_000)
    assert page.evaluate(MENU_LABELS) == [e.title for e in MENU]
    assert page.locator('[data-testid="stException"]').count() == 0
    assert page.get_by_text("Traceback").count() == 0 and page.get_by_text("Page not found").count() == 0


def test_a_deep_link_as_a_fresh_servers_first_request_gets_the_router(server, tmp_path):
    """Streamlit's legacy pages/ mode is on until some session calls st.navigation: the first deep link
    of a fresh server must still run through app.py (ui/routing.require), and no raw file name may show."""
    from playwright.sync_api import sync_playwright

    allocation = next(e for e in MENU if e.url_path == "allocation")
    raw_names = {"app"} | {p.stem for p in (ROOT / "pages").glob("*.py")}
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROME_ARGS, headless=True)
        page = browser.new_page(viewport={"width": 1500, "height": 1000})
        page.add_init_script(RECORD_MENU)
        start = time.perf_counter()
        page.goto(f"{server}/allocation")  # the server's very first page request
        _assert_routed(page, allocation)
        first_s = time.perf_counter() - start
        assert page.url == f"{server}/allocation"
        seen = page.evaluate("() => window.__menuSeen")
        assert seen and not raw_names & set(seen), f"raw file names in the menu: {seen}"
        assert set(seen) <= {e.title for e in MENU}, seen
        assert not page.evaluate("() => window.__builtinMenu"), "streamlit's own menu showed"
        page.screenshot(path=str(SHOTS / "00-deep-link-allocation.png"), full_page=False)

        # Every page at its URL (the default page at the root), each in a new session.
        seconds = {}
        for entry in MENU:
            url = f"{server}/{'' if entry is MENU[0] else entry.url_path}"
            start = time.perf_counter()
            page.goto(url)
            _assert_routed(page, entry)
            seconds[entry.url_path] = round(time.perf_counter() - start, 2)
            assert page.url == url
            seen = page.evaluate("() => window.__menuSeen")
            assert not raw_names & set(seen), f"{url}: raw file names in the menu: {seen}"
            assert not page.evaluate("() => window.__builtinMenu"), f"{url}: streamlit's own menu showed"
        browser.close()
    log = (tmp_path / "streamlit.log").read_text()
    assert "Traceback" not in log, log[-3000:]
    print(json.dumps({"first_deep_link_s": round(first_s, 2), "per_page_s": seconds}, indent=2))


def test_demo_path_in_a_real_browser(server):
    from playwright.sync_api import expect, sync_playwright

    SHOTS.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float | list[float]] = {}
    with sync_playwright() as p:
        page = _new_page(p)
        page.goto(server)
        expect(page.get_by_text("The three ideas")).to_be_visible(timeout=30_000)
        page.screenshot(path=str(SHOTS / "01-overview.png"), full_page=False)

        # 1. Load: the Model page loads the embedded default with no choices made.
        start = time.perf_counter()
        _nav(page, "1 · Model")
        expect(page.get_by_text("Layers L")).to_be_visible(timeout=90_000)
        timings["load_s"] = time.perf_counter() - start
        expect(page.get_by_text("smollm2-135m").first).to_be_visible()
        page.screenshot(path=str(SHOTS / "02-model.png"), full_page=False)

        # 2. Saliency. The CPU default is N=8, T=128; the test scores N=2 x T=64 (a sixteenth of that work)
        # to stay inside its time budget on a shared 2-core machine.
        _nav(page, "2 · Saliency")
        for label, value in (("N sequences", "2"), ("T tokens", "64")):
            box = page.get_by_label(label)
            box.fill(value)
            box.press("Enter")
            _idle(page)
        page.get_by_role("button", name="Compute saliency").click()
        start = time.perf_counter()
        page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot').length >= 3", timeout=240_000)
        timings["saliency_s"] = time.perf_counter() - start
        timings["saliency_batch"] = "N=2, T=64"
        _idle(page)
        page.locator(".js-plotly-plot").first.scroll_into_view_if_needed()
        page.screenshot(path=str(SHOTS / "03-saliency.png"))

        # 3. Allocation: move the sparsity slider with the keyboard; the kept-neuron bars must change.
        _nav(page, "3 · Allocation")
        page.wait_for_function(f"() => ({TRACE_Y})(['Kept units', 1]) !== null", timeout=30_000)
        _idle(page, timeout=120_000)  # the live text below the charts is generated in the same run
        slider = page.get_by_role("slider").first
        slider.focus()
        latencies = []
        for _ in range(5):
            before = _trace_y(page, "Kept units", 1)  # kept neurons per layer (global ranking)
            start = time.perf_counter()
            page.keyboard.press("ArrowRight")
            page.wait_for_function(
                f"(before) => {{ const now = ({TRACE_Y})(['Kept units', 1]); return now !== null && now !== before; }}",
                arg=before,
                timeout=10_000,
            )
            latencies.append(time.perf_counter() - start)
            _idle(page, timeout=120_000)
        after = json.loads(_trace_y(page, "Kept units", 1))
        assert sum(after) < sum(json.loads(before)), "moving sparsity up must keep fewer neurons"
        timings["slider_latency_s"] = latencies
        timings["slider_latency_median_s"] = statistics.median(latencies)
        page.screenshot(path=str(SHOTS / "04-allocation.png"), full_page=False)

        # 3b. The live text: the pruned continuation follows the slider (0.25 -> 0.50), the dense one stays.
        _idle(page, timeout=120_000)
        expect(page.get_by_role("heading", name="What this does to the text")).to_be_visible(timeout=30_000)
        before = _live_text(page)
        start_value = _slider_value(page, "sparsity")
        page.evaluate(LOG_LIVE_TEXT)
        _move_slider(page, "sparsity", 25)
        expect(page.locator('.st-key-sparsity [data-testid="stSliderThumbValue"]')).to_have_text("0.50")
        # The text at 0.50 (a key press on the way may have drawn an intermediate position's text first).
        _wait_live_text(
            page,
            """(now, before) => {
              const at = now.header.match(/Pruned at (\\d+)%/);
              const done = !now.header.includes('generating');  // the text grows token by token until then
              return done && now.pruned !== before && at !== null && Math.abs(Number(at[1]) - 50) <= 3;
            }""",
            before["pruned"],
            timeout=420_000,
        )
        _idle(page, timeout=180_000)
        after = _live_text(page)
        log = page.evaluate("() => ({key: window.__lastKey, changes: window.__liveLog})")
        assert after["pruned"] != before["pruned"], "the pruned text must change with the sparsity"
        assert after["dense"] == before["dense"], "the dense text must not change with the slider"
        achieved = re.match(r"Pruned at (\d+)%", after["header"])
        assert achieved and abs(int(achieved[1]) - 50) <= 3, after["header"]  # achieved block sparsity, near 0.50
        assert log["changes"] and log["changes"][-1]["pruned"] == after["pruned"]
        timings["live_text_move"] = f"sparsity {start_value} -> 0.50 (25 arrow-key presses)"
        timings["live_text_latency_s"] = (log["changes"][-1]["t"] - log["key"]) / 1000
        timings["live_text_changes_seen"] = len(log["changes"]) - 1  # 2: a position on the way was drawn first
        timings["live_text_tokens_marked"] = after["marks"]
        caption = page.get_by_text(re.compile(r"here [\d.]+ s of generation")).first.inner_text()
        timings["live_text_generation_s"] = float(re.search(r"here ([\d.]+) s of generation", caption)[1])
        section = page.locator('[data-testid="stVerticalBlock"]').filter(
            has=page.get_by_role("heading", name="What this does to the text")
        )
        section.last.scroll_into_view_if_needed()
        section.last.screenshot(path=str(SHOTS / "07-live-text.png"))
        # Back to where it was: the text seen there is remembered (a memo), so the same text comes back.
        page.evaluate(LOG_LIVE_TEXT)
        _move_slider(page, "sparsity", -25)
        expect(page.locator('.st-key-sparsity [data-testid="stSliderThumbValue"]')).to_have_text(start_value)
        stuck = _wait_live_text(
            page,
            "(now, before) => now.pruned === before.pruned && now.header === before.header",
            before,
            timeout=240_000,
            nudge=lambda: _nudge(page, "sparsity"),
        )
        if stuck:
            timings["live_text_back_nudged"] = stuck
            warnings.warn(f"the live text needed a nudge to come back: {stuck}", stacklevel=1)
        _idle(page, timeout=180_000)
        log = page.evaluate("() => ({key: window.__lastKey, changes: window.__liveLog})")
        timings["live_text_back_latency_s"] = (log["changes"][-1]["t"] - log["key"]) / 1000
        assert _live_text(page) == before
        _no_traceback(page)

        # 4. Prune a copy.
        _nav(page, "5 · Prune & compare")
        button = page.get_by_role("button", name="Apply the plan (slice a copy)")
        button.click()
        start = time.perf_counter()
        # The main area and the sidebar both say "Pruned copy:" once it exists.
        expect(page.get_by_text("Pruned copy:").first).to_be_visible(timeout=60_000)
        timings["prune_s"] = time.perf_counter() - start
        _idle(page)

        # 5. Perplexity before/after on a tiny token budget (one window of 512 tokens).
        budget = page.get_by_label("Token budget")
        budget.fill("512")
        budget.press("Enter")
        _idle(page)
        page.get_by_role("button", name="Measure perplexity").click()
        start = time.perf_counter()
        expect(page.get_by_text("Pruned perplexity")).to_be_visible(timeout=90_000)
        timings["perplexity_s"] = time.perf_counter() - start
        _idle(page)
        expect(page.get_by_text("Tokens evaluated")).to_be_visible()
        page.screenshot(path=str(SHOTS / "05-prune.png"), full_page=False)

        # 6. The committed benchmark: claims counted and the curves of every criterion.
        _nav(page, "7 · Evidence")
        expect(page.get_by_text(re.compile(r"^NIRVANA beats ")).first).to_be_visible(timeout=60_000)
        expect(page.locator(".js-plotly-plot").first).to_be_visible(timeout=30_000)
        _idle(page)
        page.screenshot(path=str(SHOTS / "06-evidence.png"), full_page=False)
        page.context.browser.close()
    timings["note"] = "wall seconds seen in the browser, from click to result, on the machine that ran the test"
    timings["load_average_1min_at_end"] = os.getloadavg()[0]
    timings["cpu_count"] = os.cpu_count()
    (SHOTS / "timings.json").write_text(json.dumps(timings, indent=2))
    # Timings are reported, not asserted (the CPU is shared; the target is < 0.5 s per slider move).
    print(json.dumps(timings, indent=2))


def test_a_tolerance_sets_the_allocation_sliders(shared_server):
    """Evidence page: the recommendation for the default tolerance (perplexity <= 1.5x dense, from the committed
    benchmarks of SmolLM2) names a sparsity and a method, and its button puts that sparsity on the Allocation
    page's slider, away from where the user had left it."""
    from playwright.sync_api import expect, sync_playwright

    from nirvana.methods import METHODS

    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        page = _new_page(p)
        _load_and_score(page, shared_server)

        # The user had the slider elsewhere: 0.20 -> 0.30.
        _nav(page, "3 · Allocation")
        expect(page.locator('.st-key-sparsity [data-testid="stSliderThumbValue"]')).to_have_text("0.20", timeout=60_000)
        _idle(page, timeout=120_000)
        _move_slider(page, "sparsity", 10)
        expect(page.locator('.st-key-sparsity [data-testid="stSliderThumbValue"]')).to_have_text("0.30")
        _idle(page, timeout=180_000)

        _nav(page, "7 · Evidence")
        expect(page.locator("h1").first).to_have_text("7 · Evidence", timeout=60_000)
        expect(page.get_by_text("Which sparsity and which method for my tolerance?")).to_be_visible(timeout=60_000)
        _idle(page, timeout=60_000)
        box = page.locator(".st-key-rec_value_perplexity input")
        assert float(box.input_value()) == 1.5, box.input_value()
        answer = page.locator('[data-testid="stAlert"]').filter(has_text=re.compile(r"Sparsity [\d.]+ with"))
        expect(answer).to_be_visible(timeout=30_000)
        text = answer.inner_text()
        found = re.search(r"Sparsity ([\d.]+) with (.+?) meets perplexity ≤ 1\.5× dense", text)
        assert found, text
        sparsity, method = float(found[1]), found[2].split(",")[0].strip()
        gamma = re.search(r"γ = ([\d.]+) meets", text)  # NIRVANA's gamma, when the point has one
        assert 0 < sparsity < 1, text
        assert method in {m.label for m in METHODS.values()}, (method, text)
        answer.scroll_into_view_if_needed()
        page.screenshot(path=str(SHOTS / "08-recommendation.png"), full_page=False)

        page.get_by_role("button", name="Set the Allocation sliders to it").click()
        expect(page.locator("h1").first).to_have_text("3 · Allocation", timeout=60_000)
        slider = page.locator('.st-key-sparsity [data-testid="stSliderThumbValue"]')
        expect(slider).to_have_text(f"{sparsity:.2f}", timeout=60_000)
        _idle(page, timeout=180_000)
        assert _slider_value(page, "sparsity") == f"{sparsity:.2f}"
        if gamma and method == "NIRVANA":  # its gamma is set too
            assert _slider_value(page, "gamma") == f"{float(gamma[1]):.2f}"
        expect(page.get_by_text(f"Kept units per layer at s = {sparsity:.2f}")).to_be_visible(timeout=30_000)
        _no_traceback(page)
        page.context.browser.close()
    print(json.dumps({"recommended": {"sparsity": sparsity, "method": method, "gamma": gamma and gamma[1]}}))


def test_a_bad_sweep_entry_gets_a_message_not_a_traceback(shared_server):
    """Sweep page: a sparsity out of range ("0.1, 1.5") is refused with a message naming it; no traceback."""
    from playwright.sync_api import expect, sync_playwright

    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        page = _new_page(p)
        _load_and_score(page, shared_server)
        _nav(page, "6 · Sweep")
        expect(page.locator("h1").first).to_have_text("6 · Sweep", timeout=60_000)
        box = page.locator(".st-key-sweep_sparsities input")
        expect(box).to_be_visible(timeout=60_000)
        _idle(page, timeout=60_000)
        box.fill("0.1, 1.5")
        box.press("Enter")
        _idle(page, timeout=60_000)
        run = page.get_by_role("button", name="Run sweep")
        if run.count():  # the page may refuse the entry before offering to run it
            run.click()
        # Either the message, or (the bug) an exception box, after however many points ran first.
        page.wait_for_function(
            """() => document.querySelector('[data-testid="stException"]') !== null ||
              Array.from(document.querySelectorAll('[data-testid="stAlert"]'))
                .some(a => a.innerText.includes('1.5'))""",
            timeout=420_000,
        )
        _idle(page, timeout=120_000)
        page.screenshot(path=str(SHOTS / "09-sweep-bad-entry.png"), full_page=False)
        _no_traceback(page)
        message = page.locator('[data-testid="stAlert"]').filter(has_text="1.5")
        expect(message.first).to_be_visible()
        text = message.first.inner_text()
        assert "unexpectedly" not in text and "bug" not in text, text  # a message about the input, not a crash
        assert re.search(r"sparsit", text, re.IGNORECASE), text
        page.context.browser.close()
    log = _server_log(shared_server)
    assert "Traceback" not in log, log[-3000:]


# Every .katex (rendered formula) and .katex-error (a formula KaTeX could not parse) in the main area, and the
# text outside the formulas that still holds TeX (a `$` or a backslash command that was not rendered).
FORMULAS = r"""() => {
  const main = document.querySelector('[data-testid="stMain"]');
  const copy = main.cloneNode(true);
  copy.querySelectorAll('.katex, .katex-display, pre, code').forEach(e => e.remove());
  const raw = (copy.textContent.match(/\$|\\(frac|operatorname|mathbb|lfloor|gamma|odot)\b/g) || []);
  return {katex: main.querySelectorAll('.katex').length, errors: main.querySelectorAll('.katex-error').length,
          display: main.querySelectorAll('.katex-display').length,
          errorText: Array.from(main.querySelectorAll('.katex-error')).map(e => e.title || e.textContent),
          raw: raw};
}"""


def test_the_formulas_render(shared_server):
    """Overview, Saliency, Allocation and Calibration: with the "how to read it" box open, every formula is rendered by
    KaTeX (`.katex` present, no `.katex-error`) and no TeX source shows as plain text."""
    from playwright.sync_api import expect, sync_playwright

    SHOTS.mkdir(parents=True, exist_ok=True)
    counts = {}
    with sync_playwright() as p:
        page = _new_page(p)
        for entry in (e for e in MENU if e.url_path in ("home", "saliency", "allocation", "calibration")):
            page.goto(f"{shared_server}/{'' if entry is MENU[0] else entry.url_path}")
            _assert_routed(page, entry)
            boxes = page.locator('[data-testid="stMain"] [data-testid="stExpander"] details')
            for i in range(boxes.count()):
                details = boxes.nth(i)
                if details.get_attribute("open") is None:
                    details.locator("summary").click()
                    expect(details).to_have_attribute("open", "")
            page.wait_for_function(f"() => ({FORMULAS})().katex > 0", timeout=30_000)
            found = page.evaluate(FORMULAS)
            assert found["errors"] == 0, (entry.url_path, found["errorText"])
            assert not found["raw"], (entry.url_path, found["raw"])
            counts[entry.url_path] = found["katex"]
            if entry.url_path in ("allocation", "calibration"):  # their display formulas render as displays
                assert found["display"] > 0, (entry.url_path, found)
            if boxes.count():
                boxes.first.scroll_into_view_if_needed()
            page.screenshot(path=str(SHOTS / f"10-formulas-{entry.url_path}.png"), full_page=False)
        page.context.browser.close()
    print(json.dumps({"katex_formulas": counts}))
