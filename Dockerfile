# syntax=docker/dockerfile:1
# The nvlfleet operator image: `nvlfleet run` in a self-contained virtualenv on a slim Python base.
#
# Two stages. `build` turns pinned wheels (requirements/runtime.lock) and the operator's own wheel into the
# virtualenv /opt/nvlfleet, created without pip; `runtime` is the same base image with only that virtualenv,
# no pip/setuptools, running as a numeric non-root user so Kubernetes can enforce runAsNonRoot.
#
# The base is pinned by its full version tag. Pin it by digest where a registry is reachable
#   docker buildx imagetools inspect python:3.11.14-slim-bookworm   →  --build-arg PYTHON_IMAGE=python@sha256:…
# (the machine this was written on has no registry access, so no digest could be resolved and verified here).
#
# No container engine runs in this repository's CI: tests/integration/test_image_install.py executes this
# file's build-stage RUN steps, unchanged, against a fresh virtualenv and checks the result. Every RUN below
# therefore names paths only through the ENV variables (VENV, WHEELS) or relative to WORKDIR.
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_ROOT_USER_ACTION=ignore \
    VENV=/opt/nvlfleet \
    WHEELS=/wheels
WORKDIR /src

# Build tools, pinned; used by this stage only.
COPY requirements/build.lock requirements/build.lock
RUN python -m pip install --requirement requirements/build.lock

# Dependencies in their own layer: rebuilt only when the lock file changes, not on every source edit.
# Wheels only (no compiler in the image), no resolver surprises (--no-deps on an exact, complete lock).
COPY requirements/runtime.lock requirements/runtime.lock
RUN python -m venv --without-pip "$VENV" \
 && python -m pip --python "$VENV/bin/python" install --no-deps --only-binary=:all: --requirement requirements/runtime.lock

# The operator itself, as a wheel (package data included), then a consistency check of the whole closure and
# byte-compilation: the root filesystem is read-only at run time, so nothing could be compiled then.
COPY pyproject.toml README.md ./
COPY operator operator
RUN python -m pip wheel --no-deps --no-build-isolation --wheel-dir "$WHEELS" . \
 && python -m pip --python "$VENV/bin/python" install --no-deps "$WHEELS"/nvlfleet-*.whl \
 && python -m pip --python "$VENV/bin/python" check \
 && "$VENV/bin/python" -m compileall -q "$VENV"

FROM ${PYTHON_IMAGE} AS runtime
# The base image's own installer is not needed to run the operator.
RUN python -m pip uninstall --yes --quiet setuptools wheel pip
COPY --from=build /opt/nvlfleet /opt/nvlfleet
ENV PATH=/opt/nvlfleet/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# 65532 is the conventional "nonroot" uid/gid (distroless); the Helm chart runs the pod with the same ids.
USER 65532:65532
ENTRYPOINT ["nvlfleet", "run"]
