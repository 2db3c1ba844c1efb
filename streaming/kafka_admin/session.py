"""One admin connection to the watched cluster and the one way its failures become answers.

Every admin API module asks through an :class:`AdminSession`: it opens kafka-python 3.0's
``KafkaAdminClient`` lazily, tells whether the bootstrap broker's ApiVersions answer (key 18)
lists an API, and runs a call so that an answer that cannot be had (API missing, broker
unreachable, leader moving) is ``None`` = unknown, never a guess. Authorization failures are worded
as the live source words them (``kafka_security.authorization_message``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import kafka.errors as Errors

from streaming.sources.kafka_security import authorization_message, principal_of

log = logging.getLogger(__name__)


class AdminSession:
    """The admin client of one cluster (opened on first use) and its logging of unknown answers.

    Not thread-safe on its own: :class:`~streaming.broker_confirm.KafkaBrokerConfirm` holds its
    lock around every call."""

    def __init__(self, bootstrap_servers: str, client_kwargs: dict[str, Any], security: dict[str, Any]):
        self.bootstrap_servers = bootstrap_servers
        self._client_kwargs = client_kwargs
        self._principal = principal_of(security)
        self._client = None
        self._logged: set[str] = set()

    def admin(self):
        """kafka-python's ``KafkaAdminClient``, connected on first use."""
        if self._client is None:
            from kafka.admin import KafkaAdminClient

            self._client = KafkaAdminClient(**self._client_kwargs)
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def api_versions(self) -> dict[int, tuple[int, int]]:
        """The bootstrap broker's ApiVersions answer: api key -> (min, max) version."""
        return self.admin()._manager.broker_version_data.api_versions

    def max_version(self, request_class: type) -> int:
        """The highest version of the request's API the broker lists (0 when it lists none)."""
        return self.api_versions().get(request_class.API_KEY, (0, 0))[1]

    def supports(self, request_class: type) -> bool:
        """Whether the bootstrap broker's ApiVersions answer lists the request's API key."""
        return request_class.API_KEY in self.api_versions()

    def available(self, api: str, request_class: type) -> bool:
        """Whether the API may be asked: listed by ApiVersions (logged once when not) and the
        cluster reachable (an unreachable cluster gives unknown answers, logged)."""
        try:
            if self.supports(request_class):
                return True
        except (Errors.KafkaError, OSError) as exc:
            log.warning("%s: cannot reach %s, answer unknown: %s: %s", api, self.bootstrap_servers,
                        type(exc).__name__, exc)
            return False
        self.once(api, logging.INFO, "%s not supported by the brokers at %s (ApiVersions): answer unknown",
                  api, self.bootstrap_servers)
        return False

    def once(self, key: str, level: int, msg: str, *args: Any) -> None:
        """Log ``msg`` the first time ``key`` is seen (a missing API or ACL is said once)."""
        if key not in self._logged:
            self._logged.add(key)
            log.log(level, msg, *args)

    def denied(self, api: str, exc: Errors.KafkaError, resource: str) -> str:
        """The missing ACL and the ``kafka-acls.sh`` command that grants it."""
        return authorization_message(api, exc.errno, resource, principal=self._principal,
                                     bootstrap=self.bootstrap_servers)

    def call(self, api: str, fn: Callable[[], Any],
             answers: tuple[type[BaseException], ...] = (Errors.AuthorizationError,)) -> Any:
        """Run one admin call; ``answers`` propagate (the caller turns them into an answer or a
        clear error), other Kafka and transport failures are logged and give None."""
        try:
            return fn()
        except answers:
            raise
        except (Errors.KafkaError, OSError) as exc:
            log.warning("%s against %s failed, answer unknown: %s: %s", api, self.bootstrap_servers,
                        type(exc).__name__, exc)
            return None

    def group_coordinators(self, group_ids: list[str]) -> dict[str, int]:
        """Each group's coordinator (FindCoordinator, key 10), as ``KafkaAdminClient`` finds them."""
        admin = self.admin()
        return admin._manager.run(admin._find_coordinator_ids, group_ids)

    def send(self, request: Any, node: Any = None) -> Any:
        """One raw request through the admin client's connection manager (to ``node``, or the
        least loaded broker), for requests ``KafkaAdminClient`` has no method for."""
        admin = self.admin()
        if node is None:
            return admin._manager.run(admin._manager.send, request)
        return admin._manager.run(admin._manager.send, request, node)
