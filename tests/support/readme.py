"""README.md's walkthroughs as data: sections by heading, fenced blocks, shell commands.

Tests run the commands exactly as written, so the README cannot drift from what the runtime
does. A section is found by its heading text; its fenced blocks keep their language (``sh``,
``python``, none for shown output). A ``sh`` block becomes :class:`Command` s: ``\\``
continuations joined, a heredoc kept with its command, full-line comments dropped, a trailing
comment kept apart (it may show the command's output, see :meth:`Command.output_sample`).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.walkthrough import Background, Shell

README = Path(__file__).resolve().parents[2] / "README.md"
_HEADING = re.compile(r"^(#{1,6}) (.+?)\s*$")
_HEREDOC = re.compile(r"<<-?\s*(['\"]?)(\w+)\1")
_APPROVAL_ID = re.compile(r"apr_(?:…|[0-9a-f]{16})")
_TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT[\d:.]+Z")


@dataclass(frozen=True, slots=True)
class Block:
    """One fenced block: its language (``""`` for none), text, and first line in README.md."""

    lang: str
    text: str
    line: int

    def commands(self) -> list[Command]:
        """The shell commands of a ``sh`` block, in order."""
        return parse_commands(self.text, self.line)


@dataclass(frozen=True, slots=True)
class Section:
    """The text under one heading, up to the next heading of the same or a higher level."""

    heading: str
    level: int
    blocks: list[Block] = field(default_factory=list)

    def blocks_of(self, lang: str) -> list[Block]:
        return [b for b in self.blocks if b.lang == lang]


@dataclass(frozen=True, slots=True)
class Command:
    """One command of a ``sh`` block."""

    text: str
    """What the shell runs: continuations joined, a heredoc's body included, without the
    trailing comment and without a final ``&``."""
    line: int
    """Its line in README.md, for failure messages."""
    comment: str | None = None
    """The trailing comment of its first line, if any."""
    background: bool = False
    """Written with a final ``&``."""
    notes: tuple[str, ...] = ()
    """The full-line comments right after it."""

    def parts(self) -> list[str]:
        """The commands joined by ``&&``, split apart (outside quotes)."""
        return [p.strip() for p in _split_outside_quotes(self.text, "&&")]

    def output_sample(self) -> re.Pattern[str] | None:
        """What README shows this command printing, as a pattern, when a comment of it (its
        trailing one, or one on the next line) starts like the output does: an approval id
        (``apr_…`` stands for any) or ``approved``. Timestamps stand for any timestamp."""
        for text in (self.comment, *self.notes):
            if text is not None and re.match(r"(?:approved )?apr_", text):
                return sample_pattern(text)
        return None


def sample_pattern(sample: str) -> re.Pattern[str]:
    """``sample`` as a pattern: approval ids and timestamps stand for any, spaces for any run
    of whitespace."""
    pieces = []
    for token in sample.split():
        if _TIMESTAMP.fullmatch(token):
            pieces.append(r"\S+")
        else:
            pieces.append(_APPROVAL_ID.sub(r"apr_[0-9a-f]{16}", re.escape(token)))
    return re.compile(r"\s+".join(pieces))


def sections(text: str) -> list[Section]:
    """Every section of a Markdown text (headings inside fenced blocks are not headings)."""
    out: list[Section] = []
    fence: list[str] | None = None
    lang, start = "", 0
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            if fence is None:
                fence, lang, start = [], line[3:].strip(), number + 1
            else:
                block = Block(lang, "\n".join(fence) + "\n", start)
                for section in out:  # a block belongs to its section and those around it
                    if _open(section, out):
                        section.blocks.append(block)
                fence = None
            continue
        if fence is not None:
            fence.append(line)
            continue
        heading = _HEADING.match(line)
        if heading:
            out.append(Section(heading.group(2), len(heading.group(1))))
    return out


def _open(section: Section, out: list[Section]) -> bool:
    """Whether ``section`` still holds what comes now: no later heading of its level or higher."""
    later = out[out.index(section) + 1 :]
    return all(s.level > section.level for s in later)


def section(heading: str, path: Path = README) -> Section:
    """The section of README.md titled ``heading`` (exactly, less Markdown backquotes)."""
    found = [s for s in sections(path.read_text()) if s.heading.replace("`", "") == heading]
    assert len(found) == 1, f"README.md has {len(found)} sections titled {heading!r}"
    return found[0]


def parse_commands(text: str, first_line: int = 1) -> list[Command]:
    """The commands of a shell script, as :class:`Command` s."""
    lines = text.splitlines()
    commands: list[Command] = []
    i = 0
    while i < len(lines):
        line, number = lines[i], first_line + i
        i += 1
        if not line.strip():
            continue
        if line.lstrip().startswith("#"):
            if commands and _follows(commands[-1], lines, i - 1, first_line):
                last = commands[-1]
                note = line.lstrip()[1:].strip()
                commands[-1] = Command(
                    last.text, last.line, last.comment, last.background, (*last.notes, note)
                )
            continue
        code, comment = _split_comment(line)
        while code.endswith("\\") and i < len(lines):
            code = code[:-1] + " "
            more, more_comment = _split_comment(lines[i])
            code += more.strip()
            comment = comment or more_comment
            i += 1
        heredoc = _HEREDOC.search(code)
        if heredoc:
            body = []
            while i < len(lines) and lines[i].strip() != heredoc.group(2):
                body.append(lines[i])
                i += 1
            i += 1  # the closing tag
            code = "\n".join([code, *body, heredoc.group(2)])
        code = code.rstrip()
        background = code.endswith("&") and not code.endswith("&&")
        if background:
            code = code[:-1].rstrip()
        commands.append(Command(code, number, comment, background))
    return commands


def _follows(command: Command, lines: list[str], index: int, first_line: int) -> bool:
    """Whether the comment at ``lines[index]`` comes right after ``command`` (no blank line,
    only other comments, in between)."""
    j = index - 1
    while j >= 0 and lines[j].lstrip().startswith("#"):
        j -= 1
    return j >= 0 and bool(lines[j].strip()) and first_line + j >= command.line


def _split_comment(line: str) -> tuple[str, str | None]:
    """``line`` without its trailing ``# comment`` (a ``#`` after whitespace, outside quotes),
    and the comment."""
    quote: str | None = None
    for i, char in enumerate(line):
        if quote is not None:
            if char == quote:
                quote = None
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip(), line[i + 1 :].strip()
    return line.rstrip(), None


def _split_outside_quotes(text: str, separator: str) -> list[str]:
    parts, quote, start, i = [], None, 0, 0
    while i < len(text):
        char = text[i]
        if quote is not None:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif text.startswith(separator, i):
            parts.append(text[start:i])
            start = i = i + len(separator)
            continue
        i += 1
    parts.append(text[start:])
    return parts


# Every fenced block of the site, and what becomes of it in the tests.

ROOT = README.parent
SHELL_LANGS = frozenset({"sh", "bash", "console", "shell"})
DATA_LANGS = frozenset({"yaml", "json", "toml"})
FATES = ("run", "parsed", "fragment", "not-run")
"""What an annotation right above a block (``<!-- FATE: NOTE -->``) says becomes of it:

``run: tests/...py::test_name``
    that test runs the block (finds it by this annotation or by its section);
``parsed: tests/...py::test_name``
    a list of commands, each parsed by goondan's own argument parser, none run (placeholders,
    daemons, a terminal UI); the note says why not run;
``fragment: Kind`` or ``fragment: Kind.spec.path``
    a YAML document without its envelope, or a part of a spec, validated where it goes;
``not-run: reason``
    not run, for the reason given (the tests list them).

A ``yaml``, ``json`` or ``toml`` block without one is validated as it is (goondan.yaml
documents by the bundle's own validation); any other block needs one."""
_ANNOTATION = re.compile(r"^<!--\s*(" + "|".join(FATES) + r"):\s*(.+?)\s*-->$")
_FENCE = re.compile(r"^```(\S*)\s*$")


@dataclass(frozen=True, slots=True)
class PageBlock:
    """One fenced block of a page of the site, with the annotation above it, if any."""

    page: str
    """Its page, relative to the repository (``docs/guides/cli.md``)."""
    lang: str
    text: str
    line: int
    """Its first line (the one after the opening fence)."""
    fate: str | None = None
    note: str = ""

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    def commands(self) -> list[Command]:
        return parse_commands(self.text, self.line)

    def test(self) -> tuple[str, str]:
        """The test file and function of a ``run`` or ``parsed`` annotation."""
        file, _, name = self.note.partition("::")
        return file, name


def site_pages() -> list[str]:
    """README.md and every Markdown page under docs/, relative to the repository."""
    pages = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").rglob("*.md"))
    return ["README.md", *pages]


def page_blocks(page: str, text: str | None = None) -> list[PageBlock]:
    """The fenced blocks of ``page`` (a top-level fence: the site indents none), annotated;
    of ``text`` when given (a page the site's build generates)."""
    blocks: list[PageBlock] = []
    lines = ((ROOT / page).read_text() if text is None else text).splitlines()
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        above = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        annotation = _ANNOTATION.match(above.strip())
        fate, note = annotation.groups() if annotation else (None, "")
        text = "\n".join(lines[i + 1 : end]) + "\n"
        blocks.append(PageBlock(page, opening.group(1), text, i + 2, fate, note))
        i = end + 1
    return blocks


def site_blocks() -> list[PageBlock]:
    """Every fenced block of the site."""
    return [block for page in site_pages() for block in page_blocks(page)]


def blocks_for(test_file: str, test_name: str, fate: str = "run") -> list[PageBlock]:
    """The blocks whose annotation names this test (``fate: test_file::test_name``)."""
    note = f"{test_file}::{test_name}"
    found = [b for b in site_blocks() if b.fate == fate and b.note == note]
    assert found, f"no block of the site is annotated `{fate}: {note}`"
    return found


def start_listening_daemon(shell: Shell, command: str, written: str) -> Background:
    """The daemon of ``command``, whose ``--listen`` address ``written`` (``HOST:PORT``) is
    bound on a free port instead; from now on the shell writes that port where a page wrote
    ``written``. Returned once the entry agent of the example swarms is ready."""
    host = written.rsplit(":", 1)[0]
    # `exec NAME=value program` is no command: bash runs that one as it is (it execs the
    # program itself, as the last command of -c)
    assigns = re.match(r"\w+=", command) is not None
    daemon = shell.start(command.replace(written, f"{host}:0"), exec_=not assigns)
    port = daemon.json_event("http api listening")["port"]
    shell.substitutions.append((written, f"{host}:{port}"))
    daemon.json_event("agent ready", agent="coordinator")
    return daemon


def decision_pattern(sample: str) -> re.Pattern[str]:
    """A decided approval as a page shows it (``... approved by uid 1000 (alice) pid 4242 on
    api.sock at ...``), as a pattern: ids and timestamps stand for any (as in
    :func:`sample_pattern`), and so do the uid, the user's name and the pid."""
    pieces = re.split(r"uid \d+ \(\S+\) pid \d+", sample)
    who = r"\s+uid \d+ \(\S+\) pid \d+\s+"
    return re.compile(who.join(sample_pattern(p).pattern for p in pieces))


def exported(command: str) -> dict[str, str]:
    """The variables an ``export NAME=value ...`` command sets, as a shell would read them."""
    words = shlex.split(command)
    assert words[0] == "export", command
    return dict(word.split("=", 1) for word in words[1:] if "=" in word)
