"""The demo: a simulated GB200/GB300 NVL72 fleet on the local cluster, served by nvlfleet (`make demo`).

- ``demo``: the steps of ``make demo`` / ``make demo-down`` (``up``, ``down``), the report it prints;
- ``agent``: the background process standing in for the NVIDIA driver and the vLLM leaders;
- ``workload``: the token rates the simulated leaders serve, each with the public figure behind it.
"""
