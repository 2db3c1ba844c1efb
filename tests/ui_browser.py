"""Headless Chromium from Debian's packages driven by Selenium, for the status-page tests.

Selenium is pointed at Debian's ``chromedriver`` explicitly (``/usr/bin/chromedriver``), so
Selenium Manager never tries to download a driver or a browser. Flags: root needs
``--no-sandbox``; the rest keep Chromium from reaching the network (no component updates, no
sync, no QUIC, no background traffic) and give every browser a fresh profile.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager

import pytest

CHROMIUM_CANDIDATES = ("chromium", "chromium-browser")
DRIVER_CANDIDATES = ("chromedriver", "chromium-driver")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=1440,1000", "--lang=en-US")


def _which(names: tuple[str, ...]) -> str | None:
    for n in names:
        p = shutil.which(n)
        if p:
            return p
    return None


def _missing(reason: str) -> None:
    """Skip on a developer's machine; fail in CI (``CI`` set), where ``make test`` installs the
    browser, so a broken install step can never pass as a green run with the page untested."""
    if os.environ.get("CI"):
        pytest.fail(f"{reason} and CI is set: the status-page tests must run in CI")
    pytest.skip(reason)


def require_browser() -> tuple[str, str]:
    """(chromium, chromedriver) paths; otherwise skip with the install command, or fail under CI."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        _missing("selenium is not installed (pip install -e '.[test]')")
    browser, driver = _which(CHROMIUM_CANDIDATES), _which(DRIVER_CANDIDATES)
    if not browser or not driver:
        _missing("headless Chromium not installed: apt-get install -y chromium chromium-driver "
                 "(scripts/bootstrap.sh does this)")
    return browser, driver


@contextmanager
def chromium(width: int = 1440, height: int = 1000):
    """A Selenium WebDriver on a fresh headless Chromium; clipboard access granted to every origin."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    browser, driver_path = require_browser()
    profile = tempfile.mkdtemp(prefix="txnwatch-chromium-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = browser
    for f in FLAGS:
        opts.add_argument(f)
    opts.add_argument(f"--window-size={width},{height}")
    opts.add_argument(f"--user-data-dir={profile}")
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=opts)
    try:
        driver.set_page_load_timeout(30)
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def grant_clipboard(driver, origin: str) -> None:
    """Let ``origin`` read and write the clipboard (CDP ``Browser.grantPermissions``)."""
    driver.execute_cdp_cmd("Browser.grantPermissions", {
        "origin": origin.rstrip("/"),
        "permissions": ["clipboardReadWrite", "clipboardSanitizedWrite"],
    })


def read_clipboard(driver) -> str:
    """What is on the browser's clipboard now (``navigator.clipboard.readText``)."""
    return driver.execute_async_script(
        "var done = arguments[arguments.length - 1];"
        "navigator.clipboard.readText().then(function (t) { done(t); },"
        " function (e) { done('ERROR: ' + e); });")


def full_height_screenshot(driver, path: str, width: int = 1440, max_height: int = 2400) -> None:
    """A screenshot of the page down to its end (capped at ``max_height`` pixels)."""
    h = driver.execute_script("return Math.max(document.body.scrollHeight, document.documentElement.scrollHeight);")
    driver.set_window_size(width, min(max(int(h) + 20, 600), max_height))
    driver.save_screenshot(path)
