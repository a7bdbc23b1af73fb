"""Every goondan.yaml resource kind, by name, with the model of its ``spec``."""

from __future__ import annotations

from bundle.spec_agent import AgentSpec, ModelSpec, ToolSpec
from bundle.spec_base import Spec
from bundle.spec_connector import ConnectionSpec, ConnectorSpec, ExtensionSpec
from bundle.spec_package import PackageSpec
from bundle.spec_remote import RemoteAgentSpec
from bundle.spec_swarm import SwarmSpec
from bundle.spec_testsuite import TestSuiteSpec

SPEC_MODELS: dict[str, type[Spec]] = {
    "Package": PackageSpec,
    "Model": ModelSpec,
    "Tool": ToolSpec,
    "Agent": AgentSpec,
    "Swarm": SwarmSpec,
    "Extension": ExtensionSpec,
    "Connector": ConnectorSpec,
    "Connection": ConnectionSpec,
    "RemoteAgent": RemoteAgentSpec,
    "TestSuite": TestSuiteSpec,
}

KINDS = tuple(SPEC_MODELS)
"""The kinds' names, in the order error messages list them."""
