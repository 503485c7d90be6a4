# syntax=docker/dockerfile:1
# The vllm-router image nvlfleet renders by default (spec.router.image, ghcr.io/nvlfleet/vllm-router:0.1.17):
# the vLLM project's router from PyPI, pinned to the release whose flags nvlfleet packages
# (operator/nvlfleet/facts/data/vllm-router/0.1.17/), on the operator image's slim Python base.
#
#   docker build -f router.Dockerfile -t ghcr.io/nvlfleet/vllm-router:0.1.17 .
#
# Not built or pushed by this repository's CI yet; the wheel it installs is the one the unit tests parse the
# rendered command line with (tests/unit/test_router.py). It runs as the numeric user the router's pod
# securityContext names (runAsUser 65532, runAsNonRoot) with a read-only root filesystem: the router writes
# nothing (logs go to stdout unless --log-dir is given, and nvlfleet gives none).
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm
FROM ${PYTHON_IMAGE}
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_ROOT_USER_ACTION=ignore \
    PYTHONDONTWRITEBYTECODE=1
RUN python -m pip install --only-binary=:all: vllm-router==0.1.17 \
 && python -m pip check
USER 65532:65532
ENTRYPOINT ["vllm-router"]
