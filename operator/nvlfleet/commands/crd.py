"""``nvlfleet crd``: print the DeepSeekServing CustomResourceDefinition generated from the models.

``make crd`` writes it to ``crds/nvlfleet.io_deepseekservings.yaml``; a unit test keeps that file equal to this
output.
"""

from __future__ import annotations

import argparse
import sys

from nvlfleet.api import crd


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = "Write it to crds/ with `make crd`; apply it with `kubectl apply --server-side -f -`."


def run(args: argparse.Namespace) -> int:
    sys.stdout.write(crd.render())
    return 0
