"""Why a member of a cluster cannot join it: the errors connecting to NATS raises.

Apart from the settings that connect, so that the checks a connection runs (the anonymous
probe of :mod:`~orchestrator.cluster.anonymous`) raise them without importing the settings.
"""

from __future__ import annotations

from goondan.errors import DeliveryError


class ClusterUnavailable(DeliveryError):
    """NATS cannot be reached, refuses our credentials, or lacks JetStream."""

    code = "CLUSTER_UNAVAILABLE"


class ClusterTaken(ClusterUnavailable):
    """Another live process holds the cluster's leadership, or this node's name."""


class ClusterAuthRefused(ClusterUnavailable):
    """NATS refused our credentials, or its certificate could not be verified."""


class ClusterServerOpen(ClusterAuthRefused):
    """The NATS server admits clients without credentials (and ``insecure`` is off)."""
