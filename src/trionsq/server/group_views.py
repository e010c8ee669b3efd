"""What a broker learns of a consumer group before dealing its partitions again.

The sticky deal (broker/groups.py) starts from the previous owner of every
partition of the topic, and a broker holds only some of them (lookupd placed the
others elsewhere). lookupd's ``GET /group`` asks every broker of the topic what it
deals now (lookupd/groups.py): the broker asks it, in the configured order, and
takes the first usable answer; with no lookupd, or none answering, it deals from
its own last deal. docs/extensions.md, "Consumer groups".
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING
from urllib.parse import quote

from ..broker.groups import GroupView
from .lookupd_peers import LookupdAnswerError, lookupd_json

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from ..config import NsqdConfig

__all__ = ["LookupdGroupViews", "read_group_view"]

log = logging.getLogger("trionsq")


def read_group_view(document: object) -> GroupView | None:
    """``GET /group``'s answer as a view (None: not one): the owners of the partitions
    the brokers hold, and the members connected to any of them. A broker that could
    not be asked adds nothing: its partitions keep the owners this broker knew."""
    if not isinstance(document, dict):
        return None
    assignment = document.get("assignment")
    members = document.get("members", [])
    if not isinstance(assignment, dict) or not isinstance(members, list):
        return None
    owners: dict[int, str] = {}
    for member, partitions in assignment.items():
        if not isinstance(partitions, list):
            return None
        owners.update((p, member) for p in partitions if isinstance(p, int))
    return GroupView(owners, frozenset(m for m in members if isinstance(m, str)))


class LookupdGroupViews:
    """Asks the broker's lookupds (``GroupCoordinator.learn``)."""

    def __init__(self, http_addresses: Callable[[], Iterable[str]], config: NsqdConfig) -> None:
        """``http_addresses``: the connected lookupds' HTTP addresses now."""
        self._addresses = http_addresses
        self._config = config

    async def __call__(self, topic: str, channel: str) -> GroupView | None:
        """The group as the first lookupd that answers sees it; None if none does."""
        target = f"/group?topic={quote(topic, safe='')}&channel={quote(channel, safe='')}"
        config = self._config
        for address in dict.fromkeys(self._addresses()):
            try:
                document = await lookupd_json(
                    address,
                    target,
                    connect_timeout=config.http_client_connect_timeout,
                    request_timeout=config.http_client_request_timeout,
                )
            except LookupdAnswerError as error:
                log.info("GROUP(%s/%s): lookupd gave no view: %s", topic, channel, error)
                continue
            view = read_group_view(document)
            if view is not None:
                return view
            log.warning("GROUP(%s/%s): lookupd %s: not a /group answer", topic, channel, address)
        return None
