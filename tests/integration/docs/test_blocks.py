"""Every fenced block of the site is run, validated, or says why not.

A shell or Python block names the test that runs it (``<!-- run: FILE::TEST -->`` right above
it); a list of commands too long to run names the test that parses each of them
(``<!-- parsed: ... -->``); YAML, JSON and TOML blocks are validated here, goondan.yaml
documents by the bundle's own validation (a part of a document says where it goes:
``<!-- fragment: Agent.spec -->``); anything else says why it is not run
(``<!-- not-run: reason -->``). :func:`test_every_block_is_run_validated_or_says_why_not`
fails on a block that does none of these, and on an annotation naming a test that does not
exist or does not read that page.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from bundle.loader import validate_resources
from bundle.lockfile import LockfileError, read_lockfile
from bundle.packages import ENTRY_POINT_GROUP
from bundle.source import parse_documents
from bundle.spec_kinds import SPEC_MODELS
from orchestrator.reference import PAGES
from tests.support import readme
from tests.support.readme import DATA_LANGS, PageBlock

ROOT = Path(__file__).resolve().parents[3]
UNANNOTATED_NOT_RUN = {
    "docs/performance.md": (
        "the benchmarks at full size behind the page's figures, minutes each "
        "(tests/integration/test_benchmarks_quick.py runs each --quick); the page is the "
        "benchmarks' own, so the reason is kept here"
    ),
}
"""Pages whose blocks are not run, with the reason, kept here rather than on the page."""
ENVELOPE = ("apiVersion", "kind", "metadata", "spec")


def fate_of(block: PageBlock) -> str:
    """What becomes of ``block``: ``run``, ``parsed``, ``validated`` or ``not-run``."""
    if block.page in UNANNOTATED_NOT_RUN and block.fate is None:
        return "not-run"
    if block.fate in ("run", "parsed", "not-run"):
        return block.fate
    if block.lang in DATA_LANGS:
        return "validated"  # fragments too
    return "none"


def annotation_problem(block: PageBlock) -> str | None:
    """Why ``block``'s annotation does not hold, if it does not."""
    fate = fate_of(block)
    if fate == "none":
        return f"a {block.lang or 'plain'} block neither run, validated nor annotated"
    if fate == "not-run" and not (block.note or block.page in UNANNOTATED_NOT_RUN):
        return "not-run without a reason"
    if block.fate == "fragment" and block.lang != "yaml":
        return "only a YAML block can be a fragment"
    if fate in ("run", "parsed"):
        file, name = block.test()
        path = ROOT / file
        if not path.is_file():
            return f"names {file}, which does not exist"
        source = path.read_text()
        if f"def {name}(" not in source:
            return f"names {name}, which {file} does not define"
        if Path(block.page).name not in source:
            return f"names {file}, which does not read {block.page}"
    return None


def test_every_block_is_run_validated_or_says_why_not() -> None:
    blocks = readme.site_blocks()
    problems = [f"{b.where}: {p}" for b in blocks if (p := annotation_problem(b))]
    assert problems == []
    shell_or_python = [b for b in blocks if b.lang in readme.SHELL_LANGS | {"python"}]
    assert len(shell_or_python) >= 30  # the finder still finds the site's blocks
    assert all(fate_of(b) != "validated" for b in shell_or_python)


def test_every_annotation_is_right_above_a_block() -> None:
    """An annotation left behind when its block moved would say nothing of any block."""
    stray = []
    for page in readme.site_pages():
        lines = (ROOT / page).read_text().splitlines()
        for number, line in enumerate(lines):
            if re.match(r"<!--\s*(" + "|".join(readme.FATES) + r"):", line.strip()):
                after = next((x for x in lines[number + 1 :] if x.strip()), "")
                if not after.startswith("```"):
                    stray.append(f"{page}:{number + 1}")
    assert stray == []


def test_the_blocks_not_run_are_listed_with_their_reason() -> None:
    """The ledger of what is not run, printed with ``-rA``; each reason is a sentence."""
    ledger = [
        f"{b.where} ({b.lang or 'plain'}): {b.note or UNANNOTATED_NOT_RUN[b.page]}"
        for b in readme.site_blocks()
        if fate_of(b) == "not-run"
    ]
    print("\n".join(ledger))
    assert all(len(line.split(": ", 1)[1]) > 8 for line in ledger)


def test_the_scripts_a_block_not_run_names_exist() -> None:
    """A block not run still names real programs: each ``python PATH.py`` of one is a file of
    the repository (the benchmarks of the development and performance pages)."""
    named = [
        (b.where, path)
        for b in readme.site_blocks()
        if fate_of(b) == "not-run" and b.lang in readme.SHELL_LANGS
        for path in re.findall(r"\bpython (\S+\.py)\b", b.text)
    ]
    assert len(named) >= 10
    assert [(where, path) for where, path in named if not (ROOT / path).is_file()] == []


def test_an_unannotated_shell_block_is_caught() -> None:
    """The coverage rule itself: a new page's bare ``sh`` block fails it."""
    bare = PageBlock("docs/new.md", "sh", "goondan run\n", 3)
    assert annotation_problem(bare) == "a sh block neither run, validated nor annotated"
    named = PageBlock("docs/new.md", "sh", "x\n", 3, "run", "tests/README.md::test_gone")
    assert annotation_problem(named) == "names test_gone, which tests/README.md does not define"


DATA_BLOCKS = [b for b in readme.site_blocks() if b.lang in DATA_LANGS and b.fate != "not-run"]


@pytest.mark.parametrize("block", DATA_BLOCKS, ids=[b.where for b in DATA_BLOCKS])
def test_a_data_block_is_valid(block: PageBlock, tmp_path: Path) -> None:
    if block.lang == "json":
        json.loads(block.text)
    elif block.lang == "toml":
        check_toml(tomllib.loads(block.text))
    elif "lockfileVersion:" in block.text:
        path = tmp_path / "goondan.lock.yaml"
        path.write_text(block.text)
        try:
            assert read_lockfile(path) is not None
        except LockfileError as exc:
            pytest.fail(f"{block.where}: {exc}")
    else:
        assert goondan_yaml_problems(block) == []


def check_toml(data: dict[str, Any]) -> None:
    """A pyproject fragment declares its package where goondan looks for packages."""
    groups = data.get("project", {}).get("entry-points", {})
    assert list(groups) == [ENTRY_POINT_GROUP], groups


def goondan_yaml_problems(block: PageBlock) -> list[str]:
    """What the bundle's validation says of each document of a goondan.yaml block: a whole
    document as the loader validates it; a fragment by its kind's spec model, where it goes,
    leaving out only what the fragment does not show (fields missing around it)."""
    documents, issues = parse_documents(block.text, Path(block.page))
    problems = [issue.message for issue in issues]
    whole = [d for d in documents if isinstance(d.data, dict) and set(ENVELOPE[:3]) <= set(d.data)]
    _, found, _ = validate_resources(whole)
    problems += [f"{i.resource} {i.field}: {i.message}" for i in found]
    for document in documents:
        if document in whole:
            continue
        data = document.data
        assert isinstance(data, dict), f"{block.where}: document {document.index + 1}"
        target = block.note if block.fate == "fragment" else str(data.get("kind", ""))
        problems += fragment_problems(data, target, block.where)
    return problems


def fragment_problems(data: dict[str, Any], target: str, where: str) -> list[str]:
    """``data`` checked as ``target``: ``Kind`` (a document without all of its envelope) or
    ``Kind.spec.field...`` (a part of a spec)."""
    kind, _, inside = target.partition(".")
    assert kind in SPEC_MODELS, f"{where}: say where this YAML goes (<!-- fragment: Kind... -->)"
    if inside:
        assert inside.startswith("spec"), f"{where}: a fragment goes in a spec: {target}"
        path = inside.split(".")[1:]
        spec: Any = data
        for field in reversed(path):
            spec = {field: spec}
    else:
        extra = set(data) - set(ENVELOPE)
        assert not extra, f"{where}: not in a {kind} document: {sorted(extra)}"
        assert data.get("kind", kind) == kind, where
        spec, path = data.get("spec", {}), []
    try:
        SPEC_MODELS[kind].model_validate(spec)
    except ValidationError as exc:
        return [
            f"{where}: {kind}.spec.{'.'.join(map(str, e['loc']))}: {e['msg']}"
            for e in exc.errors()
            if not (e["type"] == "missing" and len(concrete(e["loc"])) <= len(path) + 1)
        ]
    return []


def concrete(loc: tuple[int | str, ...]) -> list[int | str]:
    """A pydantic error's place without the union members it tried (``str``, ``tagged[...]``)."""
    return [p for p in loc if not (isinstance(p, str) and ("[" in p or p in ("str", "int")))]


def test_a_wrong_fragment_is_caught() -> None:
    """The validation is not vacuous: a misspelt field of a fragment is reported."""
    bad = {"tools": [{"ref": {"kind": "Tool", "name": "bash"}, "confg": {}}]}
    assert fragment_problems(bad, "Agent.spec", "here") != []
    assert fragment_problems({"listen": 8080}, "Swarm.spec.policy.api", "here") != []


def test_the_generated_reference_pages_hold_only_checked_blocks() -> None:
    """The pages the site's build writes from the code: the resources page's examples (the
    shipped swarms' first document of each kind) validate; the command reference's blocks are
    checked in test_parsed.py; the other pages have none."""
    for page, write in PAGES.items():
        blocks = readme.page_blocks(f"docs/{page}", write())
        if page == "reference/resources.md":
            assert {b.lang for b in blocks} == {"yaml"}
            for block in blocks:
                assert goondan_yaml_problems(block) == [], block.text
        elif page != "reference/cli.md":
            assert blocks == [], page
