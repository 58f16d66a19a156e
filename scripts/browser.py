"""Headless system Chromium through Playwright's Python API, for the screenshot scripts.

Playwright drives the Debian ``chromium`` (``executable_path``); nothing is downloaded (never
run ``playwright install``). Each page gets a fresh profile, deleted afterwards.

    apt-get install -y chromium
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
]


def chromium_path() -> str:
    """The system Chromium, or exit saying how to install it."""
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        sys.exit("chromium not found: apt-get install -y chromium")
    return path


@contextmanager
def chromium_page(width: int, height: int, *, timeout_s: float = 120) -> Iterator[Any]:
    """A Playwright page in headless system Chromium with a fresh user-data-dir."""
    from playwright.sync_api import sync_playwright

    profile = tempfile.mkdtemp(prefix="chromium-")
    try:
        with sync_playwright() as pw:
            context = pw.chromium.launch_persistent_context(
                profile,
                executable_path=chromium_path(),
                headless=True,
                args=FLAGS,
                viewport={"width": width, "height": height},
            )
            try:
                page = context.new_page()
                page.set_default_timeout(timeout_s * 1000)
                yield page
            finally:
                context.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)
