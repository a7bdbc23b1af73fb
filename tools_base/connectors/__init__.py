"""The ``@goondan/base`` connectors: modules exporting ``async def run(ctx)``.

Each is declared as a ``kind: Connector`` resource in ``tools_base/goondan.yaml`` and runs in a
connector process of its own (see :mod:`tools_base._connector`). The HTTP ones (``webhook``,
``slack``, ``github``, ``discord``) serve their own listener through :mod:`._http`.
"""
