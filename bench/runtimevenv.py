"""The interpreter the benchmark runs ``nvlfleet run`` with: the operator image's dependencies and nothing else.

Adapter for the cluster figures (``benchcluster.operator_command``). The development virtualenv also holds the
``kubernetes`` client (the tests and the benchmark's own clients use it), and kopf imports it whenever it is
installed, which the process in the image does not pay (with this virtualenv the operator's RSS on the 56-rack
fleet with no serving went from 81.8 to 71.7 MiB, ``make bench BENCH_ARGS='--only 2 --no-doc'`` at c3d59c9 and at
0129baa, one run each). So the benchmark builds, once per
version of ``requirements/runtime.lock``, a virtualenv the way the Dockerfile's build stage does (the locked
wheels, ``--no-deps``, then ``pip check``), and points it at this checkout's ``operator`` sources with a ``.pth``
file, so the memory and CPU figures are those of the process a cluster would run.
"""

from __future__ import annotations

import hashlib
import pathlib
import shutil
import subprocess
import sys
from collections.abc import Callable

REPO = pathlib.Path(__file__).resolve().parents[1]
LOCK = REPO / "requirements" / "runtime.lock"
ROOT = REPO / ".bench"
_DONE = ".complete"


def python(say: Callable[[str], object] = print) -> pathlib.Path:
    """The runtime virtualenv's interpreter, built first if this lock's virtualenv is not there yet."""
    digest = hashlib.sha256(LOCK.read_bytes()).hexdigest()[:12]
    home = ROOT / f"runtime-venv-{digest}"
    interpreter = home / "bin" / "python"
    if (home / _DONE).exists():
        return interpreter
    say(f"    building the operator's runtime virtualenv from {LOCK.relative_to(REPO)} in {home}")
    shutil.rmtree(home, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(home)], check=True)
    pip = [sys.executable, "-m", "pip", "--python", str(interpreter), "--disable-pip-version-check"]
    install = ["install", "--quiet", "--no-deps", "--only-binary=:all:", "--requirement", str(LOCK)]
    subprocess.run([*pip, *install], check=True)
    subprocess.run([*pip, "check"], check=True, stdout=subprocess.DEVNULL)
    site = subprocess.run(
        [str(interpreter), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    (pathlib.Path(site) / "nvlfleet-checkout.pth").write_text(f"{REPO / 'operator'}\n")
    (home / _DONE).write_text(digest + "\n")
    return interpreter
