"""The command-line interface of the installed vllm-router wheel, read from its own argparse definition.

Shared by the drift tests (tests/unit/test_router.py) and by whoever refreshes the packaged router facts::

    pip install vllm-router==0.1.17
    PYTHONPATH=tests .venv/bin/python -m support.routerflags \
        > operator/nvlfleet/facts/data/vllm-router/0.1.17/cli-flags.json

``vllm-router`` is the console script ``vllm_router.launch_router:main``; its flags are exactly what
``RouterArgs.add_cli_args`` adds to a parser (what ``vllm-router --help`` prints), and ``RouterArgs.from_cli_args``
plus ``_validate_router_args`` is what the launcher does with them before it starts the Rust router.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import sys
from collections.abc import Sequence
from typing import Any

DISTRIBUTION = "vllm-router"


def installed_version() -> str | None:
    """The version of the installed vllm-router distribution, or None when it is not installed."""
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None


def parser() -> argparse.ArgumentParser:
    """The launcher's parser (``exit_on_error=False`` so a bad argv raises instead of exiting)."""
    from vllm_router.router_args import RouterArgs

    out = argparse.ArgumentParser(prog="vllm-router", exit_on_error=False, add_help=False)
    RouterArgs.add_cli_args(out)
    return out


def _nargs(action: argparse.Action) -> str | None:
    if action.nargs is None:
        return None
    return str(action.nargs)


def _plain(value: Any) -> Any:
    """A default as JSON can hold it (argparse defaults are scalars, lists or dicts here)."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return str(value)


def flags() -> dict[str, dict[str, Any]]:
    """Every long option of the installed launcher: dest, whether it takes values, nargs, choices, default."""
    out: dict[str, dict[str, Any]] = {}
    for action in parser()._actions:
        for spelling in action.option_strings:
            if not spelling.startswith("--"):
                continue
            out[spelling] = {
                "dest": action.dest,
                "takes_value": action.nargs != 0,
                "nargs": _nargs(action),
                "choices": list(action.choices) if action.choices is not None else None,
                "default": _plain(action.default),
            }
    return dict(sorted(out.items()))


def accepts(argv: Sequence[str]) -> Any:
    """Parse ``argv`` (without the program name) as the launcher does and run its own checks (raising on a
    refusal); the ``RouterArgs`` the Rust router would be started with."""
    from vllm_router.router_args import RouterArgs

    args = RouterArgs.from_cli_args(parser().parse_args(list(argv)))
    args._validate_router_args()
    return args


def document() -> dict[str, Any]:
    return {
        "source": f"vllm-router {installed_version()} wheel from PyPI: vllm_router/router_args.py "
        "(RouterArgs.add_cli_args, what `vllm-router --help` prints)",
        "flags": flags(),
    }


if __name__ == "__main__":
    if installed_version() is None:
        sys.exit("vllm-router is not installed: pip install vllm-router==0.1.17")
    json.dump(document(), sys.stdout, indent=2)
    sys.stdout.write("\n")
