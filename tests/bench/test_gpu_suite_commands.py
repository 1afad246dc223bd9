"""bench/gpu_suite.sh spends scarce GPU time: every sparkops command in it must at least parse here, and
every implementation it names must exist, so a typo costs a CI run instead of a device call."""

from __future__ import annotations

import re
import shlex
import subprocess

import pytest

from sparkops.cli import build_parser
from sparkops.ops import OP_NAMES
from tests.helpers import REPO

SUITE = REPO / "bench" / "gpu_suite.sh"


def _logical_lines(text: str) -> list[str]:
    return [line for line in text.replace("\\\n", " ").splitlines() if not line.lstrip().startswith("#")]


def _commands_in(text: str) -> list[list[str]]:
    """`sparkops ...` argument lists in shell text (newlines, ;, &&, || and | end a command), also inside
    quoted `bash -c '...'` strings."""
    lex = shlex.shlex(text, posix=True, punctuation_chars=";&|\n")
    lex.whitespace = " \t"
    lex.whitespace_split = True
    toks = list(lex)
    out, i = [], 0
    while i < len(toks):
        if toks[i] == "sparkops":
            j = i + 1
            while j < len(toks) and not set(toks[j]) <= set(";&|\n"):
                j += 1
            out.append(toks[i + 1:j])
            i = j
        else:
            if "sparkops " in toks[i]:
                out += _commands_in(toks[i])
            i += 1
    return out


def _sparkops_commands(text: str) -> list[list[str]]:
    """The argument lists of every `sparkops ...` the suite runs, shell variables replaced by placeholders."""
    variables = dict(re.findall(r'^([A-Z_][A-Z0-9_]*)="([^"]*)"', text, re.M))
    text = "\n".join(_logical_lines(text))
    text = re.sub(r'\blog "[^"]*"', " ", text)  # messages, not commands
    for name, value in variables.items():  # $GATE, $FILL, ...: spelled out (they hold options)
        text = re.sub(rf"\${name}(?![A-Za-z0-9_])", lambda _: value, text)
    text = re.sub(r"\$(\{[^}]*\}|[A-Za-z_][A-Za-z_0-9]*|[0-9@])", "X", text)  # any other value: a placeholder
    # redirections are not arguments; a '>' glued to a word is inside a quoted argument (critical_path.py's selectors,
    # 'A>B'), not one
    text = re.sub(r'(?<!\w)\d*>>?&?\s*("[^"]*"|[^\s;|&]+)', " ", text)
    return _commands_in(text)


def test_the_suite_is_valid_bash():
    assert subprocess.run(["bash", "-n", str(SUITE)]).returncode == 0


def test_every_sparkops_command_of_the_suite_parses():
    commands = _sparkops_commands(SUITE.read_text())
    assert len(commands) >= 15  # the registries, gate, ladder, diagnose and ledger steps
    parser = build_parser()
    for argv in commands:
        try:
            parser.parse_args(argv)
        except SystemExit:
            pytest.fail(f"bench/gpu_suite.sh runs `sparkops {' '.join(argv)}`, which does not parse")


def test_every_implementation_the_suite_names_exists():
    from sparkops.plugins import load_catalog

    catalog = load_catalog()
    text = " ".join(_logical_lines(SUITE.read_text()))
    # per-op speed-up factors (kda=3.4), not implementations: after --expect, or in a *_FACTOR variable
    text = re.sub(r"(--expect\s+|_FACTOR=\")[^\s\"]+", " ", text)
    pairs = set(re.findall(r"\b(" + "|".join(OP_NAMES) + r")=([a-z0-9_]+)", text))
    assert len(pairs) >= 20
    missing = [f"{op}={name}" for op, name in sorted(pairs) if name not in catalog.implementations(op)]
    assert not missing, f"bench/gpu_suite.sh names implementations that do not exist: {missing}"
