"""The simulated KV connector of a vLLM engine: what ``kv_transfer_params`` a prefill answers, and what a decode loads.

Test and demo adapter beside ``protocol`` (which calls it for every completion) and ``vllmsim`` (whose endpoints
carry a ``KvConfig``), not part of the operator's data flow. It plays NixlConnector in pull mode as
``shared/reference/vllm-0.33.0/disaggregation.md`` §4 describes it:

- a producer (``kv_producer``/``kv_both``) given ``do_remote_decode: true`` computes the prompt minus its
  ``backoff`` trailing tokens, generates one token, keeps the blocks for ``kv_lease_duration`` seconds, and returns
  the params decode needs (``do_remote_prefill: true``, ``remote_engine_id``, ``remote_request_id``,
  ``remote_block_ids``, ``remote_host``/``remote_port`` = side-channel host and port + DP rank, ...);
- a consumer given ``do_remote_prefill: true`` "reads" those blocks from the producer's lease: the tokens count as
  ``external_kv_transfer`` and only the rest are computed. A lease that is unknown (another process, a restarted
  producer with a new engine id), expired, or already read is a load failure, and ``kv_load_failure_policy``
  decides: ``fail`` ends the request with an error, ``recompute`` computes the whole prompt locally;
- an engine without a connector ignores the params (vLLM warns) and computes everything.

No bytes move: the lease store (``KvStore``) is shared by the endpoints of one simulator process, which is where
NIXL's side channel and the NVLink read would be. Role names, policy names and defaults come from the packaged
facts (``kv-connectors.json``).
"""

from __future__ import annotations

import dataclasses
import enum
import math
import uuid
from typing import Any

from nvlfleet.facts import disaggregation, facts

BLOCK_SIZE = 256  # tokens per KV block in the simulated engine (the peers' --block-size on GB200)


_KV = disaggregation.load(facts.DEFAULT_VERSION)


class KvRole(enum.StrEnum):
    PRODUCER = "kv_producer"
    CONSUMER = "kv_consumer"
    BOTH = "kv_both"


class FailurePolicy(enum.StrEnum):
    FAIL = "fail"
    RECOMPUTE = "recompute"


def _check_names() -> None:
    """The enums above are exactly the facts' choices: a renamed role or policy fails at import."""
    if {r.value for r in KvRole} != set(_KV.kv_roles):
        raise RuntimeError("kv roles disagree with the packaged kv-connectors.json")
    if {p.value for p in FailurePolicy} != set(_KV.load_failure_policies):
        raise RuntimeError("kv_load_failure_policy choices disagree with the packaged kv-connectors.json")


_check_names()
DEFAULT_FAILURE_POLICY = FailurePolicy(_KV.default_load_failure_policy)
DEFAULT_LEASE_SECONDS = _KV.lease_seconds
DEFAULT_SIDE_CHANNEL_PORT = _KV.default_side_channel_port


@dataclasses.dataclass(frozen=True)
class KvConfig:
    """An engine's ``--kv-transfer-config`` as far as the simulation needs it (NixlConnector, pull mode)."""

    role: KvRole
    failure_policy: FailurePolicy = DEFAULT_FAILURE_POLICY
    side_channel_port: int = DEFAULT_SIDE_CHANNEL_PORT
    lease_seconds: float = DEFAULT_LEASE_SECONDS
    backoff: int = 0  # trailing prompt tokens prefill leaves to decode (1 for V4.1 SWA bounded replay, 0 for R1)
    tp_size: int = 1

    @property
    def produces(self) -> bool:
        return self.role in (KvRole.PRODUCER, KvRole.BOTH)

    @property
    def consumes(self) -> bool:
        return self.role in (KvRole.CONSUMER, KvRole.BOTH)


@dataclasses.dataclass(frozen=True)
class Lease:
    """KV blocks a producer keeps for one finished request until decode reads them or the lease runs out."""

    tokens: int
    expires: float


class KvStore:
    """The producers' leases, by (engine id, request id): what decode engines "read" over NIXL."""

    def __init__(self) -> None:
        self._leases: dict[tuple[str, str], Lease] = {}
        self.loaded = 0  # successful reads
        self.failed = 0  # load failures (unknown, expired or already read)

    def offer(self, engine_id: str, request_id: str, lease: Lease) -> None:
        self._leases[(engine_id, request_id)] = lease

    def take(self, engine_id: str, request_id: str, now: float) -> Lease | None:
        """The lease, removed (decode frees P's blocks once read); None if it is unknown or expired."""
        lease = self._leases.pop((engine_id, request_id), None)
        if lease is None or lease.expires < now:
            self.failed += 1
            return None
        self.loaded += 1
        return lease

    def forget_engine(self, engine_id: str) -> None:
        """A producer engine restarted: its blocks are gone."""
        for key in [k for k in self._leases if k[0] == engine_id]:
            del self._leases[key]


def new_engine_ids(engines: int) -> list[str]:
    """vLLM replaces ``engine_id`` by a uuid4 per process and each DP engine appends ``_dp<rank>``."""
    base = str(uuid.uuid4())
    return [f"{base}_dp{rank}" for rank in range(engines)]


@dataclasses.dataclass(frozen=True)
class Plan:
    """How one request's prompt is served on this engine: tokens computed here, tokens read from a producer,
    whether it generates only one token for a remote decode, and the params to return (None: none)."""

    computed: int
    external: int
    remote_decode: bool = False
    failed: bool = False  # a KV load failed under policy ``fail``: the request ends with an error


def plan(config: KvConfig | None, params: Any, prompt_tokens: int, store: KvStore, now: float) -> Plan:
    """What ``kv_transfer_params`` ask of this engine for a prompt of ``prompt_tokens`` (see the module doc)."""
    if config is None or not isinstance(params, dict):
        return Plan(computed=prompt_tokens, external=0)
    if params.get("do_remote_decode") is True and config.produces:
        return Plan(computed=max(prompt_tokens - config.backoff, 1), external=0, remote_decode=True)
    if params.get("do_remote_prefill") is True and config.consumes:
        lease = store.take(str(params.get("remote_engine_id")), str(params.get("remote_request_id")), now)
        if lease is None or lease.tokens > prompt_tokens:
            if config.failure_policy == FailurePolicy.FAIL:
                return Plan(computed=0, external=0, failed=True)
            return Plan(computed=prompt_tokens, external=0)
        return Plan(computed=prompt_tokens - lease.tokens, external=lease.tokens)
    return Plan(computed=prompt_tokens, external=0)


def producer_params(
    config: KvConfig, store: KvStore, *, engine_id: str, rank: int, request_id: str, host: str, tokens: int, now: float
) -> dict[str, Any]:
    """Keep the request's blocks under a lease and return what decode needs to read them (§4, prefill engine)."""
    store.offer(engine_id, request_id, Lease(tokens=tokens, expires=now + config.lease_seconds))
    blocks = math.ceil(tokens / BLOCK_SIZE)
    return {
        "do_remote_prefill": True,
        "do_remote_decode": False,
        "remote_block_ids": [list(range(blocks))],
        "remote_engine_id": engine_id,
        "remote_request_id": request_id,
        "remote_host": host,
        "remote_port": config.side_channel_port + rank,
        "tp_size": config.tp_size,
        "dcp_size": 1,
        "pp_size": 1,
        "remote_num_tokens": tokens,
        "remote_blocks_expiry_time": None,
        "remote_registration_generation": 0,
        "transfer_mode": "pull",
        "remote_prefill_cached_tokens": 0,
    }
