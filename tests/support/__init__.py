"""Helpers shared by the tests: test modules and conftest files import from here, never from
each other (tests/test_imports.py keeps it so)."""
