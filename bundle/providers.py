"""Models must name a provider an agent can start with here: ``validate`` refuses the rest.

An agent process refuses to start on an unknown provider, or on one whose SDK is not
installed; the same table (:mod:`goondan.providers`) tells ``validate`` so, with the same
``pip install`` line and the same code, before anything is started.
"""

from __future__ import annotations

from collections.abc import Iterable

from bundle import errors as E
from bundle.errors import ConfigIssue
from bundle.loader import Resource
from goondan.errors import DeliveryCode
from goondan.providers import known_names, provider, sdk_installed

E_PROVIDER_UNAVAILABLE = DeliveryCode.E_MODEL_PROVIDER_UNAVAILABLE
"""The code an agent process fails to start with when the SDK is missing."""


def provider_issues(resources: Iterable[Resource]) -> list[ConfigIssue]:
    """An issue for each Model of the bundle itself (packages' Models are only checked when
    used, by the agent) whose provider is unknown, or whose SDK is not installed."""
    issues = []
    for resource in resources:
        if resource.kind != "Model" or resource.package is not None:
            continue
        name = resource.spec.provider
        found = provider(name)
        if found is None:
            issues.append(
                resource.issue(
                    E.E_SCHEMA_INVALID,
                    f"unknown provider {name!r}: no agent could start with it",
                    ("spec", "provider"),
                    f"use {known_names()}",
                )
            )
        elif not sdk_installed(found):
            issues.append(
                resource.issue(
                    E_PROVIDER_UNAVAILABLE,
                    f"provider {name!r} needs the {found.sdk} SDK, which is not installed",
                    ("spec", "provider"),
                    found.install,
                )
            )
    return issues
