"""Every option and argument of every `maya` command says what it does in `--help`."""

import typer.main

from emulator.cli import app


def _commands(cmd, path=()):
    yield path, cmd
    for name, sub in getattr(cmd, "commands", {}).items():
        yield from _commands(sub, (*path, name))


def test_every_option_of_every_command_has_help():
    missing = []
    commands = list(_commands(typer.main.get_command(app)))
    assert len(commands) >= 8  # the walk reached the subcommands
    for path, cmd in commands:
        for p in cmd.params:
            text = getattr(p, "help", None)
            if not (text and text.strip()):
                missing.append(f"maya {' '.join(path)} {p.opts[0] if p.opts else p.name}")
    assert not missing, "options without help: " + ", ".join(missing)
