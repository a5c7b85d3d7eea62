#!/usr/bin/python3
"""The web console in headless Chromium, driven by Selenium (run by scripts/e2e/console.sh).

Against a daemon started with --tcp and an operator token: the console loads without a
token but the API refuses it; a wrong token is refused with the daemon's message; the
right one signs in; a volume is created in the console, mounted and written to (dd in the
background), and its throughput chart moves; a snapshot is taken and cloned, and the clone
shows under its origin; a restore needs the volume's name typed; a slow scrub's progress
rises in the Jobs view; the latest events are listed; signing out forgets the token; a
viewer's actions are disabled; a token revoked while signed in ends the session.
A screenshot of every step goes to $ARTIFACTS.

Environment: CONSOLE_URL (http://127.0.0.1:PORT), STRATA_TOKEN (operator), STRATA_VIEWER_TOKEN
(named console-viewer: the test revokes it), STRATA_BIN and
STRATA_SOCKET (the CLI, for the mount), WORK (a scratch directory), ARTIFACTS (screenshots),
DOC_SCREENSHOT (where to copy the overview, optional).
"""

import json
import os
import shutil
import subprocess
import sys
import time

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

URL = os.environ["CONSOLE_URL"].rstrip("/")
TOKEN = os.environ["STRATA_TOKEN"]
VIEWER_TOKEN = os.environ["STRATA_VIEWER_TOKEN"]
BIN = os.environ["STRATA_BIN"]
WORK = os.environ["WORK"]
ARTIFACTS = os.environ["ARTIFACTS"]
DOC_SCREENSHOT = os.environ.get("DOC_SCREENSHOT")

shots = []


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')} console] {msg}", flush=True)


def start_browser():
    o = Options()
    for a in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
              "--window-size=1440,1040", "--force-device-scale-factor=1", "--lang=en-US"]:
        o.add_argument(a)
    o.binary_location = "/usr/bin/chromium"
    o.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=o)


d = start_browser()


def shot(name):
    path = os.path.join(ARTIFACTS, f"{len(shots) + 1:02d}-{name}.png")
    d.save_screenshot(path)
    shots.append(path)
    log(f"screenshot {path}")
    return path


def fail(msg):
    try:
        shot("FAILED")
    except WebDriverException:
        pass
    raise AssertionError(msg)


def wait(cond, what, timeout=30, every=0.25):
    """cond() until it returns something true (exceptions count as false)."""
    end = time.time() + timeout
    last = None
    while time.time() < end:
        try:
            v = cond()
            if v:
                return v
        except (StaleElementReferenceException, WebDriverException) as e:
            last = e
        time.sleep(every)
    fail(f"timed out after {timeout} s waiting for {what}" + (f" (last error: {last})" if last else ""))


def css(sel):
    return d.find_elements(By.CSS_SELECTOR, sel)


def one(sel, what=None, timeout=30):
    return wait(lambda: (css(sel) or [None])[0], what or sel, timeout)


def click(sel, what=None, timeout=30):
    """Click the first match, again if the page re-rendered under us."""
    def go():
        els = [e for e in css(sel) if e.is_displayed() and e.is_enabled()]
        if not els:
            return False
        els[0].click()
        return True
    wait(go, what or f"a clickable {sel}", timeout)


def fill(name, value):
    el = one(f"dialog[open] [name='{name}']")
    el.clear()
    el.send_keys(value)


def submit_dialog():
    click("dialog[open] button[type=submit]")
    wait(lambda: not css("dialog[open]"), "the dialog to close (its error, if any, is in the screenshot)")


def go(hash_):
    """Open a view (#/name/...) and wait until it is drawn."""
    view = hash_.lstrip("#/").split("/")[0] or "overview"
    d.execute_script("window.location.hash = arguments[0]", hash_)
    wait(lambda: d.execute_script(
        "const m = document.getElementById('main');"
        "return m.dataset.view === arguments[0] && !m.querySelector('.loading') && m.children.length > 0", view),
        f"{hash_} to load")


def fetch(path, token=None):
    """[status, body] of a GET from the page, with the given token or none."""
    return d.execute_async_script(
        """const [path, token, done] = arguments;
           const headers = token ? {Authorization: 'Bearer ' + token} : {};
           fetch(path, {headers, cache: 'no-store'}).then(async r => done([r.status, await r.text()]))
             .catch(e => done([0, String(e)]));""", path, token)


def attr(sel, name):
    """An attribute of the first match, read in one step in the page: no element reference is
    held, so a view re-drawn between finding and reading it cannot make it stale."""
    return d.execute_script(
        "const e = document.querySelector(arguments[0]); return e ? e.getAttribute(arguments[1]) : null", sel, name)


def cli(*args):
    return subprocess.run([BIN, *args], check=True, capture_output=True, text=True).stdout


load = None
try:
    # 1. The console loads without a token; the API does not answer without one.
    d.get(URL + "/")
    one("#login:not([hidden]) #login-token", "the sign-in form")
    assert d.current_url == URL + "/console/", d.current_url
    shot("login")
    status, body = fetch("/v1/pools")
    if status != 401 or json.loads(body)["error"]["kind"] != "Unauthenticated":
        fail(f"GET /v1/pools without a token from the console's page: {status} {body}")
    status, body = fetch("/v1/pools", "strata_0000000000000001_00")
    if status != 401:
        fail(f"GET /v1/pools with a forged token: {status} {body}")
    log("the API refuses the page without a token (401 Unauthenticated), and with a forged one")

    # 2. A wrong token is refused with the daemon's message; the right one signs in.
    one("#login-token").send_keys("strata_0000000000000001_00")
    click("#login-submit")
    err = wait(lambda: one("#login-error").text, "the sign-in error")
    if "unknown or revoked token" not in err or not css("#login:not([hidden])"):
        fail(f"a forged token: expected the daemon's refusal on the sign-in form, got {err!r}")
    shot("login-refused")
    one("#login-token").send_keys(TOKEN)
    click("#login-submit")
    one("body[data-signed-in=true][data-role=operator] #shell:not([hidden])", "the signed-in console")
    if d.execute_script("return document.cookie") != "":
        fail("the console set a cookie")
    if d.execute_script("return sessionStorage.getItem('strata.token')") != TOKEN:
        fail("the token is not in sessionStorage")
    one("#main .card", "the overview")
    shot("overview-empty")

    # 3. Create a volume in the console.
    go("#/volumes")
    click("[data-action=create-volume]")
    fill("name", "web")
    submit_dialog()
    one("tr[data-volume='default/web']", "the new volume in the list")
    log("volume default/web created in the console")
    shot("volume-created")

    # 4. Mount it, write to it in the background; its chart must move.
    mnt = os.path.join(WORK, "mnt", "web")
    os.makedirs(mnt, exist_ok=True)
    cli("mount", "default/web", mnt)
    # 48 MiB of random data (what the scrub verifies later, at 1 MiB/s), then 4 MiB
    # rewritten at a time: ~10 MiB/s, light enough that the scrub is not starved of space.
    seed = os.path.join(WORK, "seed")
    with open(seed, "wb") as f:
        f.write(os.urandom(48 << 20))
    shutil.copyfile(seed, os.path.join(mnt, "data"))
    load = subprocess.Popen(["bash", "-c", f"""
        i=0
        while :; do
          dd if={seed} of={mnt}/data bs=1M count=4 seek=$((i % 12 * 4)) skip=$((i % 12 * 4)) \
            conv=notrunc,fsync status=none || exit 1
          i=$((i + 1))
          sleep 0.3
        done"""])
    with open(os.path.join(WORK, "load.pid"), "w") as f:
        f.write(str(load.pid))
    go("#/volumes/default/web")
    chart = ".chart[data-metric=throughput]"
    one(chart, "the throughput chart")
    first = int(wait(lambda: attr(chart, "data-points"), "chart points"))
    rates = []

    def moved():
        v = attr(chart, "data-latest-write")
        if v:
            rates.append(float(v))
        # A few distinct rates over 8 s or more: the chart moves, and its screenshot shows it.
        return len(set(rates)) >= 3 and max(rates) > 1 << 20 and int(attr(chart, "data-points") or 0) >= 8

    wait(moved, "the throughput chart to move under the load", timeout=40, every=1)
    points = int(wait(lambda: attr(chart, "data-points"), "chart points"))
    iops = float(attr(".chart[data-metric=iops]", "data-latest-write") or 0)
    if points <= first:
        fail(f"the chart did not grow: {first} -> {points} points")
    log(f"the chart moves: {points} points (from {first}), write rates seen {[round(r / 2**20, 1) for r in rates]} MiB/s, "
        f"latest write IOPS {iops:.0f}")
    shot("volume-chart")

    # 5. A snapshot, then a clone of it, shown under its origin.
    click(".page-head [data-action=snapshot]")
    fill("name", "s1")
    submit_dialog()
    one("tr[data-snapshot='default/web@s1']", "the snapshot in the volume's list")
    shot("snapshot")
    click("tr[data-snapshot='default/web@s1'] [data-action=clone]")
    fill("name", "web-clone")
    submit_dialog()
    toast = wait(lambda: one("#toast").text, "the clone's message")
    if "default/web-clone" not in toast or "web@s1" not in toast:
        fail(f"the clone's message: {toast!r}")
    one("tr[data-snapshot='default/web@s1'] a", "the clone beside its snapshot")
    go("#/snapshots")
    one("li[data-snapshot='default/web@s1'] > ul > li[data-volume='default/web-clone'][data-origin='web@s1']",
        "the clone under its origin snapshot in the lineage")
    log("snapshot default/web@s1 and its clone default/web-clone, shown under it")
    shot("lineage")
    go("#/volumes")
    if attr("tr[data-volume='default/web-clone']", "data-origin") != "web@s1":
        fail("the volume list does not show the clone's origin")

    # 5b. An NFS export of the volume, listed with its mount command beside the FUSE mount.
    go("#/volumes/default/web")
    click(".page-head [data-action=export]")
    submit_dialog()
    go("#/exports")
    row = one("tr[data-export]", "the export in the list")
    if "default/web" not in row.text or "mount -t nfs" not in row.text or "active" not in row.text:
        fail(f"the export's row: {row.text!r}")
    one(f"tr[data-mount='{mnt}']", "the FUSE mount in the list")
    shot("exports")

    # 6. A restore is refused until the volume's name is typed (then cancelled: the volume is in use).
    go("#/volumes/default/web")
    click("tr[data-snapshot='default/web@s1'] [data-action=restore]")
    ok = one("dialog[open] button[type=submit]")
    if ok.is_enabled():
        fail("the restore's button is enabled before the name is typed")
    one("dialog[open] [name=confirm]").send_keys("wrong")
    if ok.is_enabled():
        fail("the restore's button is enabled with a wrong name")
    one("dialog[open] [name=confirm]").clear()
    one("dialog[open] [name=confirm]").send_keys("web")
    wait(lambda: ok.is_enabled(), "the restore's button to enable once the name is typed", timeout=5)
    shot("restore-confirmation")
    click("dialog[open] button[value=cancel]")
    wait(lambda: not css("dialog[open]"), "the restore dialog to close")
    # A real one on the clone (not in use): snapshot it, then restore it to that snapshot.
    go("#/snapshots")
    click("li[data-volume='default/web-clone'] > .node [data-action=snapshot]")
    fill("name", "c1")
    submit_dialog()
    click("li[data-snapshot='default/web-clone@c1'] [data-action=restore]")
    one("dialog[open] [name=confirm]").send_keys("web-clone")
    submit_dialog()
    toast = wait(lambda: one("#toast").text, "the restore's message")
    if toast != "default/web-clone restored to @c1":
        fail(f"the restore's message: {toast!r}")
    log("a restore waits for the volume's name; default/web-clone restored to @c1")

    # 7. A slow scrub (the daemon runs with --scrub-rate): its progress rises in Jobs.
    go("#/pools/default")
    click("[data-action=scrub-start]")
    submit_dialog()
    go("#/jobs")
    wait(lambda: css("tr[data-job]") or css("[data-jobs=unsupported]"), "the jobs view")
    if css("[data-jobs=unsupported]"):
        fail("the jobs view says GET /v1/jobs is not served")
    row = "tr[data-job][data-kind=scrub][data-state=running]"
    one(row, "the scrub's job")
    seen = []

    def rising():
        p = attr(row, "data-percent")
        st = attr(row, "data-state")
        if p is not None:
            seen.append(float(p))
        if st not in ("running", None):
            fail(f"the scrub is {st} before its progress was seen rising: {seen}")
        return len(seen) >= 2 and seen[-1] > seen[0] and seen[-1] > 0 and seen[-1] < 100

    wait(rising, "the scrub's progress to rise", timeout=60, every=1)
    log(f"scrub progress rising in the Jobs view: {seen[0]:.1f} % -> {seen[-1]:.1f} %")
    shot("jobs")
    go("#/")
    one("#main [data-pool=default]", "the overview")
    wait(lambda: not css("#toast.show"), "the last message to fade", timeout=15)
    time.sleep(1)
    overview = shot("overview")
    if DOC_SCREENSHOT:
        shutil.copyfile(overview, DOC_SCREENSHOT)
        log(f"overview copied to {DOC_SCREENSHOT}")

    # 8. Cancel the scrub's job (confirmed) in the Jobs view; the scrub ends cancelled.
    # Then the events list the refusals and the scrub.
    go("#/jobs")
    click(row + " [data-action=cancel-job]")
    submit_dialog()
    one("tr[data-job][data-kind=scrub][data-state=cancelled]", "the scrub's job cancelled", timeout=20)
    go("#/pools/default")
    one("[data-scrub-state=cancelled]", "the scrub cancelled")
    go("#/events")
    one("tr[data-kind='request.refused']", "the refused requests of step 1 in the events")
    one("tr[data-kind='scrub.finished']", "the cancelled scrub in the events", timeout=20)
    log(f"events listed: {len(css('tr[data-event-id]'))}")
    shot("events")

    # 9. Signing out forgets the token.
    click("#logout")
    one("#login:not([hidden])", "the sign-in form after signing out")
    if d.execute_script("return sessionStorage.getItem('strata.token')") is not None:
        fail("the token outlived signing out")
    # 10. A viewer sees but may not act; a token revoked while signed in ends the session
    #     with the daemon's message.
    one("#login-token").send_keys(VIEWER_TOKEN)
    click("#login-submit")
    one("body[data-signed-in=true][data-role=viewer]", "the viewer signed in")
    go("#/volumes")
    button = one("[data-action=create-volume]")
    if button.is_enabled() or "operator" not in (button.get_attribute("title") or ""):
        fail("a viewer's create-volume button is enabled, or does not say which role it needs")
    cli("token", "revoke", "console-viewer")
    err = wait(lambda: css("#login:not([hidden])") and one("#login-error").text, "the revoked token to end the session", timeout=15)
    if "unknown or revoked token" not in err:
        fail(f"after the revoke: {err!r}")
    log("a viewer's actions are disabled; a revoked token returns to the sign-in with the daemon's message")
    shot("revoked")
    errors = [e for e in d.get_log("browser")
              if e["level"] == "SEVERE" and e.get("source") != "network"]
    if errors:
        fail(f"errors in the browser's console: {errors}")
    log(f"all steps passed; {len(shots)} screenshots in {ARTIFACTS}")
finally:
    if load is not None:
        load.kill()
        load.wait()
    d.quit()
sys.exit(0)
