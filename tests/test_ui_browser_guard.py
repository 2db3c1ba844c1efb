"""The browser tests' guard: a missing Chromium skips on a developer's machine and fails in CI."""

from __future__ import annotations

import pytest

from tests import ui_browser


def test_missing_browser_fails_when_ci_is_set(monkeypatch):
    monkeypatch.setattr(ui_browser, "_which", lambda names: None)
    monkeypatch.setenv("CI", "true")
    outcome = None
    try:
        ui_browser.require_browser()
    except BaseException as e:  # pytest's skip and fail outcomes are BaseExceptions
        outcome = e
    assert isinstance(outcome, pytest.fail.Exception), f"expected a failure under CI, got {outcome!r}"
    assert "CI is set" in str(outcome)


def test_missing_browser_skips_outside_ci(monkeypatch):
    monkeypatch.setattr(ui_browser, "_which", lambda names: None)
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="chromium"):
        ui_browser.require_browser()
