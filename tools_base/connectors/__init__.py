"""The ``@goondan/base`` connectors: modules exporting ``async def run(ctx)``.

Each is the ``spec.entry`` of one Connector in ``tools_base/goondan.yaml`` and runs in a
connector process of its own (see :mod:`tools_base._connector`). The HTTP ones (``webhook``,
``slack``, ``github``, ``discord``) serve their own listener through :mod:`._http`; ``telegram``
polls, ``cli`` reads standard input. The module docstrings are the reference for settings,
events, instance keys and properties.
"""
