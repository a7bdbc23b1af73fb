"""Former home of the goondan.yaml resource models, kept while importers move to their new
modules (``bundle.spec_base``, ``spec_package``, ``spec_agent``, ``spec_swarm``,
``spec_connector``, ``spec_kinds``); it re-exports the same classes, so nothing is duplicated."""

from bundle.spec_agent import (
    BudgetCeilings,
    Budgets,
    ModelLimits,
    ModelPricing,
    ModelSpec,
)
from bundle.spec_base import PACKAGE_NAME, ValueFrom, ValueSource
from bundle.spec_connector import Ingress, IngressRule
from bundle.spec_package import PackageDependency
from bundle.spec_swarm import LABEL_KEY_PATTERN, LABEL_VALUE_PATTERN, NODE_NAME_PATTERN

__all__ = [
    "LABEL_KEY_PATTERN",
    "LABEL_VALUE_PATTERN",
    "NODE_NAME_PATTERN",
    "PACKAGE_NAME",
    "BudgetCeilings",
    "Budgets",
    "Ingress",
    "IngressRule",
    "ModelLimits",
    "ModelPricing",
    "ModelSpec",
    "PackageDependency",
    "ValueFrom",
    "ValueSource",
]
