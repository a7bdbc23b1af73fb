"""Handler modules of the built-in ``@goondan/base`` tools.

Each module is the ``spec.entry`` of one Tool in ``tools_base/goondan.yaml`` and exports
``handlers`` (export name → handler); Tools that take config also export ``configure(config)``.
The module docstrings are the reference for parameters, outputs, config keys and error codes.
"""
