"""The base extensions of ``@goondan/base``, declared in ``tools_base/goondan.yaml``.

Each module has a ``register(api)`` function (see :class:`tools_base.ExtensionApi`) and a
docstring that documents its behaviour and config keys.
"""
