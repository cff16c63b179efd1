"""The README is the product's page and docs/ holds the rest: the README stays short, every link and
image in them resolves to a file of the repository, every figure is written by a command printed
beside it, and the prose names no issue numbers or commit hashes (a reader has neither)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
README_MAX_LINES = 400
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".svg", ".gif", ".webp")

LINK = re.compile(r"(!?)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^\s*```")
INLINE_CODE = re.compile(r"`([^`]+)`")
# A command: optional VAR=value assignments, then a program this project's pages tell people to run.
COMMAND = re.compile(
    r"^\s*(?:[A-Z_][A-Z0-9_]*=\S*\s+)*(?:\.venv/bin/)?(?:reprise|python|python3|make|pytest)\b"
)
ISSUE_NUMBER = re.compile(r"\bissues?\s*#?\s*[0-9]", re.IGNORECASE)
# What measures the lab's trained models (a lab trace is not: it is drawn from the world, not the models).
LAB_RUN = re.compile(
    r"\breprise (?:lab (?:quality|judge)|profile k|cascade train"
    r"|bench (?:replay|runtime|simulate|gpu|reads))\b"
)
LAB_WEIGHTS = re.compile(r"^>?\s*Lab weights: recipe `([^`]+)`")
# 7 to 40 hex digits holding at least one digit and one letter, standing alone: a commit hash.
COMMIT_HASH = re.compile(r"(?<![0-9A-Za-z])(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![0-9A-Za-z])")


def pages() -> list[Path]:
    return [README, *sorted((ROOT / "docs").rglob("*.md"))]


def page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


@dataclass(frozen=True)
class Link:
    page: Path
    line: int  # 0-based index in the page's lines
    target: str
    image: bool

    def resolved(self) -> Path:
        return (self.page.parent / self.target.split("#", 1)[0]).resolve()


def links(page: Path) -> Iterator[Link]:
    """Every relative link and image of a page, outside code blocks (where brackets are code)."""
    fenced = False
    for number, line in enumerate(page.read_text().splitlines()):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        for match in LINK.finditer(INLINE_CODE.sub("", line)):
            target = match.group(2)
            if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue  # a URL or an anchor of the same page
            yield Link(page, number, target, image=match.group(1) == "!")


def commands(lines: list[str]) -> Iterator[str]:
    """The command lines among these: each line of a fenced block (continuation lines joined) and
    each inline code span that starts like a command."""
    fenced, pending = False, ""
    for line in lines:
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            text = line.strip()
            if text.endswith("\\"):
                pending += text[:-1].rstrip() + " "
                continue
            if COMMAND.match(pending + text):
                yield pending + text
            pending = ""
            continue
        yield from (span for span in INLINE_CODE.findall(line) if COMMAND.match(span))


def section_before(page: Path, line: int) -> list[str]:
    """The lines of the section an image stands in, from its heading down to the image."""
    lines = page.read_text().splitlines()
    start = max((n for n in range(line + 1) if lines[n].startswith("#")), default=0)
    return lines[start:line]


def writes(command: str, figure: str) -> bool:
    """Whether a command line names where the figure is written: its path, or its folder given to an
    option that writes fixed file names into a folder (`--plots DIR`)."""
    if figure in command.split() or f"={figure}" in command:
        return True
    folder = figure.rsplit("/", 1)[0]
    return bool(re.search(rf"--plots[ =]{re.escape(folder)}/?(\s|$)", command))


@pytest.mark.parametrize("page", pages(), ids=page_id)
def test_every_link_and_image_resolves_to_a_file_in_the_repository(page: Path) -> None:
    broken = [
        f"{page_id(page)}:{link.line + 1}: {link.target}"
        for link in links(page)
        if not link.resolved().is_relative_to(ROOT) or not link.resolved().exists()
    ]
    assert not broken, "links to nothing:\n" + "\n".join(broken)


@pytest.mark.parametrize("page", pages(), ids=page_id)
def test_every_image_is_written_by_a_command_printed_before_it_in_its_section(page: Path) -> None:
    orphans = []
    for link in links(page):
        if not link.image:
            continue
        figure = str(link.resolved().relative_to(ROOT))
        section = section_before(page, link.line)
        named_in_prose = any(figure.rsplit("/", 1)[-1] in line for line in section)
        if not any(writes(command, figure) for command in commands(section)) or not named_in_prose:
            orphans.append(f"{page_id(page)}:{link.line + 1}: {figure}")
    assert not orphans, "figures with no command writing them above, in their section:\n" + "\n".join(orphans)


def test_every_picture_under_docs_is_shown_by_a_page() -> None:
    shown = {link.resolved() for page in pages() for link in links(page) if link.image}
    pictures = [p for p in (ROOT / "docs").rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES]
    unshown = sorted(str(p.relative_to(ROOT)) for p in pictures if p.resolve() not in shown)
    assert not unshown, f"pictures no page shows (show them with their command, or delete them): {unshown}"


def repository_paths(page: Path) -> Iterator[tuple[int, str]]:
    """Paths of this repository named in a page's code (`db/cache.py`, `bench/results/lab/x.json`):
    words of code spans and code blocks that start with one of the repository's top folders."""
    tops = {p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".")}
    fenced = False
    for number, line in enumerate(page.read_text().splitlines(), start=1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        for code in [line] if fenced else INLINE_CODE.findall(line):
            for word in code.split():
                path = word.strip("()[],;'\"").split(":", 1)[0].split("#", 1)[0]
                if "/" in path and path.split("/", 1)[0] in tops and not re.search(r"[*<>{}|$]|\.\.", path):
                    yield number, path.rstrip("/")


@pytest.mark.parametrize("page", pages(), ids=page_id)
def test_every_repository_path_named_in_code_exists(page: Path) -> None:
    """A module, test or result a page names is where the page says: moved code takes its docs along."""
    missing = [
        f"{page_id(page)}:{n}: {path}" for n, path in repository_paths(page) if not (ROOT / path).exists()
    ]
    assert not missing, "paths that are not in the repository:\n" + "\n".join(missing)


def test_the_readme_is_a_page_not_a_notebook() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines: move detail to docs/"


@pytest.mark.parametrize("page", pages(), ids=page_id)
def test_no_issue_numbers_or_commit_hashes(page: Path) -> None:
    found = [
        f"{page_id(page)}:{number}: {match.group(0)!r}"
        for number, line in enumerate(page.read_text().splitlines(), start=1)
        for match in [*ISSUE_NUMBER.finditer(line), *COMMIT_HASH.finditer(line)]
    ]
    assert not found, "a reader has neither issues nor commits to look up:\n" + "\n".join(found)


def lab_stamps(lines: list[str]) -> tuple[list[tuple[int, str]], int | None]:
    """A results page's `Lab weights: recipe` lines (line, recipe) and the first line that runs the lab."""
    stamps = [(n, match.group(1)) for n, line in enumerate(lines) if (match := LAB_WEIGHTS.match(line))]
    return stamps, next((n for n, line in enumerate(lines) if LAB_RUN.search(line)), None)


@pytest.mark.parametrize("page", sorted((ROOT / "docs" / "results").glob("*.md")), ids=page_id)
def test_lab_figures_name_the_recipe_of_the_weights_they_were_measured_on(page: Path) -> None:
    """docs/results/README.md, "Lab weights": a page that runs the lab's models says, before it does,
    which recipe's weights its figures come from, and lab.recipes.RECIPES has that recipe."""
    from lab.recipes import RECIPES

    if page.name == "README.md":
        return
    stamps, first_run = lab_stamps(page.read_text().splitlines())
    assert all(recipe in RECIPES for _, recipe in stamps), (
        f"{page_id(page)}: {stamps} against {list(RECIPES)}"
    )
    if first_run is not None:
        assert stamps and stamps[0][0] < first_run, (
            f"{page_id(page)}:{first_run + 1} runs the lab's models with no `Lab weights: recipe` line above"
        )


def test_the_rules_catch_what_they_are_for(tmp_path: Path) -> None:
    """A figure named only in prose, or written by a command into another folder, is refused; a
    figure written at its path, or into its folder by --plots, is accepted."""
    assert writes("reprise profile k --from x.json --plot docs/results/figs/p.png", "docs/results/figs/p.png")
    assert writes(
        "reprise bench simulate --rates 2,4 --plots docs/results/figs/milp/", "docs/results/figs/milp/s.png"
    )
    assert not writes("reprise bench simulate --rates 2,4 --plots figs/", "docs/cascade-slo-milp.png")
    assert not writes("reprise bench simulate --plots docs/results/figs/", "docs/results/figs/milp/s.png")
    assert list(commands(["```sh", "reprise bench cache \\", "  --entries 10 --json c.json", "```"])) == [
        "reprise bench cache --entries 10 --json c.json"
    ]
    assert list(commands(["run `REPRISE_X=1 reprise lab judge` or `make test`, not `ls`"])) == [
        "REPRISE_X=1 reprise lab judge",
        "make test",
    ]
    assert COMMIT_HASH.search("measured on commit 21cdaf1") and COMMIT_HASH.search("b05b485.json")
    assert not COMMIT_HASH.search("1,000,000 entries, 2000 scopes, 1000000 rows, a decade")
    assert ISSUE_NUMBER.search("Iss" + "ue 18: video") and not ISSUE_NUMBER.search("an issue of memory")
    runs = [
        "Lab weights: recipe `2026-11-27`",
        "```sh",
        "reprise lab trace --out t",
        "reprise profile k --json p",
    ]
    assert lab_stamps(runs) == ([(0, "2026-11-27")], 3) and lab_stamps(runs[1:])[1] == 2
    assert lab_stamps(["> Lab weights: recipe `x`", "reprise bench cache --json c.json"]) == (
        [(0, "x")],
        None,
    )
