"""The documentation cannot drift from the results or the code (CPU, no solve).

Results files: a results file is named by a path ending in ``results/NAME`` with NAME ending in
.json, .md, .csv or .png (README.md and docs/*.md write ``benchmarks/results/NAME``, the index
benchmarks/README.md ``results/NAME``); bare file names do not count. Every name in those pages
and in the package and script sources exists in benchmarks/results, and every file there is
named in README.md, docs/*.md or the index.

Commands: every line of a ```bash block in README.md and docs/*.md, and every inline code span
of README.md, docs/*.md and benchmarks/README.md, that runs a command of this project
(``python -m fem3d.*|tridiag.*|gpucfd.*`` or ``python scripts/NAME.py``, also after ``mpirun``
or ``mpiexec`` and its options) is called through the command's own ``main`` with the exact
arguments and stopped right after its argument parser accepted them. Parsing needs no device,
so commands with ``--device gpu`` are checked too. Every ``--option`` in an inline code span
must be an option of one of those commands.
"""

import argparse
import importlib
import importlib.util
import os
import re
import shlex

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "benchmarks", "results")
SCRIPTS = os.path.join(ROOT, "scripts")
PAGES = [
    "README.md",
    *sorted(f"docs/{f}" for f in os.listdir(os.path.join(ROOT, "docs")) if f.endswith(".md")),
    "benchmarks/README.md",
]
SOURCES = ["gpucfd", "fem3d", "tridiag", "scripts"]
RESULT_NAME = re.compile(r"results/([A-Za-z0-9_.+-]+\.(?:json|md|csv|png))(?![\w.])")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
SPAN = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\]\(([^)\s]+)\)")
OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
PACKAGES = ("fem3d.", "tridiag.", "gpucfd.")


def read(page):
    with open(os.path.join(ROOT, page), encoding="utf-8") as fh:
        return fh.read()


def source_texts():
    for top in SOURCES:
        for folder, _, files in os.walk(os.path.join(ROOT, top)):
            for f in files:
                if f.endswith(".py"):
                    with open(os.path.join(folder, f), encoding="utf-8") as fh:
                        yield os.path.relpath(os.path.join(folder, f), ROOT), fh.read()


def spans(text):
    """Inline code spans outside fenced blocks."""
    return SPAN.findall(FENCE.sub("", text))


def bash_lines(text):
    """Lines of ```bash blocks, continuation lines joined."""
    for lang, body in FENCE.findall(text):
        if lang == "bash":
            yield from body.replace("\\\n", " ").splitlines()


def project_argv(line):
    """(how to find main, argv) if ``line`` runs a command of this project, else None."""
    words = shlex.split(line, comments=True)
    if words[:1] in (["mpirun"], ["mpiexec"]):
        words = words[words.index("python") :] if "python" in words else []
    if len(words) >= 3 and words[:2] == ["python", "-m"] and words[2].startswith(PACKAGES):
        return ("module", words[2]), words[3:]
    if len(words) >= 2 and words[0] == "python" and re.fullmatch(r"scripts/\w+\.py", words[1]):
        return ("script", words[1]), words[2:]
    return None


def commands():
    """(page, command line) of every project command shown in the pages."""
    found = []
    for page in PAGES:
        text = read(page)
        lines = [*spans(text), *([] if page == "benchmarks/README.md" else bash_lines(text))]
        found += [(page, line.strip()) for line in lines if project_argv(line)]
    return found


COMMANDS = commands()


class Parsed(Exception):
    """Raised right after a command's parser accepted its arguments."""

    def __init__(self, parser):
        super().__init__(parser.prog)
        self.parser = parser


def command_main(kind, name):
    if kind == "module":
        return importlib.import_module(name).main
    module = f"docs_checked_{os.path.basename(name)[:-3]}"
    spec = importlib.util.spec_from_file_location(module, os.path.join(ROOT, name))
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script.main


def parse_only(line, monkeypatch, capsys):
    """The parser of ``line``'s command after it accepted ``line``'s arguments."""
    (kind, name), argv = project_argv(line)
    monkeypatch.syspath_prepend(SCRIPTS)  # the scripts import their neighbours
    main = command_main(kind, name)
    original = argparse.ArgumentParser.parse_args

    def parse_args(self, args=None, namespace=None):
        original(self, args, namespace)
        raise Parsed(self)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_args)
    try:
        main(argv)
    except Parsed as done:
        return done.parser
    except SystemExit as exc:
        pytest.fail(f"{line}: arguments rejected (exit {exc.code}): {capsys.readouterr().err.strip()}")
    pytest.fail(f"{line}: main returned without parsing arguments")


def option_strings(parser):
    """Every option of ``parser`` and of its sub-commands."""
    names = set()
    for action in parser._actions:
        names.update(action.option_strings)
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                names |= option_strings(sub)
    return names


def test_every_named_results_file_exists():
    named = [(where, name) for where in PAGES for name in RESULT_NAME.findall(read(where))]
    named += [(where, name) for where, text in source_texts() for name in RESULT_NAME.findall(text)]
    missing = sorted({f"{where}: {name}" for where, name in named if not os.path.isfile(os.path.join(RESULTS, name))})
    assert named and not missing, "named but not in benchmarks/results:\n" + "\n".join(missing)


def test_every_results_file_is_named_in_the_docs_or_the_index():
    named = {name for page in PAGES for name in RESULT_NAME.findall(read(page))}
    unnamed = sorted(set(os.listdir(RESULTS)) - named)
    assert not unnamed, "results files named nowhere (add them to benchmarks/README.md):\n" + "\n".join(unnamed)


def test_every_results_file_is_in_the_index():
    indexed = set(RESULT_NAME.findall(read("benchmarks/README.md")))
    assert sorted(set(os.listdir(RESULTS)) - indexed) == []


def test_relative_links_resolve():
    broken = []
    for page in PAGES:
        for target in LINK.findall(read(page)):
            path = target.split("#")[0]
            if path and "://" not in path and not os.path.exists(os.path.join(ROOT, os.path.dirname(page), path)):
                broken.append(f"{page}: {target}")
    assert not broken, "\n".join(broken)


def test_readme_is_short_and_holds_the_ci_set_up_commands():
    readme = read("README.md")
    ci = read(".ci/run")
    assert len(readme.splitlines()) <= 250
    lines = [line.split("#")[0].strip() for line in bash_lines(readme)]
    for command in ('pip install -e ".[test]"', "tests/run-tests"):
        assert command in ci and command in lines


def test_the_pages_show_commands_of_every_kind():
    kinds = {project_argv(line)[0] for _, line in COMMANDS}
    assert {
        ("module", "fem3d.cavity"),
        ("module", "fem3d.verify"),
        ("module", "tridiag.cases.heat"),
        ("script", "scripts/bench_solvers.py"),
    } <= kinds
    assert any(line.startswith(("mpirun", "mpiexec")) for _, line in COMMANDS)


@pytest.mark.parametrize("page, line", COMMANDS, ids=[f"{p}:{line[:60]}" for p, line in COMMANDS])
def test_command_parses(page, line, monkeypatch, capsys):
    parse_only(line, monkeypatch, capsys)


def test_a_removed_option_is_caught(monkeypatch, capsys):
    with pytest.raises(pytest.fail.Exception, match="arguments rejected"):
        parse_only("python -m fem3d.cavity --re 100 --no-such-option", monkeypatch, capsys)


def test_every_option_named_inline_exists(monkeypatch, capsys):
    known = set()
    for _, line in COMMANDS:
        with monkeypatch.context() as patch:
            known |= option_strings(parse_only(line, patch, capsys))
    named = {
        (page, option)
        for page in PAGES
        for span in spans(read(page))
        if not span.startswith("pip ")
        for option in OPTION.findall(span)
    }
    unknown = sorted(f"{page}: {option}" for page, option in named if option not in known)
    assert not unknown, "options no command has:\n" + "\n".join(unknown)


def test_readme_first_cavity_command_is_the_one_test_cavity_runs():
    """tests/test_cavity.py runs the README's first cavity command exactly as written."""
    first = next(line for line in bash_lines(read("README.md")) if "fem3d.cavity" in line)
    assert shlex.split(first, comments=True) == ["python", "-m", "fem3d.cavity"]
