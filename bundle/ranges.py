"""Upstream's semver ranges (npm's syntax: ``^1.0.0``, ``~1.2``, ``1.x``, ``>=1 <2``,
``1.2.3 - 2``) as PEP 440 specifiers, which pip understands.

The translation follows npm's definitions (https://github.com/npm/node-semver#ranges):

=====================  ======================  =====================================
range                  specifier               why
=====================  ======================  =====================================
``^1.2.3``             ``>=1.2.3,<2``          caret: the left-most non-zero part fixed
``^0.2.3``             ``>=0.2.3,<0.3``
``^0.0.3``             ``>=0.0.3,<0.0.4``
``~1.2.3``, ``~1.2``   ``>=1.2.3,<1.3``        tilde: the minor fixed when given
``~1``                 ``>=1,<2``
``1.2.3``, ``=1.2.3``  ``==1.2.3``             exact
``1.2``, ``1.2.x``     ``==1.2.*``             a partial version is a wildcard
``*``, ``x``, empty    (any)
``>1.2``               ``>=1.3``               a partial bound means its whole span
``<=1.2``              ``<1.3``
``1.2 - 2.3``          ``>=1.2,<2.4``          hyphen: inclusive; a partial upper bound
                                               covers its span
``>=1 <2``             ``>=1,<2``              space: all of them
=====================  ======================  =====================================

Pre-release tags map to PEP 440's (``1.0.0-beta.2`` → ``1.0.0b2``; ``alpha``/``a``,
``beta``/``b``, ``rc``; other tags are refused) and build metadata (``+build``) is dropped, as
npm ignores it when comparing. PEP 440 has no union, so ``||`` is refused. A range that is
already a PEP 440 specifier (``==``, ``~=``, ``!=``, or comma-separated) is taken as it is.
"""

from __future__ import annotations

import re

_PARTIAL = re.compile(
    r"^v?(?P<major>\d+|[xX*])"
    r"(?:\.(?P<minor>\d+|[xX*])"
    r"(?:\.(?P<patch>\d+|[xX*])(?:-(?P<pre>[0-9A-Za-z.-]+))?)?)?"
    r"(?:\+[0-9A-Za-z.-]+)?$"
)
_COMPARATOR = re.compile(r"^(?P<op>\^|~>?|>=|<=|>|<|=)?\s*(?P<version>.*)$")
_HYPHEN = re.compile(r"^(?P<low>\S+)\s+-\s+(?P<high>\S+)$")
_PRE_TAGS = {"alpha": "a", "a": "a", "beta": "b", "b": "b", "rc": "rc", "c": "rc"}


class RangeError(ValueError):
    """A range with no PEP 440 equivalent, or not a range at all."""


class _Partial:
    """``1``, ``1.2`` or ``1.2.3[-pre]``: the parts given (a wildcard ends them)."""

    def __init__(self, text: str) -> None:
        match = _PARTIAL.match(text)
        if match is None:
            raise RangeError(f"{text!r} is not a version")
        parts: list[int] = []
        for name in ("major", "minor", "patch"):
            part = match.group(name)
            if part is None or not part.isdigit():
                break
            parts.append(int(part))
        self.parts = parts
        self.pre = _pre_release(match.group("pre")) if len(parts) == 3 else ""

    def text(self, parts: list[int] | None = None) -> str:
        """The version (``parts`` instead of its own, without the pre-release)."""
        if parts is not None:
            return ".".join(map(str, parts))
        return ".".join(map(str, self.parts)) + self.pre

    def bumped(self, index: int) -> str:
        """The first version past the span that the parts up to ``index`` fix."""
        kept = self.parts[: index + 1]
        kept[index] += 1
        return self.text(kept)


def _pre_release(tag: str | None) -> str:
    if tag is None:
        return ""
    match = re.fullmatch(r"(?P<name>[A-Za-z]+)(?:[.-]?(?P<number>\d+))?", tag)
    if match is None or match.group("name").lower() not in _PRE_TAGS:
        raise RangeError(f"pre-release {tag!r} has no PEP 440 form (use alpha, beta or rc)")
    return f"{_PRE_TAGS[match.group('name').lower()]}{match.group('number') or 0}"


def _comparator(op: str, version: _Partial) -> list[str]:
    parts = version.parts
    if not parts:  # a wildcard: `*`, `>=*`
        return ["<0"] if op in ("<", ">") else []
    if op == "^":
        # the left-most non-zero part is fixed (the last part given when all are zero)
        fixed = next((i for i, part in enumerate(parts) if part != 0), len(parts) - 1)
        return [f">={version.text()}", f"<{version.bumped(fixed)}"]
    if op in ("~", "~>"):
        return [f">={version.text()}", f"<{version.bumped(min(1, len(parts) - 1))}"]
    full = len(parts) == 3
    if op in ("", "="):
        return [f"=={version.text()}"] if full else [f"=={version.text()}.*"]
    if op == ">":
        return [f">{version.text()}"] if full else [f">={version.bumped(len(parts) - 1)}"]
    if op == "<=":
        return [f"<={version.text()}"] if full else [f"<{version.bumped(len(parts) - 1)}"]
    return [f"{op}{version.text()}"]  # >= and < read a partial version as its first one


def pep440_specifier(range_: str) -> str:
    """The PEP 440 specifier of upstream's semver ``range_`` (``""`` for any version).

    Raises :class:`RangeError` for a union (``||``), an unknown pre-release tag, or text that
    is not a range.
    """
    # packaging costs ~10 ms to import: only bundles that declare dependencies pay it
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    text = range_.strip()
    if "||" in text:
        raise RangeError(f"{range_!r}: a union (||) has no PEP 440 form; write one range")
    if text.startswith(("==", "~=", "!=")) or "," in text:
        try:
            return str(SpecifierSet(text))
        except InvalidSpecifier as exc:
            raise RangeError(f"{range_!r} is not a PEP 440 specifier: {exc}") from None
    hyphen = _HYPHEN.match(text)
    if hyphen is not None:
        low, high = _Partial(hyphen.group("low")), _Partial(hyphen.group("high"))
        clauses = _comparator(">=", low) + (_comparator("<=", high) if high.parts else [])
    else:
        clauses = []
        # `>= 1.2` (a space after the operator) is one comparator, as npm reads it
        words = re.sub(r"(\^|~>?|>=|<=|>|<|=)\s+", r"\1", text).split()
        for word in words:
            match = _COMPARATOR.match(word)
            assert match is not None  # every word matches: the operator is optional
            clauses += _comparator(match.group("op") or "", _Partial(match.group("version")))
    specifier = ",".join(clauses)
    try:
        SpecifierSet(specifier)
    except InvalidSpecifier as exc:  # pragma: no cover - the clauses above are all valid
        raise RangeError(f"{range_!r}: {exc}") from None
    return specifier


def caret(version: str) -> str:
    """npm's default range for a version just added: ``^version``."""
    return f"^{version}"
