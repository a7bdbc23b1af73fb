"""A Connection of the test swarm fed line by line through a FIFO (the ``feed`` connector of
``tests/fixtures/bundles/feed_connector.py``)."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.support.swarm import FIXTURES

FEED_CONNECTION = """\
apiVersion: goondan.ai/v1
kind: Connector
metadata: {name: feed}
spec:
  entry: ./feed_connector.py
  events:
    - {name: to_beta}
    - {name: chatter}
---
apiVersion: goondan.ai/v1
kind: Connection
metadata: {name: line}
spec:
  connectorRef: Connector/feed
  config:
    feed: {value: FEED}
  ingress:
    rules:
      - match: {event: to_beta}
        route: {agentRef: Agent/beta, instanceKeyPrefix: "chat:", instanceKeyProperty: chat}
"""
"""The Connector ``feed`` and the Connection ``line``; ``FEED`` stands for the FIFO's path."""


def connection_yaml(directory: Path, feed: Path) -> str:
    """:data:`FEED_CONNECTION` reading ``feed``, its connector copied into ``directory``."""
    shutil.copy(FIXTURES / "feed_connector.py", directory / "feed_connector.py")
    return FEED_CONNECTION.replace("FEED", str(feed))
