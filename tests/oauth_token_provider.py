"""OAUTHBEARER token provider for the security tests, named by dotted path
(``tests.oauth_token_provider:StaticTokenProvider``) so that Spark executors import it too."""

from __future__ import annotations

import os

from kafka.net.sasl.oauth import AbstractTokenProvider

#: The token the fake broker accepts in the tests (read from the environment so that a test can
#: choose it; executors of a local master inherit it).
TOKEN_ENV = "TXNWATCH_TEST_OAUTH_TOKEN"


class StaticTokenProvider(AbstractTokenProvider):
    def token(self) -> str:
        return os.environ[TOKEN_ENV]


def make_provider() -> StaticTokenProvider:
    """A factory: the dotted path may name a callable returning the provider."""
    return StaticTokenProvider()
