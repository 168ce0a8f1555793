"""One Broker per org (tenant) on a listener: each sees the log through ``LogEngine.for_org``, so
its topic catalog, its groups (membership and committed offsets) and its deletes are
those of its org only. Another org's topic is, to a tenant, a topic that does not exist
(Metadata and Produce may create the tenant's own topic of that name, as auto-creation
does: names are per org, as the org-salted stream keys intend). Brokers are made on the
first connection of their org: orgs named in the auth config, the listener's default
org, and those named by clients of the daemon's local socket (walfs.common.local_socket)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import trio

from walfs.kafka.broker import Broker
from walfs.kafka.broker_config import BrokerConfig

if TYPE_CHECKING:
    from walfs.engine.contract import LogEngine


class Tenants:
    def __init__(
        self,
        engine: LogEngine,
        nursery: trio.Nursery,
        *,
        allow_delete: bool,
        api_versions: dict[int, tuple[int, int]],
        config: BrokerConfig,
        request_latency: Any = None,
    ) -> None:
        self._engine = engine
        self._config = config
        self._nursery = nursery
        self._allow_delete = allow_delete
        self._api_versions = api_versions
        self._request_latency = request_latency
        # Shared by every org: the thread budgets are the process's, not a tenant's.
        self._io_limiter = trio.CapacityLimiter(16)
        self._wait_limiter = trio.CapacityLimiter(256)
        self._brokers: dict[int, Broker] = {}
        self.default = self.get(engine.org_id)

    def get(self, org_id: int) -> Broker:
        broker = self._brokers.get(org_id)
        if broker is None:
            broker = Broker(
                self._engine.for_org(org_id),
                allow_delete=self._allow_delete,
                api_versions=self._api_versions,
                config=self._config,
                io_limiter=self._io_limiter,
                wait_limiter=self._wait_limiter,
            )
            broker.request_latency = self._request_latency
            broker.durable.nursery = self._nursery  # sync rounds start ahead of their answers
            self._nursery.start_soon(broker.groups.run)
            self._brokers[org_id] = broker
        return broker
