"""The config plane: goondan.yaml → validated resources, refs, and per-agent plans.

``load_bundle(path)`` returns a :class:`Bundle` or raises :class:`BundleError` listing every
problem, each naming the file and line, the resource, the field and what to do. The layers
under it are public too: :func:`parse_documents` (YAML text → documents with line maps) and
:func:`validate_resources` (documents → resources, per-document rules only).
"""

from bundle.bundle import Bundle, ResolvedExtension, ResolvedTool
from bundle.entry import EntryLoadError, load_entry_module, resolve_handlers
from bundle.errors import BundleError, ConfigIssue
from bundle.loader import Resource, validate_resources
from bundle.loading import load_bundle
from bundle.plan import AgentPlan, ExtensionPlan, ModelPlan, ToolExportPlan, ToolPlan
from bundle.schema import json_schema
from bundle.secrets import Secret, SecretUnavailable, resolve_value
from bundle.source import Document, parse_documents
from bundle.spec_base import API_VERSION, ObjectRef, ValueSource
from bundle.spec_kinds import KINDS

__all__ = [
    "API_VERSION",
    "KINDS",
    "AgentPlan",
    "Bundle",
    "BundleError",
    "ConfigIssue",
    "Document",
    "EntryLoadError",
    "ExtensionPlan",
    "ModelPlan",
    "ObjectRef",
    "ResolvedExtension",
    "ResolvedTool",
    "Resource",
    "Secret",
    "SecretUnavailable",
    "ToolExportPlan",
    "ToolPlan",
    "ValueSource",
    "json_schema",
    "load_bundle",
    "load_entry_module",
    "parse_documents",
    "resolve_handlers",
    "resolve_value",
    "validate_resources",
]
