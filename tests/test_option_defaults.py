"""Each option's default is written once (issue 40): in its command's options dataclass
(``run/options.py``). The CLI's options take it at registration (``commands/options.take_defaults``)
and the API's signatures are made from the fields (``api_types.api_command``); this holds the three
equal, and holds that no CLI option of a field writes a default of its own."""

from __future__ import annotations

import dataclasses
import inspect as pyinspect
from typing import Any

import pytest
import typer

import dflash_ckpt
from dflash_ckpt.cli import app
from dflash_ckpt.run.inspect_options import InspectOptions
from dflash_ckpt.run.options import NormalizeOptions, ProbeOptions, SmokeOptions

COMMANDS = [("inspect", InspectOptions, dflash_ckpt.inspect), ("normalize", NormalizeOptions, dflash_ckpt.normalize),
            ("smoke-run", SmokeOptions, dflash_ckpt.smoke_run), ("probe-taps", ProbeOptions, dflash_ckpt.probe_taps)]


def field_default(f: dataclasses.Field[Any]) -> Any:
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


@pytest.mark.parametrize("name,options,api", COMMANDS, ids=[c[0] for c in COMMANDS])
def test_cli_api_and_dataclass_defaults_are_one(name: str, options: type, api: Any) -> None:
    click_params = {p.name: p for p in typer.main.get_command(app).commands[name].params}  # type: ignore[attr-defined]
    api_params = pyinspect.signature(api).parameters
    fields = dataclasses.fields(options)
    seen = 0
    for f in fields:
        want = field_default(f)
        if f.name in click_params:
            seen += 1
            got = click_params[f.name].default
            if want is dataclasses.MISSING:
                assert click_params[f.name].required, (name, f.name)
            elif isinstance(want, (list, tuple)):  # a repeatable option: not given is none
                assert not want and got in (None, (), []), (name, f.name, got)
            else:
                got = getattr(got, "value", got)  # an Enum choice (normalize's --external-links)
                assert got == want and type(got) is type(want), (name, f.name, got, want)
        api_default = api_params[f.name].default
        if want is dataclasses.MISSING:
            assert api_default is pyinspect.Parameter.empty, (name, f.name)
        else:
            assert (list(api_default) == list(want)) if isinstance(want, (list, tuple)) else api_default == want, (name, f.name)
    assert seen >= len(fields) - 1, (name, seen)  # inspect's draft is the DRAFT... argument


def test_a_field_option_with_a_default_of_its_own_fails_at_registration() -> None:
    from dflash_ckpt.commands.options import DEFAULT, take_defaults

    def command(strict: bool = typer.Option(False, "--strict"), target: str = typer.Option(DEFAULT, "--target")) -> None:
        """A command that writes --strict's default twice."""

    with pytest.raises(ValueError, match="'strict'.*write DEFAULT"):
        take_defaults(command, InspectOptions)

    def fine(strict: bool = typer.Option(DEFAULT, "--strict")) -> None:
        """A command that takes it."""

    assert pyinspect.signature(take_defaults(fine, InspectOptions)).parameters["strict"].default.default is False


@pytest.mark.parametrize("module,options", [("normalize_cmd", NormalizeOptions), ("smoke_cmd", SmokeOptions),
                                            ("probe_cmd", ProbeOptions)])
def test_each_command_builds_its_options_by_name_from_its_own_parameters(module: str, options: type) -> None:
    """The CLI builds its options dataclass with one keyword per field, each value read from the
    command's parameter of that name (``prompt=list(prompt or [])``): a field left out would take
    the dataclass default whatever the user typed, and a value taken from ``locals()`` could be a
    name the body rebinds. Read from the source, so it holds for every option, not only those a run
    exercises."""
    import ast
    from pathlib import Path

    tree = ast.parse((Path(dflash_ckpt.__file__).parent / "commands" / f"{module}.py").read_text())
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
             and n.func.id == options.__name__]
    assert len(calls) == 1, (module, len(calls))
    call = calls[0]
    assert not call.args and all(k.arg is not None for k in call.keywords), module  # no positions, no **
    given = {k.arg: {n.id for n in ast.walk(k.value) if isinstance(n, ast.Name)} for k in call.keywords}
    assert sorted(given) == sorted(f.name for f in dataclasses.fields(options)), module
    command = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and call in list(ast.walk(n))][-1]  # innermost
    params = {a.arg for a in command.args.args + command.args.kwonlyargs}
    rebound = {t.id for n in ast.walk(command) if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    for name, names in given.items():
        assert name in names and name in params and name not in rebound, (module, name, names)
