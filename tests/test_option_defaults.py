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
