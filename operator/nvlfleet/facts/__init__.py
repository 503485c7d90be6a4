"""Facts: what nvlfleet knows about the world, as data, and nothing about any one serving.

``facts`` reads the vLLM facts of each supported version (CLI flags, environment variables, the DeepSeek
families, the validation rules), ``disaggregation`` the KV connectors and what P/D needs (per vLLM version),
``vllm_router`` the pinned vllm-router's flags, defaults and policies, ``vllm_metrics`` names the vLLM metric
families nvlfleet reads or charts, and ``hardware`` the GPU and rack shapes. They read the files under ``data/``
(shipped as package data and loaded with ``importlib.resources`` from this package; ``nvlfleet.core.profiles``
reads the tuning profiles under ``data/profiles/`` the same way).

Where it sits: the bottom layer. Everything else may import it; it imports no other nvlfleet layer (only the
standard library and PyYAML) and is pure: no kopf, Kubernetes client, network, clock or chance.
"""
