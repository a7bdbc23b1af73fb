"""Modules of the built-in ``@goondan/base`` connectors.

Each module is the ``spec.entry`` of one Connector in ``tools_base/goondan.yaml`` and exports
``async def run(ctx: ConnectorContext) -> None`` (see ``tools_base._connector``). The module
docstrings are the reference for settings, events, instance keys and properties.
"""
