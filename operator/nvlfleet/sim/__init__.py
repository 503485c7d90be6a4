"""The simulator: fake vLLM endpoints (``vllmsim``: ``/metrics``, ``/health``, ``/v1/models``) for demos and tests.

Where it sits: outside the operator's data flow, standing in for the vLLM pods whose metrics enter the telemetry
flow (metrics → rates → economics → gauges). It may import ``nvlfleet.facts`` (and the core and API below it) and
serve HTTP; the operator (``nvlfleet.adapters``) and the artifact generators never import it.
"""
