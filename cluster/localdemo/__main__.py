"""Command line of the demo: `python -m localdemo up|down|agent` (the Makefile's demo and demo-down targets).

Faults print one line naming the step and the log to read (exit 1).
"""

from __future__ import annotations

import argparse
import pathlib
import sys

from localcluster import errors

from localdemo import demo, frontdoor


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m localdemo", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser("up", help="start (or reuse) the demo and print what to look at")
    up.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for every serving to report")
    commands.add_parser("down", help="stop the demo's processes by their recorded PIDs and remove its objects")
    agent = commands.add_parser(
        "agent", help="(background) ComputeDomain stand-in, simulated vLLM leaders, real routers"
    )
    agent.add_argument("--kubeconfig", type=pathlib.Path, required=True)
    agent.add_argument("--namespace", required=True)
    agent.add_argument("--targets-file", type=pathlib.Path, required=True, help="Prometheus file_sd output")
    agent.add_argument("--state-dir", type=pathlib.Path, required=True, help="where router PIDs and logs go")
    agent.add_argument(
        "--measured-traffic",
        action="store_true",
        help="leaders publish no rates of their own: their /metrics count only the requests they answered",
    )
    args = parser.parse_args(argv)
    try:
        if args.command == "up":
            demo.up(demo.Options(timeout=args.timeout))
        elif args.command == "down":
            demo.down()
        else:
            from localdemo import agent as agent_process

            return agent_process.main(
                args.kubeconfig,
                args.namespace,
                args.targets_file,
                args.state_dir,
                measured_traffic=args.measured_traffic,
            )
    except errors.ComponentError as error:
        print(error.line(), file=sys.stderr)
        return 1
    except (demo.DemoError, frontdoor.FrontDoorError, TimeoutError) as error:
        print(f"demo: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
