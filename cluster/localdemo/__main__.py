"""Command line of the demo: `python -m localdemo up|down|load|agent` (the Makefile's demo, demo-down, demo-load).

Faults print one line naming the step and the log to read (exit 1); `load` refuses what cannot scale with one
line saying what to do (exit 2).
"""

from __future__ import annotations

import argparse
import pathlib
import sys

from localcluster import errors

from localdemo import demo, frontdoor, load
from nvlfleet.api import autoscaling
from nvlfleet.facts import vllm_metrics

_WAITING = autoscaling.Signal.WAITING_REQUESTS.value
_QUEUED = 4 * demo.WAITING_PER_GROUP
_LOAD_HELP = f"""\
Queue N requests at SERVING's simulated decode engines and watch KEDA scale it.

The demo's agent spreads the N requests over the serving's decode leaders ({vllm_metrics.NUM_REQUESTS_WAITING} on
their /metrics). Then one timestamped line per change, until the loop settles or the timeout:
  queue N          what the ScaledObject's query reads from the demo's Prometheus (what KEDA hands the HPA)
  HPA wants D      the decode groups the HPA asks for (ceil(N / target), within minGroups..maxGroups)
  ROLE r/d ready   per role, the groups ready / desired as the operator exports them (the serving dashboard's
                   "Desired vs ready groups" panel)

Needs spec.autoscaling with signal {_WAITING} (the demo gives it to {demo.AUTOSCALED}) and KEDA on the cluster:
make keda-up (python -m localcluster keda up; the first time it builds KEDA, about 20 min).
Exit 0 settled, 1 not settled in time, 2 refused (the line says what to do), 130 Ctrl-C (the queue stays).

examples:
  python -m localdemo load {demo.AUTOSCALED} --waiting {_QUEUED}   # 4 decode groups' worth at the demo's target
  python -m localdemo load {demo.AUTOSCALED} --waiting 0    # drain: back to minGroups after the scale-down window
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m localdemo", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser("up", help="start (or reuse) the demo and print what to look at")
    up.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for every serving to report")
    commands.add_parser("down", help="stop the demo's processes by their recorded PIDs and remove its objects")
    scale = commands.add_parser(
        "load",
        help="queue requests at one serving's decode engines and watch KEDA scale it",
        description=_LOAD_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    scale.add_argument(
        "serving",
        nargs="?",
        default=demo.AUTOSCALED,
        help="DeepSeekServing name in the demo's namespace (default %(default)s, the one the demo autoscales)",
    )
    scale.add_argument(
        "--waiting",
        type=_requests,
        required=True,
        metavar="N",
        help="requests waiting at the serving's decode engines altogether (0: none, the queue drains)",
    )
    scale.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        help="stop watching after this long (default: the serving's stabilisation window for that direction + "
        f"its KEDA polling interval + {load.HPA_SYNC_SECONDS + load.GROUPS_UP_SECONDS} s)",
    )
    scale.add_argument("--no-watch", action="store_true", help="set the queue and exit without watching")
    scale.add_argument(
        "--namespace", default=demo.Options().namespace, help="the demo's namespace (default %(default)s)"
    )
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
        elif args.command == "load":
            options = demo.Options(namespace=args.namespace)
            request = load.Request(args.serving, args.waiting, args.timeout, not args.no_watch, options)
            return load.run(request)
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
    except KeyboardInterrupt:  # `load` says more when it is watching; before that, nothing was changed yet
        print(f"{args.command}: interrupted", file=sys.stderr)
        return load.EXIT_INTERRUPTED
    return 0


def _requests(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"a whole number of requests >= 0, not {text!r}")
    return value


if __name__ == "__main__":
    sys.exit(main())
