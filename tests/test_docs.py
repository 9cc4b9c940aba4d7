"""The documents and the command line agree: every command and option that
`subs --help` shows is documented, and the documents name no command or
option of subs that does not exist."""

from __future__ import annotations

import re
from pathlib import Path

import click

from subscriptions.cli import cli

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# `subs [GLOBAL OPTIONS] COMMAND ...` at the start of a piece of code.
_INVOCATION = re.compile(r"^(?:\S*/)?subs((?:\s+(?:-d\s+\S+|--[\w-]+(?:\s+[^\s-]\S*)?))*)\s+([a-z][a-z-]*)(.*)$")
_OPTION = re.compile(r"(?<![\w-])(--[a-z][\w-]*)")
_FENCE = re.compile(r"^```[a-z]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
_SPAN = re.compile(r"`([^`\n]+)`")


def _text() -> str:
    return "\n".join(path.read_text() for path in DOCUMENTS)


def _code(text: str) -> list[str]:
    """Code spans and the lines of fenced blocks, comments cut off."""
    pieces = [line.split("  #")[0] for block in _FENCE.findall(text) for line in block.splitlines()]
    pieces += _SPAN.findall(_FENCE.sub("", text))
    return [piece.strip() for piece in pieces]


def _options(command: click.Command) -> set[str]:
    return {name for param in command.params for name in param.opts + param.secondary_opts if name.startswith("--")}


def _commands() -> dict[str, click.Command]:
    assert isinstance(cli, click.Group)
    return dict(cli.commands)


def test_every_command_and_option_is_documented() -> None:
    text = _text()
    missing = []
    for name, command in _commands().items():
        if f"subs {name}" not in text:
            missing.append(f"subs {name}")
        missing += [f"subs {name} {option}" for option in sorted(_options(command)) if option not in text]
    missing += [f"subs {option}" for option in sorted(_options(cli)) if option not in text]
    assert missing == []


def test_every_option_says_what_it_does_in_its_help() -> None:
    """`--help` is where a user looks first: an option listed with its type
    and default alone (--max-attempts, --backoff-max) said too little."""
    silent = [
        f"subs {name} {param.opts[0]}".replace("subs  ", "subs ")
        for name, command in [("", cli), *_commands().items()]
        for param in command.params
        if isinstance(param, click.Option) and not param.help
    ]
    assert silent == []


def test_the_documents_name_only_commands_and_options_that_exist() -> None:
    commands = _commands()
    global_options = _options(cli) | {"--help", "--version"}
    wrong = []
    for path in DOCUMENTS:
        for code in _code(path.read_text()):
            for match in _INVOCATION.finditer(code):
                before, name, after = match.groups()
                if name not in commands:
                    wrong.append(f"{path.name}: subs {name}")
                    continue
                wrong += [
                    f"{path.name}: subs {option}" for option in _OPTION.findall(before) if option not in global_options
                ]
                known = _options(commands[name]) | global_options
                if name == "systemd-unit":  # LISTEN ARGS follow: listen's options
                    known |= _options(commands["listen"])
                wrong += [
                    f"{path.name}: subs {name} {option}" for option in _OPTION.findall(after) if option not in known
                ]
    assert wrong == []


def test_the_check_finds_an_undocumented_option_and_a_made_up_one() -> None:
    assert "--no-such-option" not in _options(_commands()["listen"])
    text = "Run `subs -d x.fdb listen --no-such-option` or\n```sh\nsubs nothing  # comment --x\n```\n"
    found = [match.groups() for code in _code(text) for match in _INVOCATION.finditer(code)]
    assert sorted((name, _OPTION.findall(after)) for _, name, after in found) == [
        ("listen", ["--no-such-option"]),
        ("nothing", []),
    ]
