"""The ``nvlfleet`` command line: one entry point, one subcommand per job.

Each subcommand lives in ``nvlfleet.commands.<name>`` and exposes ``add_arguments(parser)`` and
``run(args) -> int``. Subcommands are imported only when chosen, so ``nvlfleet validate`` never pays for kopf or
the Kubernetes client. Exit codes: 0 success, 1 bad input or failure, 2 where a command documents it.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from nvlfleet import __version__

# subcommand (= module under nvlfleet.commands) -> one-line help; `--help` lists them in this order.
COMMANDS: dict[str, str] = {
    "validate": "check DeepSeekServing files; print each problem with its field path",
    "crd": "print the DeepSeekServing CustomResourceDefinition generated from the models",
    "plan": "show where each serving's groups would go and what is left per NVLink domain",
    "render": "print every child manifest a serving becomes (LeaderWorkerSets, ComputeDomains, Services)",
    "economics": "tokens/s, speculative yield and revenue per GPU-hour from two saved vLLM /metrics scrapes",
    "simulate": "run simulated vLLM 0.33 endpoints (/metrics, /health, /v1/models) for demos and tests",
    "dashboards": "write the generated Grafana dashboards and Prometheus alerts into the Helm chart",
    "run": "run the operator (kopf) against the current cluster",
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nvlfleet",
        description="Turn a DeepSeekServing into a tuned vLLM fleet on GB200/GB300 NVL72 racks.",
    )
    parser.add_argument("--version", action="version", version=f"nvlfleet {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        sub.add_parser(name, help=COMMANDS[name], add_help=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    if not args_list or args_list[0] not in COMMANDS:
        parser.parse_args(args_list or ["--help"])
        return 1
    name = args_list[0]
    module = importlib.import_module(f"nvlfleet.commands.{name}")
    sub = argparse.ArgumentParser(prog=f"nvlfleet {name}", description=COMMANDS[name])
    module.add_arguments(sub)
    args = sub.parse_args(args_list[1:])
    try:
        return int(module.run(args))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
