"""Debian's Chromium, headless, for the viewer's browser tests: one launch, no unseen UI work.

Chromium's headless mode builds a whole browser window for every Playwright context, and
with it the address bar's two WebUI popups (``chrome://omnibox-popup.top-chrome/``), each
in its own renderer process: about 0.8 CPU-s per context that no page can see or reach,
more than the page itself costs. :func:`launch` turns those two features off.

Chromium reads only the last ``--disable-features`` switch, so the one :func:`launch` adds
must repeat Playwright's own list; :func:`launch` checks, on the running browser, that it
does, and fails naming what a newer Playwright added.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

CHROMIUM = Path("/usr/bin/chromium")

#: The ``--disable-features`` list Playwright 1.65 passes (``chromiumSwitches``).
PLAYWRIGHT_DISABLED_FEATURES = (
    "AvoidUnnecessaryBeforeUnloadCheckSync",
    "DestroyProfileOnBrowserClose",
    "HttpsUpgrades",
    "HttpsFirstBalancedModeAutoEnable",
    "LensOverlay",
    "MediaRouter",
    "PaintHolding",
    "ThirdPartyStoragePartitioning",
    "AvoidCorsURLLoaderRestartOnRedirect",
    "TcpPortRandomizationWin",
    "OptimizationHints",
    "NetworkTimeServiceQuerying",
    "AimEnabled",
    "PreconnectToSearch",
    "msForceBrowserSignIn",
    "msEdgeUpdateLaunchServicesPreferredVersion",
)
#: The address bar's WebUI popups: browser UI of the headless window, never part of a page.
UNSEEN_BROWSER_UI = ("WebUIOmniboxPopup", "WebUIOmniboxAimPopup")
DISABLE_FEATURES = "--disable-features="


def launch(playwright: Any, args: Sequence[str] = ()) -> Any:
    """Launch :data:`CHROMIUM` headless with ``args`` (default: none beyond Playwright's)
    and without :data:`UNSEEN_BROWSER_UI`; returns Playwright's ``Browser``.

    Raises ``AssertionError`` if the running browser's Playwright-made
    ``--disable-features`` names a feature the list passed here would switch back on.
    """
    disabled = ",".join((*PLAYWRIGHT_DISABLED_FEATURES, *UNSEEN_BROWSER_UI))
    browser = playwright.chromium.launch(
        executable_path=str(CHROMIUM), args=[*args, DISABLE_FEATURES + disabled]
    )
    try:
        command_lines = _browser_command_lines()
        assert command_lines or not Path("/proc/self").exists(), "no Chromium process found"
        for argv in command_lines:
            # The first list is Playwright's, the last the one Chromium reads.
            lists = [
                a.removeprefix(DISABLE_FEATURES) for a in argv if a.startswith(DISABLE_FEATURES)
            ]
            missing = set(lists[0].split(",")) - set(lists[-1].split(","))
            assert not missing, f"add {sorted(missing)} to PLAYWRIGHT_DISABLED_FEATURES"
    except BaseException:
        browser.close()
        raise
    return browser


def _browser_command_lines() -> list[list[str]]:
    """The argv of every Chromium browser process (not its helpers) below this process;
    none where ``/proc`` is missing."""
    if not Path("/proc/self").exists():
        return []
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents[int(entry)] = int(stat[stat.rindex(")") + 2 :].split()[1])
    found = []
    for pid in parents:
        ancestor = parents.get(pid)
        while ancestor not in (None, 0, 1, os.getpid()):
            ancestor = parents.get(ancestor)
        if ancestor != os.getpid():
            continue
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_text().split("\0")
        except OSError:
            continue
        if "--remote-debugging-pipe" in argv and not any(a.startswith("--type=") for a in argv):
            found.append(argv)
    return found
